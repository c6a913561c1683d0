"""The message catalogue (bot/locales/*.po, read by Babel): every message the code names exists in
every language with the same placeholders, plurals follow each language's rule, locales map."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from bot.engine.memory_commands import Forgotten, Sharing
from bot.i18n import COMMANDS, EN, MESSAGES, day, language, moment, number, text, use_locale
from bot.presenting import answer, memory_pages, receipt_text, stats_text, why_text

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = ("en", "fr", "es", "de")
# The callables that take (key, **values): bot.i18n.text, imported by some as `tr`.
CALLERS = ("text", "tr")


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _forms(message: str | tuple[str, ...]) -> tuple[str, ...]:
    return message if isinstance(message, tuple) else (message,)


def keys_in_code() -> tuple[set[str], set[str]]:
    """Keys named as text("key") or tr("key") in bot/ and cogs/, and the literal starts of
    keys built with an f-string (text(f"why_group_{reason}"))."""
    keys: set[str] = set()
    prefixes: set[str] = set()
    for path in [*(ROOT / "bot").rglob("*.py"), *(ROOT / "cogs").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALLERS):
                continue
            if len(node.args) < 1:
                continue
            key = node.args[0]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                keys.add(key.value)
            elif isinstance(key, ast.JoinedStr) and isinstance(key.values[0], ast.Constant):
                prefixes.add(str(key.values[0].value))
            elif isinstance(key, ast.IfExp):
                keys.update(c.value for c in (key.body, key.orelse) if isinstance(c, ast.Constant))
    return keys, prefixes


def test_the_four_languages_are_there():
    assert sorted(MESSAGES) == sorted(LANGUAGES)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_catalogue_is_complete_with_the_same_keys_placeholders_and_plurals(lang):
    catalogue = MESSAGES[lang]
    assert sorted(catalogue.keys() - EN.keys()) == [] and sorted(EN.keys() - catalogue.keys()) == []
    for key, message in catalogue.items():
        english = EN[key]
        assert isinstance(message, tuple) == isinstance(english, tuple), f"{lang}: {key} plural in one only"
        for form in _forms(message):
            assert form.strip(), f"{lang}: {key} is not translated"
            assert _fields(form) == _fields(_forms(english)[0]), f"{lang}: {key}"


def test_every_message_the_code_names_is_in_the_catalogue():
    keys, prefixes = keys_in_code()
    assert len(keys) > 50, "the scan finds the code's messages"
    assert sorted(keys - EN.keys()) == []
    for prefix in prefixes:
        assert any(key.startswith(prefix) for key in EN), prefix


def test_the_scan_would_see_a_missing_key(tmp_path):
    source = 'from bot.i18n import text\ntext("no_such_message")\ntr("forgot")\n'
    tree = ast.parse(source)
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in CALLERS
    ]
    assert [c.args[0].value for c in calls] == ["no_such_message", "forgot"]
    assert "no_such_message" not in EN


@pytest.mark.parametrize(
    ("lang", "n", "said"),
    [
        ("fr", 0, "0 souvenir choisi"),
        ("fr", 1, "1 souvenir choisi"),
        ("fr", 2, "2 souvenirs choisis"),
        ("en", 0, "0 memories chosen"),
        ("en", 1, "1 memory chosen"),
        ("es", 1, "1 recuerdo elegido"),
        ("es", 0, "0 recuerdos elegidos"),
        ("de", 5, "5 Erinnerungen gewählt"),
    ],
)
def test_plural_forms_follow_each_languages_rule(lang, n, said):
    with use_locale(lang):
        assert text("n_chosen", n=n) == said


@pytest.mark.parametrize(
    ("lang", "tokens", "date", "when"),
    [
        ("en", "8,192", "Dec 4, 2026", "Dec 4, 2026, 10:27\u202fPM"),
        ("fr", "8\u202f192", "4 déc. 2026", "4 déc. 2026, 22:27"),
        ("es", "8.192", "4 dic 2026", "4 dic 2026, 22:27"),
        ("de", "8.192", "04.12.2026", "04.12.2026, 22:27"),
    ],
)
def test_numbers_and_dates_are_written_as_each_language_writes_them(lang, tokens, date, when):
    from datetime import UTC, datetime

    at = datetime(2026, 12, 4, 22, 27, tzinfo=UTC)
    with use_locale(lang):
        assert (number(8192), day(at), moment(at)) == (tokens, date, when)
        # A count is written so too, in its plural: never "8,192 souvenirs" in French.
        assert text("n_memories", n=8192).startswith(tokens)


async def test_the_language_set_for_a_request_holds_in_its_task_and_the_tasks_it_starts():
    import asyncio

    from bot.i18n import current, set_locale

    async def request(locale: str) -> list[str]:
        set_locale(locale)
        await asyncio.sleep(0)
        child = await asyncio.create_task(asyncio.sleep(0, result=current()))
        return [current(), child]

    assert await asyncio.gather(request("fr-FR"), request("de"), request("pt-BR")) == [
        ["fr", "fr"],
        ["de", "de"],
        ["en", "en"],
    ]
    assert current() == "en", "no request leaks its language into another"


def test_no_french_message_hedges_a_plural_with_parentheses():
    hedged = [k for k, m in MESSAGES["fr"].items() for form in _forms(m) if re.search(r"\w\((s|es|e)\)", form)]
    assert hedged == []


@pytest.mark.parametrize(
    ("locale", "lang"),
    [
        ("fr", "fr"),
        ("fr-FR", "fr"),
        ("FR", "fr"),
        ("en-US", "en"),
        ("es-ES", "es"),
        ("es-419", "es"),
        ("de", "de"),
        ("pt-BR", "en"),
        (None, "en"),
        ("", "en"),
    ],
)
def test_a_discord_locale_picks_its_catalogue_or_falls_back_to_english(locale, lang):
    assert language(locale) == lang


def test_french_answers_of_the_memory_commands():
    with use_locale("fr"):
        assert memory_pages([], now=None) == ["Aucun souvenir pour l'instant."]  # type: ignore[arg-type]
        assert answer(Forgotten(3, True)) == "#3 est oublié (voir /history pour le restaurer)."
        assert answer(Forgotten(3, False)) == "Tu n'as pas de souvenir #3."
        assert answer(Sharing(True, changed=True)) == "Le partage entre lieux est maintenant activé."
        assert why_text(None).startswith("Pas encore de tour")
    with use_locale("pt"):
        assert text("remembered", id=4) == "Remembered as #4.", "an unknown language falls back to English"


def test_receipts_are_in_the_users_language():
    with use_locale("fr"):
        assert receipt_text([]) == "Rien de ce message n'est dans mes souvenirs de toi."
    with use_locale("de"):
        assert receipt_text([]) == "Nichts aus dieser Nachricht ist in meinen Erinnerungen an dich."
    assert receipt_text([]) == "Nothing of this message is in my memory of you."


def test_french_stats_agree_with_their_numbers():
    from bot.engine import MemoryStats

    fields = dict.fromkeys(MemoryStats.__dataclass_fields__, 0)
    stats = MemoryStats(
        **{**fields, "total": 1, "pinned": 2, "expired": 1, "cap": 100, "by_type": {}, "never_surfaced": []}
    )
    with use_locale("fr"):
        first = stats_text(stats).splitlines()[0]
        assert first == "1 souvenir sur 100 au plus (aucun) ; 2 épinglés ; 1 expiré (gardé, pas servi)."
        stats.by_type, stats.total = {"fact": 2, "preference": 1}, 3
        assert "(2 faits, 1 préférence)" in stats_text(stats), "every type count in its plural"


@pytest.mark.parametrize("lang", [lang for lang in LANGUAGES if lang != "en"])
def test_command_translations_are_names_discord_accepts(lang):
    translated = COMMANDS[lang]
    assert all(value and value == value.strip() for value in translated.values())
    names = [english for english in translated if re.fullmatch(r"[a-z_-]+", english)]
    assert "memories" in names and "erase-me" in names
    for english in names:
        assert (
            re.fullmatch(r"[-_\w]{1,32}", translated[english]) and translated[english] == translated[english].lower()
        ), english


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_catalogue_passes_gettexts_own_checks(lang):
    """What a translator's tools check on a .po file, by Babel's reader and checkers: the file
    parses strictly, its header names a plural rule, and every plural message has as many forms
    as that rule."""
    with (ROOT / "bot" / "locales" / f"{lang}.po").open("rb") as file:
        catalog = read_po(file, abort_invalid=True)
    assert catalog.plural_forms and catalog.num_plurals >= 1
    assert [(m.id, errors) for m, errors in catalog.check()] == []
    for message in catalog:
        if message.pluralizable:
            assert len(message.string) == catalog.num_plurals and all(message.string), message.id
