"""Every word a person reads comes from the catalogue (issue 33, item 5): a test that fails when a
user-visible text is built outside it, two ways.

- By running what builds the texts: every presentation (bot/presenting/: /why with memories,
  lore and story, /memory-stats, /history, the pages of /memories, every command's answer, the
  turn's notes, the receipt) and the terminal's own texts, under a pseudo-language whose every
  message is its key in brackets. Once the brackets, the user's data and the numbers are taken
  out, no letter may be left: a word written in the code shows.
- By reading the front ends (cogs/, bot/terminal/): no string with a word in it is handed to
  what Discord or the terminal shows (a message, an edit, a button's or a menu's label, a form's
  title, a followup, the terminal's `say`) unless it comes from `text(...)`.

The owner's page is in English by design (its templates); what it shares with /why (reasons,
closeness, lore) is checked here with the rest.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot import i18n
from bot.engine import MemoryStats, ReceiptLine, TurnResult
from bot.engine.memory_commands import (
    Edited,
    Erased,
    Exported,
    Forgotten,
    History,
    Pinned,
    Refused,
    Remembered,
    Restored,
    Sharing,
    Why,
)
from bot.memory.choice import REASONS, Slot, TurnFigures, TurnSelection
from bot.memory.model import Cause, HistoryEntry, Memory
from bot.memory.stores.memories import EraseReport
from bot.memory.stores.provenance import MemoryChange
from bot.memory.stores.stories import StoryHistoryEntry
from bot.presenting import LORE_HOW, LORE_LEFT_OUT, answer, memory_pages, receipt_text, turn_text, why_text
from bot.terminal.commands import help_text

ROOT = Path(__file__).resolve().parents[1]
PSEUDO = "xx"
NOW = datetime(2026, 12, 4, 22, 27, tzinfo=UTC)
# The person's own words in the samples: taken out before looking for a stray word.
DATA = [
    "Aime le vélo",
    "Alice",
    "Quel temps ?",
    "The Harbour",
    "harbour",
    "Le port gèle.",
    "chan-1",
    "Camille a déménagé",
    "mood",
]
WORD = re.compile(r"[^\W\d_]{2,}")


def _pseudo(message: str) -> str:
    """A message as its key in brackets, its placeholders kept (what the code fills in)."""
    fields = [f"{{{name}}}" for _, name, _, _ in string.Formatter().parse(message) if name]
    return "⟦" + "·".join(fields) + "⟧"


@pytest.fixture
def pseudo_language() -> Iterator[None]:
    """A catalogue whose every message is bracketed: what is not bracketed was not read from it."""
    i18n.MESSAGES[PSEUDO] = {
        key: tuple(_pseudo(f) for f in value) if isinstance(value, tuple) else _pseudo(value)
        for key, value in i18n.EN.items()
    }
    i18n.PLURALS[PSEUDO] = lambda n: int(n != 1)
    try:
        with i18n.use_locale(PSEUDO):
            yield
    finally:
        del i18n.MESSAGES[PSEUDO], i18n.PLURALS[PSEUDO]


def stray_words(shown: str) -> set[str]:
    """The words of `shown` that came neither from the catalogue nor from the data (dates are
    Babel's, written here in English since Babel has no pseudo-language)."""
    shown = re.sub(r"⟦[^⟧]*⟧", " ", shown)
    for value in sorted([*DATA, i18n.moment(NOW), i18n.day(NOW)], key=len, reverse=True):
        shown = shown.replace(value, " ")
    return set(WORD.findall(shown))


def memory(memory_id: int, **extra: object) -> Memory:
    fields: dict[str, object] = {
        "id": memory_id,
        "user_id": "u",
        "text": "Aime le vélo",
        "type": "fact",
        "scope": "global",
        "story_id": None,
        "place": None,
        "confidence": 1.0,
        "pinned": True,
        "created_at": NOW,
        "updated_at": NOW,
        "expires_at": NOW,
    }
    fields.update(extra)
    return Memory(**fields)  # type: ignore[arg-type]


def selection() -> TurnSelection:
    slots = [
        Slot(
            id=n,
            reason=reason,
            score=score,
            type="fact",
            pinned=n == 1,
            text="Aime le vélo",
            lexical=n == 3,
            series=2 * (n == 2),
        )
        for n, (reason, score) in enumerate(zip(REASONS, (1.2, -0.4, None, 0.3, None, 2.5)), 1)
    ]
    lore = [
        {"name": "The Harbour", "keyword": "harbour", "cost": 40, "kept": True, "left_out": None, "how": how}
        for how in LORE_HOW
    ]
    lore += [
        {
            "name": "The Harbour",
            "keyword": "harbour",
            "cost": 40,
            "kept": False,
            "left_out": why,
            "how": "key",
            "budget": 6000,
            "book_budget": why == "budget",
        }
        for why in LORE_LEFT_OUT
    ]
    story = {
        "anchors": [{"id": 1, "text": "Aime le vélo"}],
        "summary": "Aime le vélo",
        "positions": [{"subject": "Alice", "stance": "Aime le vélo"}],
        "state": {"mood": 2.0},
    }
    return TurnSelection(
        turn_id=1,
        user_id="u",
        story_id="chan-1",
        query="Quel temps ?",
        degraded=True,
        slots=slots,
        rules=["Aime le vélo"],
        created_at=NOW,
        story=story,
        candidates=9,
        lore=lore,
        figures=TurnFigures(prompt_tokens=8192, completion_tokens=120, context_tokens=8192, context_full=True),
    )


def every_text() -> Iterator[tuple[str, str]]:
    history = HistoryEntry(
        id=4,
        user_id="u",
        memory_id=9,
        operation="replace",
        text="Aime le vélo",
        type="fact",
        scope="global",
        pinned=False,
        confidence=1.0,
        created_at=NOW,
        updated_at=NOW,
        archived_at=NOW,
        cause=Cause("forget"),
    )
    removal = StoryHistoryEntry(
        id=1,
        user_id="u",
        story_id="s",
        operation="anchor_removed",
        item_id=3,
        payload={"text": "Aime le vélo"},
        reason="Camille a déménagé",
        cause=Cause.reflection(),
        at=NOW,
    )
    stats = MemoryStats(
        total=1200,
        cap=100,
        by_type={"fact": 2, "preference": 1, "promise": 1, "episode": 5},
        pinned=1,
        expired=2,
        never_surfaced=[memory(5)],
        never_semantic=3,
        turns=40,
        degraded_turns=2,
        pending_reflections=1,
        consolidations=1,
        consolidated_members=3,
    )
    yield "why", why_text(selection())
    yield "why none", why_text(None)
    yield (
        "pages",
        "\n".join(memory_pages([memory(1), memory(2, scope="story", expires_at=None, pinned=False)], now=NOW)),
    )
    yield "no pages", memory_pages([], now=NOW)[0]
    results = [
        Remembered(1),
        Pinned(1, True, True),
        Pinned(1, False, True),
        Pinned(1, True, False),
        Forgotten(1, True),
        Forgotten(1, False),
        Restored(4, 1),
        Restored(4, None),
        Edited(1, 4),
        Edited(1, None),
        Sharing(True, True),
        Sharing(False, False),
        Why(None),
        stats,
        History([history], [removal], []),
        History([], [], []),
        Exported({"memories": [1], "history": [], "exchanges": [1, 2]}),
        Erased(EraseReport(memories=3, history=1)),
        Refused("remember", "too_long", {"most": 500}),
        Refused("edit", "cap", {"held": 3, "cap": 3}),
        Refused("remember", "empty", {}),
        Refused("remember", "rule", {}),
        Refused("remember", "who knows", {}),
    ]
    for result in results:
        yield type(result).__name__, answer(result)
    for failure in ("model_down", "storage_down", "erased"):
        yield failure, turn_text(TurnResult(None, "x", None, None, failure=failure))  # type: ignore[arg-type]
    yield "cut", turn_text(TurnResult("Aime le vélo", "x", None, 1, cut=True))
    change = MemoryChange(memory_id=1, action="replaced", text="Aime le vélo", before="Aime le vélo", at=NOW)
    yield "receipt", receipt_text([ReceiptLine(change, None), ReceiptLine(change, memory(1, text="Le port gèle."))])
    yield "terminal help", help_text()


def test_every_text_a_person_reads_comes_from_the_catalogue(pseudo_language: None) -> None:
    leaks = {name: words for name, shown in every_text() if (words := stray_words(shown))}
    assert leaks == {}


def test_the_check_sees_a_word_written_in_the_code(pseudo_language: None) -> None:
    assert stray_words(f"{i18n.text('remembered', id=3)} Done!") == {"Done"}
    assert stray_words(why_text(selection()) + "\nscore 0.412") == {"score"}


# --- the front ends hand nothing but catalogue texts to what shows them ------------------------

FRONT_ENDS = [*sorted((ROOT / "cogs").rglob("*.py")), *sorted((ROOT / "bot" / "terminal").rglob("*.py"))]
# What Discord or the terminal shows: a call to one of these, or one of these keywords of a call.
SINKS = frozenset({"say", "send", "send_message", "edit_message", "edit_original_response", "reply", "followup"})
SHOWN_KEYWORDS = frozenset({"content", "label", "placeholder", "title", "description"})
CATALOGUE = frozenset(
    {"text", "tr", "answer", "help_text", "turn_text", "cut_note", "storage_failed", "no_memory", "gone_memory"}
)
# Slash commands' names, descriptions and options: Discord shows them translated, by their English
# text, from the catalogue's "command" context (cogs/bot.py's Translator); checked below.
COMMAND_DECLARATIONS = frozenset({"command", "describe", "ContextMenu", "Choice", "rename", "Group"})


def _shown_strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Literal words inside what a sink is handed, outside any catalogue call."""

    def literals(node: ast.AST) -> Iterator[tuple[int, str]]:
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name in CATALOGUE or name in COMMAND_DECLARATIONS:
                return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and WORD.search(node.value):
            yield node.lineno, node.value
        for child in ast.iter_child_nodes(node):
            yield from literals(child)

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = (
            node.func.id
            if isinstance(node.func, ast.Name)
            else node.func.attr
            if isinstance(node.func, ast.Attribute)
            else ""
        )
        if name in COMMAND_DECLARATIONS:
            continue
        if name in SINKS:
            for arg in node.args:
                yield from literals(arg)
        for keyword in node.keywords:
            if keyword.arg in SHOWN_KEYWORDS or (name in SINKS and keyword.arg is None):
                yield from literals(keyword.value)


def test_the_front_ends_show_no_text_written_in_their_code() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for path in FRONT_ENDS
        for line, value in _shown_strings(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        'await say(interaction, "Done!")',
        'await interaction.response.send_message(f"Synced {n} commands.")',
        'discord.ui.Button(label="Erase everything")',
        'await interaction.edit_original_response(content="Erased.")',
        'say(text("pinned") + " and more")',
    ],
)
def test_the_reading_sees_a_text_written_in_a_front_end(source: str) -> None:
    assert list(_shown_strings(ast.parse(source)))


def test_the_reading_lets_catalogue_texts_through() -> None:
    assert not list(
        _shown_strings(
            ast.parse('await say(interaction, text("not_yours"))\nButton(label=text("next"), custom_id="echo:x")')
        )
    )


def _declared_command_texts(tree: ast.AST) -> Iterator[str]:
    """The texts of the application commands (app_commands.command, .describe, .ContextMenu);
    the owners' text command (`@Écho sync`) is a word typed, not shown."""
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if (
            isinstance(node, ast.Call)
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "app_commands"
        ):
            name = func.attr
            if name in ("command", "ContextMenu", "describe"):
                for keyword in node.keywords:
                    value = keyword.value
                    if isinstance(value, ast.Name):  # a module constant such as CHARACTER_OPTION
                        continue
                    if (
                        (keyword.arg in ("name", "description") or name == "describe")
                        and isinstance(value, ast.Constant)
                        and isinstance(value.value, str)
                    ):
                        yield value.value


@pytest.mark.parametrize("lang", ["fr", "es", "de"])
def test_every_slash_command_text_is_translated(lang: str) -> None:
    declared = {t for path in FRONT_ENDS for t in _declared_command_texts(ast.parse(path.read_text(encoding="utf-8")))}
    assert len(declared) > 20, "the reading finds the commands"
    assert sorted(t for t in declared if t not in i18n.COMMANDS[lang]) == []
