"""The character the bot plays, read from a file at start-up.

Three kinds of file are read, YAML (.yaml, .yml), JSON (.json) or PNG (.png):
- Écho's own format: the keys of `NATIVE_KEYS`, see bot/characters/echo.yaml;
- a SillyTavern character card exported as JSON, V2/V3 (`"spec": "chara_card_v2"`, fields
  under `data`) or V1 (the same fields at the top level);
- the same card exported as a PNG picture, its JSON in a text chunk (bot/characters/png_card.py).

Texts are stored with `{{char}}` (and the cards' `<BOT>`) already replaced by the character's
name, since it is known here, and with `<USER>` written `{{user}}`: the person's name is known
only at each turn, where `fill_user` or `render_character_prompt` puts it in.

Every problem is a `CharacterError` whose message is one sentence naming the file.

Over 450 lines on purpose: both file formats map onto one `Character`, and each field's reading
and its error message sit together.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.characters.lore import Lorebook, load_lore_file, lorebook_from_card
from bot.characters.png_card import card_text
from bot.clients.outside_files import CARD_PICTURE, CARD_TEXT, CHARACTER_FILE, parse_json, read_bytes, read_document
from bot.errors import CharacterError, LoreError, StateSpecError
from bot.memory.story.state import parse_state_specs
from bot.memory.text import storable

log = logging.getLogger(__name__)

DEFAULT_CHARACTER_FILE = Path(__file__).parent / "echo.yaml"

USER = "{{user}}"
CHAR = "{{char}}"

# Rules go into every reply's system prompt, so each costs tokens on every turn and a long list
# dilutes the ones that matter; past a dozen, the persona is the place for nuance.
MAX_RULES = 12
MAX_RULE_CHARS = 300

NATIVE_KEYS = (
    "name", "language", "persona", "scenario", "greeting", "examples", "rules", "state", "lore", "avatar", "memory",
)  # fmt: skip
# `memory: own` (the default) keeps a character's memories of a person apart from the other
# characters'; `memory: shared` puts them with the default character's (see bot/characters/cast.py).
MEMORY_MODES = ("own", "shared")
CARD_SPECS = ("chara_card_v2", "chara_card_v3")
_V1_KEYS = ("description", "personality", "first_mes", "mes_example")

_CHAR_TOKEN = re.compile(r"\{\{char\}\}|<bot>", re.IGNORECASE)
_USER_TOKEN = re.compile(r"\{\{user\}\}|<user>", re.IGNORECASE)
_START = re.compile(r"^[ \t]*<START>[ \t]*$", re.IGNORECASE | re.MULTILINE)
# SillyTavern's macro for "the user's own system prompt": there is none here to put in.
_ORIGINAL = re.compile(r"\{\{original\}\}", re.IGNORECASE)
_LANGUAGE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")


@dataclass(slots=True)
class Character:
    name: str
    persona: str
    greeting: str = ""
    scenario: str = ""
    # (speaker, line) turns, speaker USER or CHAR, in the order written; consecutive example
    # conversations follow each other.
    example_dialogue: list[tuple[str, str]] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    # Raw `state:` mapping, validated by bot.memory.story.plans.parse_state_specs.
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The character's own language (e.g. "fr"); None when the file does not say (cards).
    language: str | None = None
    # From V2 cards: the card's main prompt, and instructions meant to follow the chat history.
    system_prompt: str = ""
    post_history_instructions: str = ""
    source: Path | None = None
    lore: Lorebook | None = None
    # Shown as the webhook's avatar when the character speaks in a server.
    avatar_url: str | None = None
    shares_memory: bool = False
    # Its name in a characters folder (the file's stem), used in settings and commands.
    key: str = "default"


def load_character(path: str | Path | None) -> Character:
    """The character in `path`, or the bundled Écho when `path` is None."""
    file = Path(path) if path is not None else DEFAULT_CHARACTER_FILE
    document = _storable(_read_document(file))
    if not isinstance(document, Mapping):
        kind = "nothing" if document is None else f"a {type(document).__name__}"
        raise CharacterError(
            f"{file}: expected a mapping of keys (name, persona, ...) at the top level, got {kind}."
        )
    # Cards are JSON or PNG exports. A native file is never read as a V1 card: its misspelt keys
    # must be reported, not dropped with the rest of what a card does not have. A PNG is a card.
    is_png = file.suffix.lower() == ".png"
    is_json = is_png or file.suffix.lower() == ".json"
    if is_json and "spec" in document:
        character = _from_v2_card(file, document)
    elif is_png or (
        is_json
        and any(key in document for key in _V1_KEYS)
        and not any(key in document for key in NATIVE_KEYS if key not in ("name", "scenario", "avatar"))
    ):
        character = _from_card_fields(file, document, kind="V1 card")
    else:
        character = _from_native(file, document)
    log.info(
        "character %r from %s: %d rules, %d example turns, state %s, %d lore entries",
        character.name, file, len(character.rules), len(character.example_dialogue),
        ", ".join(character.state) or "none", len(character.lore.entries) if character.lore else 0,
    )
    return character


def fill_user(text: str, user_name: str) -> str:
    """`text` with `{{user}}` replaced by the name of the person talking."""
    name = " ".join(user_name.split()) or "User"
    # A function replacement: a name holding `\1` or `{{user}}` is inserted as it is.
    return _USER_TOKEN.sub(lambda _: name, text)


def render_character_prompt(character: Character, user_name: str) -> str:
    """The system-prompt part that describes the character (not its rules nor the memory)."""
    parts: list[str] = []
    if character.system_prompt:
        parts.append(character.system_prompt)
    parts.append(f"You are {character.name}.\n{character.persona}")
    if character.language:
        parts.append(f"{character.name}'s own language: {character.language}.")
    if character.scenario:
        parts.append(f"Scenario:\n{character.scenario}")
    if character.example_dialogue:
        lines = [
            f"Examples of how {character.name} talks. Style reference only: these exchanges "
            "are not part of the conversation and did not happen."
        ]
        previous = None
        for speaker, line in character.example_dialogue:
            if speaker == USER and previous == CHAR:
                lines.append("")
            lines.append(f"{USER if speaker == USER else character.name}: {line}")
            previous = speaker
        parts.append("\n".join(lines))
    return fill_user("\n\n".join(parts), user_name)


# --- reading ----------------------------------------------------------------------------------


def _read_document(file: Path) -> Any:
    """The file's document, read by the one guarded reader (bot/clients/outside_files.py)."""
    suffix = file.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json", ".png"):
        raise CharacterError(
            f"{file}: unsupported file type {suffix or '(none)'!r}; use .yaml, .yml, .json or a .png card."
        )
    if suffix == ".png":
        return parse_json(file, card_text(file, read_bytes(file, CARD_PICTURE)), CARD_TEXT)
    return read_document(file, CHARACTER_FILE)


