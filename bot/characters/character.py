"""The character the bot plays, read from a file at start-up.

Four kinds of file are read, YAML (.yaml, .yml), JSON (.json), PNG (.png) or CHARX (.charx):
- Écho's own format: the keys of `NATIVE_KEYS`, see bot/characters/echo.yaml;
- a SillyTavern character card (bot/characters/cards.py): JSON, V2/V3 (`"spec": "chara_card_v2"`,
  fields under `data`) or V1 (the same fields at the top level), or the same card inside a PNG
  picture (bot/characters/png_card.py) or a CHARX zip (bot/characters/charx_card.py).

Every text is read with its line endings made `\\n` first, and its macros (bot/characters/
macros.py) put in: what is known at load (`{{char}}`, comments...) now, what depends on the
turn (`{{user}}`, the time, dice) by `fill_turn` at each reply. A field or a macro Écho does not
act on is named once in the log and by `make doctor` (`Character.ignored`).

Every problem is a `CharacterError` whose message is one sentence naming the file.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.characters.cards import is_card, read_card
from bot.characters.charx_card import charx_text
from bot.characters.lore_entries import Reading
from bot.characters.lore_files import load_lore_file
from bot.characters.macros import TurnValues, at_turn
from bot.characters.png_card import card_text
from bot.characters.reading import (
    CHAR,
    MEMORY_MODES,
    NATIVE_KEYS,
    USER,
    USER_TOKEN,
    Character,
    Macros,
    kind_of,
    name_field,
    parse_mes_example,
    storable_document,
    text_field,
)
from bot.clients.outside_files import (
    CARD_PICTURE,
    CARD_TEXT,
    CHARACTER_FILE,
    CHARX_CARD,
    parse_json,
    read_bytes,
    read_document,
)
from bot.errors import CharacterError, LoreError, StateSpecError
from bot.memory.story.state import parse_state_specs

# Re-exported: the character's type and its two speakers are named from here by the engine,
# the front ends and the tests.
__all__ = ["CHAR", "USER", "Character", "fill_turn", "load_character", "render_character_prompt"]

log = logging.getLogger(__name__)

DEFAULT_CHARACTER_FILE = Path(__file__).parent / "echo.yaml"

# Rules go into every reply's system prompt, so each costs tokens on every turn and a long list
# dilutes the ones that matter; past a dozen, the persona is the place for nuance.
MAX_RULES = 12
MAX_RULE_CHARS = 300
SUFFIXES = (".yaml", ".yml", ".json", ".png", ".charx")


_LANGUAGE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")


def load_character(path: str | Path | None) -> Character:
    """The character in `path`, or the bundled Écho when `path` is None."""
    file = Path(path) if path is not None else DEFAULT_CHARACTER_FILE
    document = storable_document(_read_document(file))
    if not isinstance(document, Mapping):
        kind = "nothing" if document is None else f"a {type(document).__name__}"
        raise CharacterError(f"{file}: expected a mapping of keys (name, persona, ...) at the top level, got {kind}.")
    character = read_card(file, document) if is_card(file, document) else _from_native(file, document)
    log.info(
        "character %r from %s: %d rules, %d example turns, state %s, %d lore entries",
        character.name,
        file,
        len(character.rules),
        len(character.example_dialogue),
        ", ".join(character.state) or "none",
        len(character.lore.entries) if character.lore else 0,
    )
    if character.ignored:
        log.info("character %s: ignored (Écho does not act on them): %s", file, ", ".join(character.ignored))
    return character


def fill_turn(text: str, values: TurnValues) -> str:
    """`text` with the turn's macros put in: `{{user}}` the person talking, the time, dice..."""
    return at_turn(text, values)


def render_character_prompt(character: Character, values: TurnValues, *, lore_before: str = "") -> str:
    """The system-prompt part that describes the character (not its rules nor the memory);
    `lore_before` is the lore placed before the character's description."""
    parts: list[str] = []
    if character.system_prompt:
        parts.append(character.system_prompt)
    if lore_before:
        parts.append(lore_before)
    parts.append(f"You are {character.name}.\n{character.persona}")
    if character.language:
        parts.append(f"{character.name}'s own language: {character.language}.")
    if character.scenario:
        parts.append(f"Scenario:\n{character.scenario}")
    if character.example_dialogue:
        lines = [
            (
                f"Examples of how {character.name} talks. Style reference only: these exchanges "
                "are not part of the conversation and did not happen."
            )
        ]
        previous = None
        for speaker, line in character.example_dialogue:
            if speaker == USER and previous == CHAR:
                lines.append("")
            lines.append(f"{USER if speaker == USER else character.name}: {line}")
            previous = speaker
        parts.append("\n".join(lines))
    return fill_turn("\n\n".join(parts), values)


# --- reading ----------------------------------------------------------------------------------


def _read_document(file: Path) -> Any:
    """The file's document, read by the one guarded reader (bot/clients/outside_files.py): a
    regular file, bounded in bytes and in what it expands to; a card's JSON read out of its
    picture or its zip, then parsed under the same bounds."""
    suffix = file.suffix.lower()
    if suffix not in SUFFIXES:
        raise CharacterError(
            f"{file}: unsupported file type {suffix or '(none)'!r}; use .yaml, .yml, .json, or a .png or .charx card."
        )
    if suffix == ".png":
        return parse_json(file, card_text(file, read_bytes(file, CARD_PICTURE)), CARD_TEXT)
    if suffix == ".charx":
        return parse_json(file, charx_text(file, read_bytes(file, CHARX_CARD)), CARD_TEXT)
    return read_document(file, CHARACTER_FILE)


