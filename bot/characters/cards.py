"""SillyTavern character cards, read as SillyTavern reads them: V1 (fields at the top level), V2
and V3 (`spec`, fields under `data`), exported as JSON, PNG or CHARX.

What a card holds, and what Écho does with it (README, "Cards", says the same):

- description, personality, scenario, mes_example, first_mes: the character, as SillyTavern's
  default story string lays them out; system_prompt (SillyTavern's `{{original}}` removed: there
  is no main prompt of Écho's to put in), post_history_instructions (after the chat), and the
  depth prompt (`extensions.depth_prompt`, SillyTavern's character's note, put among the recent
  messages at its depth, as the system's text) are honoured;
- character_book: the character's lore (bot/characters/world_info.py);
- a V3 card's nickname stands for `{{char}}`, as the V3 specification says;
- alternate_greetings and group_only_greetings are named as ignored (the terminal greets with
  first_mes; Discord never greets), and so is any field Écho does not know;
- creator_notes, tags, creator, versions, dates, assets: about the card, not the character.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.characters.lore_entries import Reading
from bot.characters.reading import (
    CHAR,
    MEMORY_MODES,
    NATIVE_KEYS,
    START,
    Character,
    Macros,
    name_field,
    parse_mes_example,
    text_field,
)
from bot.characters.world_info import book_from_card, log_ignored
from bot.errors import CharacterError, LoreError

CARD_SPECS = ("chara_card_v2", "chara_card_v3")
V1_KEYS = ("description", "personality", "first_mes", "mes_example")
# Keys of Écho's own format that a V1 card may have too.
_SHARED_NATIVE = ("name", "scenario", "avatar")
# A card's fields that are about the card, not the character: read by nobody, named by nobody.
_ABOUT_THE_CARD = frozenset(
    {
        "creator_notes",
        "creator_notes_multilingual",
        "tags",
        "creator",
        "character_version",
        "source",
        "creation_date",
        "modification_date",
        "assets",
        "extensions",
        "character_book",
    }
)
_READ = frozenset(
    {
        "name",
        "nickname",
        "description",
        "personality",
        "scenario",
        "first_mes",
        "mes_example",
        "system_prompt",
        "post_history_instructions",
    }
)
# SillyTavern's own top-level copy of a V2 card's fields, and its bookkeeping.
_V1_INERT = frozenset(
    {
        "avatar",
        "chat",
        "create_date",
        "talkativeness",
        "fav",
        "creatorcomment",
        "spec",
        "spec_version",
        "data",
        "tags",
        "creator_notes",
        "json_data",
        "date_added",
        "date_last_chat",
        "chat_size",
        "data_size",
    }
)
# Extensions SillyTavern writes on every card that change nothing here.
_INERT_EXTENSIONS = frozenset({"talkativeness", "fav", "world", "echo", "depth_prompt", "chub", "risuai"})


def is_card(file: Path, document: Mapping[str, Any]) -> bool:
    """Cards are JSON, PNG or CHARX exports. A native file is never read as a V1 card: its
    misspelt keys must be reported, not dropped with the rest of what a card does not have."""
    suffix = file.suffix.lower()
    if suffix in (".png", ".charx"):
        return True
    if suffix != ".json":
        return False
    if "spec" in document:
        return True
    return any(key in document for key in V1_KEYS) and not any(
        key in document for key in NATIVE_KEYS if key not in _SHARED_NATIVE
    )


def read_card(file: Path, document: Mapping[str, Any]) -> Character:
    if "spec" not in document:
        return _from_fields(file, document, kind="V1 card", prefix="", ignored=[])
    spec = document.get("spec")
    if spec not in CARD_SPECS:
        raise CharacterError(f"{file}: unsupported card spec {spec!r}; expected {' or '.join(CARD_SPECS)}.")
    data = document.get("data")
    if not isinstance(data, Mapping):
        raise CharacterError(f"{file}: a {spec} card keeps its fields under data, which is missing.")
    ignored = [
        f"data.{k}"
        for k in data
        if k not in _READ and k not in _ABOUT_THE_CARD and k not in ("alternate_greetings", "group_only_greetings")
    ]
    for greetings in ("alternate_greetings", "group_only_greetings"):
        if isinstance(data.get(greetings), list) and data[greetings]:
            ignored.append(f"data.{greetings} ({len(data[greetings])})")
    return _from_fields(file, data, kind=f"{spec} card", prefix="data.", ignored=ignored)


def _from_fields(file: Path, fields: Mapping[str, Any], *, kind: str, prefix: str, ignored: list[str]) -> Character:
    name = name_field(file, fields, label=f"{prefix}name")
    nickname = text_field(file, fields, "nickname", label=f"{prefix}nickname") if prefix else ""
    raw = {
        key: text_field(file, fields, key, label=f"{prefix}{key}")
        for key in (
            "description",
            "personality",
            "scenario",
            "mes_example",
            "system_prompt",
            "post_history_instructions",
            "creator_notes",
        )
    }
    # `<START>` separates example chats; a description that holds some (SillyTavern's default card
    # does) keeps the chats, not the marker, which means nothing to the model.
    for key in ("description", "personality", "scenario"):
        raw[key] = START.sub("", raw[key]).strip()
    if not prefix:
        ignored += [k for k in fields if k not in _READ and k not in _V1_INERT and k not in V1_KEYS]
    if not raw["description"] and not raw["personality"]:
        raise CharacterError(f"{file}: persona is empty: the {kind} has neither a description nor a personality.")
    char = nickname or name
    # The fields a macro may name, read once for `{{char}}` (their own unknown macros are named
    # when the field itself is read below).
    plain = Macros(char)
    card_fields = {key: plain(value) for key, value in raw.items()}
    macros = Macros(char, card_fields)
    # SillyTavern's default story string lays the two out the same way.
    persona = "\n".join(
        part
        for part in (raw["description"], f"{CHAR}'s personality: {raw['personality']}" if raw["personality"] else "")
        if part
    )
    extensions: Mapping[str, Any] = fields["extensions"] if isinstance(fields.get("extensions"), Mapping) else {}
    ignored += [f"{prefix}extensions.{k}" for k in extensions if k not in _INERT_EXTENSIONS]
    depth_prompt, depth = _depth_prompt(extensions, ignored, prefix)
    character = Character(
        name=name,
        persona=macros(persona),
        greeting=macros(text_field(file, fields, "first_mes", label=f"{prefix}first_mes")),
        scenario=macros(raw["scenario"]),
        example_dialogue=parse_mes_example(file, macros(raw["mes_example"]), char),
        # SillyTavern's macro for "the main prompt this card replaces": there is none here.
        system_prompt=macros(raw["system_prompt"].replace("{{original}}", "")).strip(),
        post_history_instructions=macros(raw["post_history_instructions"]),
        depth_prompt=macros(depth_prompt),
        depth_prompt_depth=depth,
        source=file,
    )
    book = fields.get("character_book")
    if book:
        reading = Reading(
            file,
            char=char,
            char_key=file.stem,
            sources={
                "description": card_fields["description"],
                "personality": card_fields["personality"],
                "scenario": card_fields["scenario"],
                "depth_prompt": character.depth_prompt,
                "creator_notes": card_fields["creator_notes"],
            },
        )
        try:
            character.lore = book_from_card(reading, book, where=f"{prefix}character_book")
        except LoreError as exc:
            raise CharacterError(str(exc)) from None
        log_ignored(reading)
        if character.lore is not None and not character.lore.entries:
            character.lore = None
    elif extensions.get("world"):
        ignored.append(f"{prefix}extensions.world ({extensions['world']!r}: export the card with its lorebook)")
    _echo_extensions(file, extensions, character)
    character.ignored = tuple(ignored) + tuple(macros.ignored())
    return character


def _depth_prompt(extensions: Mapping[str, Any], ignored: list[str], prefix: str) -> tuple[str, int]:
    raw = extensions.get("depth_prompt")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("prompt"), str) or not raw["prompt"].strip():
        return "", 4
    depth = raw.get("depth")
    if raw.get("role") not in (None, "system"):
        ignored.append(f"{prefix}extensions.depth_prompt.role (it goes in as the system's text)")
    return raw["prompt"].strip(), depth if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0 else 4


def _echo_extensions(file: Path, extensions: Mapping[str, Any], character: Character) -> None:
    """Écho's own additions to a card, where SillyTavern lets tools keep theirs."""
    echo = extensions.get("echo")
    if not isinstance(echo, Mapping):
        return
    character.avatar_url = text_field(file, echo, "avatar", label="data.extensions.echo.avatar") or None
    memory = text_field(file, echo, "memory", label="data.extensions.echo.memory") or "own"
    if memory not in MEMORY_MODES:
        raise CharacterError(f"{file}: data.extensions.echo.memory must be own or shared, got {memory!r}.")
    character.shares_memory = memory == "shared"