def _storable(value: Any) -> Any:
    """Every text of the parsed file made storable: a JSON or YAML escape such as \\ud800
    decodes to a lone surrogate, which the database and the model's HTTP body refuse."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, Mapping):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def _text(file: Path, doc: Mapping[str, Any], key: str, *, label: str | None = None) -> str:
    """An optional text field; absent or null is empty."""
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CharacterError(f"{file}: {label or key} must be text, got {_kind(value)}.")
    return value.strip()


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"the boolean {value}"
    return f"{type(value).__name__} {value!r}"


def _name(file: Path, doc: Mapping[str, Any], label: str = "name") -> str:
    name = _text(file, doc, "name", label=label)
    if not name:
        raise CharacterError(f"{file}: missing {label}: the character needs a name.")
    if "\n" in name:
        raise CharacterError(f"{file}: {label} must be a single line.")
    return name


def _with_name(text: str, name: str) -> str:
    """`{{char}}` replaced by the name, the cards' `<USER>` written `{{user}}`."""
    return _USER_TOKEN.sub(USER, _CHAR_TOKEN.sub(lambda _: name, text))


def _from_native(file: Path, doc: Mapping[str, Any]) -> Character:
    unknown = [str(key) for key in doc if key not in NATIVE_KEYS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, NATIVE_KEYS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise CharacterError(
            f"{file}: unknown top-level key {key!r}{hint}; the keys are {', '.join(NATIVE_KEYS)}."
        )
    name = _name(file, doc)
    persona = _text(file, doc, "persona")
    if not persona:
        raise CharacterError(f"{file}: persona is empty: describe who {name} is.")
    language = _text(file, doc, "language") or None
    if language is not None and not _LANGUAGE.match(language):
        raise CharacterError(
            f"{file}: language must be a language code such as fr, en or pt-BR, got {language!r}."
        )
    raw_examples = doc.get("examples")
    if raw_examples is None or isinstance(raw_examples, str):
        examples = _parse_mes_example(file, raw_examples or "", name)
    else:
        examples = _native_examples(file, raw_examples)
    memory = _text(file, doc, "memory") or "own"
    if memory not in MEMORY_MODES:
        raise CharacterError(f"{file}: memory must be own or shared, got {memory!r}.")
    lore_name = _text(file, doc, "lore")
    try:
        lore = load_lore_file(file.parent / lore_name) if lore_name else None
    except LoreError as exc:
        raise CharacterError(f"{file}: lore: {exc}") from None
    return Character(
        name=name,
        persona=_with_name(persona, name),
        greeting=_with_name(_text(file, doc, "greeting"), name),
        scenario=_with_name(_text(file, doc, "scenario"), name),
        example_dialogue=[(speaker, _with_name(line, name)) for speaker, line in examples],
        rules=_rules(file, doc.get("rules"), name),
        state=_state(file, doc.get("state")),
        language=language,
        source=file,
        lore=lore,
        avatar_url=_text(file, doc, "avatar") or None,
        shares_memory=memory == "shared",
    )


def _native_examples(file: Path, raw: Any) -> list[tuple[str, str]]:
    if not isinstance(raw, list):
        raise CharacterError(
            f"{file}: examples must be a list of exchanges (user: ..., char: ...) or text, got {_kind(raw)}."
        )
    turns: list[tuple[str, str]] = []
    for index, item in enumerate(raw):
        if (
            not isinstance(item, Mapping)
            or set(item) != {"user", "char"}
            or not all(isinstance(item[k], str) and item[k].strip() for k in ("user", "char"))
        ):
            raise CharacterError(
                f"{file}: examples[{index}] must have exactly two lines of text, user: and char:."
            )
        turns += [(USER, item["user"].strip()), (CHAR, item["char"].strip())]
    return turns


def _rules(file: Path, raw: Any, name: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise CharacterError(f"{file}: rules must be a list of sentences, got {_kind(raw)}.")
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
                "that contains \": \" between quotes."
            )
        if not isinstance(rule, str) or not rule.strip():
            raise CharacterError(f"{file}: rules[{index}] must be a non-empty sentence, got {_kind(rule)}.")
        text = " ".join(rule.split())
        if len(text) > MAX_RULE_CHARS:
            raise CharacterError(
                f"{file}: rules[{index}] is {len(text)} characters long, at most {MAX_RULE_CHARS}: "
                "split it or move the detail to the persona."
            )
        # Rules apply to everyone and are stored once, so no one person's name can go in them.
        if _USER_TOKEN.search(text):
            raise CharacterError(
                f"{file}: rules[{index}] uses {USER}, but rules apply to everyone; "
                "write \"the person you talk with\" instead."
            )
        rules.append(_with_name(text, name))
    return rules


def _state(file: Path, raw: Any) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise CharacterError(
            f"{file}: state must map each name (mood, trust, ...) to its min, max, default and "
            f"max_delta, got {_kind(raw)}."
        )
    for key, spec in raw.items():
        if not isinstance(spec, Mapping):
            raise CharacterError(
                f"{file}: state.{key} must be a mapping of min, max, default and max_delta, got {_kind(spec)}."
            )
    state = {str(key): dict(spec) for key, spec in raw.items()}
    try:
        parse_state_specs(state)
    except StateSpecError as exc:
        raise CharacterError(f"{file}: {exc}.") from None
    return state


# --- SillyTavern cards ------------------------------------------------------------------------


def _from_v2_card(file: Path, doc: Mapping[str, Any]) -> Character:
    spec = doc.get("spec")
    if spec not in CARD_SPECS:
        raise CharacterError(
            f"{file}: unsupported card spec {spec!r}; expected {' or '.join(CARD_SPECS)}."
        )
    data = doc.get("data")
    if not isinstance(data, Mapping):
        raise CharacterError(f"{file}: a {spec} card keeps its fields under data, which is missing.")
    character = _from_card_fields(file, data, kind=f"{spec} card")
    book = data.get("character_book")
    if book:
        try:
            character.lore = lorebook_from_card(file, book)
        except LoreError as exc:
            raise CharacterError(str(exc)) from None
    # Écho's own additions to a card, where SillyTavern lets tools keep theirs.
    extensions = data.get("extensions")
    echo = extensions.get("echo") if isinstance(extensions, Mapping) else None
    if isinstance(echo, Mapping):
        character.avatar_url = _text(file, echo, "avatar", label="data.extensions.echo.avatar") or None
        memory = _text(file, echo, "memory", label="data.extensions.echo.memory") or "own"
        if memory not in MEMORY_MODES:
            raise CharacterError(f"{file}: data.extensions.echo.memory must be own or shared, got {memory!r}.")
        character.shares_memory = memory == "shared"
    character.system_prompt = _with_name(
        _ORIGINAL.sub("", _text(file, data, "system_prompt", label="data.system_prompt")).strip(),
        character.name,
    )
    character.post_history_instructions = _with_name(
        _text(file, data, "post_history_instructions", label="data.post_history_instructions"),
        character.name,
    )
    return character


def _from_card_fields(file: Path, fields: Mapping[str, Any], *, kind: str) -> Character:
    """The V1 fields, shared by both card versions (V2 nests them under `data`)."""
    prefix = "data." if kind != "V1 card" else ""
    name = _name(file, fields, label=f"{prefix}name")
    description = _text(file, fields, "description", label=f"{prefix}description")
    personality = _text(file, fields, "personality", label=f"{prefix}personality")
    if not description and not personality:
        raise CharacterError(
            f"{file}: persona is empty: the {kind} has neither a description nor a personality."
        )
    # SillyTavern's default story string lays the two out the same way.
    persona = "\n".join(
        part
        for part in (description, f"{CHAR}'s personality: {personality}" if personality else "")
        if part
    )
    examples = _parse_mes_example(file, _text(file, fields, "mes_example", label=f"{prefix}mes_example"), name)
    return Character(
        name=name,
        persona=_with_name(persona, name),
        greeting=_with_name(_text(file, fields, "first_mes", label=f"{prefix}first_mes"), name),
        scenario=_with_name(_text(file, fields, "scenario", label=f"{prefix}scenario"), name),
        example_dialogue=[(speaker, _with_name(line, name)) for speaker, line in examples],
        source=file,
    )


def _parse_mes_example(file: Path, text: str, name: str) -> list[tuple[str, str]]:
    """Turns of `<START>`-separated example chats whose lines start with `{{user}}:`,
    `{{char}}:` or the character's name; other lines continue the turn above them."""
    speaker_line = re.compile(
        rf"^\s*(?P<who>\{{\{{user\}}\}}|<user>|\{{\{{char\}}\}}|<bot>|{re.escape(name)})\s*:\s?(?P<line>.*)$",
        re.IGNORECASE,
    )
    turns: list[tuple[str, str]] = []
    orphans = 0
    for block in _START.split(text):
        current: list[list[str]] = []
        for raw_line in block.splitlines():
            match = speaker_line.match(raw_line)
            if match:
                who = USER if _USER_TOKEN.fullmatch(match["who"]) else CHAR
                current.append([who, match["line"].strip()])
            elif raw_line.strip() and current:
                current[-1][1] = f"{current[-1][1]}\n{raw_line.strip()}".strip()
            elif raw_line.strip():
                orphans += 1
        turns += [(who, line) for who, line in current if line]
    if orphans:
        log.warning(
            "%s: %d example line(s) before any `{{user}}:` or `{{char}}:` speaker are ignored",
            file, orphans,
        )
    return turns