def _from_native(file: Path, doc: Mapping[str, Any]) -> Character:
    unknown = [str(key) for key in doc if key not in NATIVE_KEYS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, NATIVE_KEYS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise CharacterError(f"{file}: unknown top-level key {key!r}{hint}; the keys are {', '.join(NATIVE_KEYS)}.")
    name = name_field(file, doc)
    persona = text_field(file, doc, "persona")
    if not persona:
        raise CharacterError(f"{file}: persona is empty: describe who {name} is.")
    language = text_field(file, doc, "language") or None
    if language is not None and not _LANGUAGE.match(language):
        raise CharacterError(f"{file}: language must be a language code such as fr, en or pt-BR, got {language!r}.")
    macros = Macros(name)
    raw_examples = doc.get("examples")
    if raw_examples is None or isinstance(raw_examples, str):
        examples = parse_mes_example(file, macros(raw_examples or ""), name)
    else:
        examples = [(speaker, macros(line)) for speaker, line in _native_examples(file, raw_examples)]
    memory = text_field(file, doc, "memory") or "own"
    if memory not in MEMORY_MODES:
        raise CharacterError(f"{file}: memory must be own or shared, got {memory!r}.")
    persona, scenario = macros(persona), macros(text_field(file, doc, "scenario"))
    lore_name = text_field(file, doc, "lore")
    reading = Reading(
        file.parent / lore_name, char=name, char_key=file.stem, sources={"description": persona, "scenario": scenario}
    )
    try:
        lore = load_lore_file(file.parent / lore_name, reading=reading) if lore_name else None
    except LoreError as exc:
        raise CharacterError(f"{file}: lore: {exc}") from None
    return Character(
        name=name,
        persona=persona,
        greeting=macros(text_field(file, doc, "greeting")),
        scenario=scenario,
        example_dialogue=examples,
        rules=_rules(file, doc.get("rules"), macros),
        state=_state(file, doc.get("state")),
        language=language,
        source=file,
        lore=lore,
        avatar_url=text_field(file, doc, "avatar") or None,
        shares_memory=memory == "shared",
        ignored=tuple(macros.ignored()),
    )


def _native_examples(file: Path, raw: Any) -> list[tuple[str, str]]:
    if not isinstance(raw, list):
        raise CharacterError(
            f"{file}: examples must be a list of exchanges (user: ..., char: ...) or text, got {kind_of(raw)}."
        )
    turns: list[tuple[str, str]] = []
    for index, item in enumerate(raw):
        if (
            not isinstance(item, Mapping)
            or set(item) != {"user", "char"}
            or not all(isinstance(item[k], str) and item[k].strip() for k in ("user", "char"))
        ):
            raise CharacterError(f"{file}: examples[{index}] must have exactly two lines of text, user: and char:.")
        turns += [(USER, item["user"].strip()), (CHAR, item["char"].strip())]
    return turns


def _rules(file: Path, raw: Any, macros: Macros) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise CharacterError(f"{file}: rules must be a list of sentences, got {kind_of(raw)}.")
    if len(raw) > MAX_RULES:
        raise CharacterError(
            f"{file}: {len(raw)} rules, at most {MAX_RULES}: each one is sent with every message, "
            "so merge them or move nuance to the persona."
        )
    rules: list[str] = []
    for index, rule in enumerate(raw):
        if isinstance(rule, Mapping):
            raise CharacterError(
                f"{file}: rules[{index}] must be a sentence, got a mapping; in YAML, put a rule "
                'that contains ": " between quotes.'
            )
        if not isinstance(rule, str) or not rule.strip():
            raise CharacterError(f"{file}: rules[{index}] must be a non-empty sentence, got {kind_of(rule)}.")
        text = " ".join(rule.split())
        if len(text) > MAX_RULE_CHARS:
            raise CharacterError(
                f"{file}: rules[{index}] is {len(text)} characters long, at most {MAX_RULE_CHARS}: "
                "split it or move the detail to the persona."
            )
        # Rules apply to everyone and are stored once, so no one person's name can go in them.
        if USER_TOKEN.search(text):
            raise CharacterError(
                f"{file}: rules[{index}] uses {USER}, but rules apply to everyone; "
                'write "the person you talk with" instead.'
            )
        rules.append(macros(text))
    return rules


def _state(file: Path, raw: Any) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise CharacterError(
            f"{file}: state must map each name (mood, trust, ...) to its min, max, default and "
            f"max_delta, got {kind_of(raw)}."
        )
    for key, spec in raw.items():
        if not isinstance(spec, Mapping):
            raise CharacterError(
                f"{file}: state.{key} must be a mapping of min, max, default and max_delta, got {kind_of(spec)}."
            )
    state = {str(key): dict(spec) for key, spec in raw.items()}
    try:
        parse_state_specs(state)
    except StateSpecError as exc:
        raise CharacterError(f"{file}: {exc}.") from None
    return state
