"""What the character readers share (Écho's own format in bot/characters/character.py,
SillyTavern's cards in bot/characters/cards.py): the `Character` they give, and the reading of
one field, with its error message naming the file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.characters.lorebook import Lorebook
from bot.characters.macros import at_load
from bot.errors import CharacterError
from bot.memory.text import storable

log = logging.getLogger(__name__)

USER = "{{user}}"
CHAR = "{{char}}"
USER_TOKEN = re.compile(r"\{\{user\}\}|<user>", re.IGNORECASE)
NATIVE_KEYS = (
    "name", "language", "persona", "scenario", "greeting", "examples", "rules", "state", "lore", "avatar", "memory",
)  # fmt: skip
# `memory: own` (the default) keeps a character's memories of a person apart from the other
# characters'; `memory: shared` puts them with the default character's (see bot/characters/cast.py).
MEMORY_MODES = ("own", "shared")
START = re.compile(r"^[ \t]*<START>[ \t]*$", re.IGNORECASE | re.MULTILINE)


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
    # A card's depth prompt (SillyTavern's character's note): put among the recent messages,
    # `depth_prompt_depth` from the end.
    depth_prompt: str = ""
    depth_prompt_depth: int = 4
    source: Path | None = None
    lore: Lorebook | None = None
    # Shown as the webhook's avatar when the character speaks in a server.
    avatar_url: str | None = None
    shares_memory: bool = False
    # Its name in a characters folder (the file's stem), used in settings and commands.
    key: str = "default"
    # What the file holds that Écho does not act on (fields, macros); its lorebook's are the
    # lorebook's own (`Lorebook.ignored`). Each is logged once where it is read.
    ignored: tuple[str, ...] = ()


def storable_document(value: Any) -> Any:
    """Every text of the parsed file made storable (a JSON or YAML escape such as \\ud800
    decodes to a lone surrogate, which the database and the model's HTTP body refuse) and its
    line endings `\\n`: a card saved on Windows is the same card."""
    if isinstance(value, str):
        return storable(value).replace("\r\n", "\n").replace("\r", "\n")
    if isinstance(value, Mapping):
        return {storable_document(k): storable_document(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable_document(v) for v in value]
    return value


def text_field(file: Path, doc: Mapping[str, Any], key: str, *, label: str | None = None) -> str:
    """An optional text field; absent or null is empty."""
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise CharacterError(f"{file}: {label or key} must be text, got {kind_of(value)}.")
    return value.strip()


def kind_of(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"the boolean {value}"
    return f"{type(value).__name__} {value!r}"


def name_field(file: Path, doc: Mapping[str, Any], label: str = "name") -> str:
    name = text_field(file, doc, "name", label=label)
    if not name:
        raise CharacterError(f"{file}: missing {label}: the character needs a name.")
    if "\n" in name:
        raise CharacterError(f"{file}: {label} must be a single line.")
    return name


class Macros:
    """One file's texts read for their load-time macros, the unknown ones gathered."""

    def __init__(self, char: str, fields: Mapping[str, str] | None = None) -> None:
        self.char = char
        self.fields = fields
        self.unknown: set[str] = set()

    def __call__(self, text: str) -> str:
        done, unknown = at_load(text, char=self.char, fields=self.fields)
        self.unknown |= unknown
        return done

    def ignored(self) -> list[str]:
        return [f"{{{{{name}}}}}" for name in sorted(self.unknown)]


def parse_mes_example(file: Path, text: str, name: str) -> list[tuple[str, str]]:
    """Turns of `<START>`-separated example chats whose lines start with `{{user}}:`,
    `{{char}}:` or the character's name; other lines continue the turn above them."""
    speaker_line = re.compile(
        rf"^\s*(?P<who>\{{\{{user\}}\}}|<user>|\{{\{{char\}}\}}|<bot>|{re.escape(name)})\s*:\s?(?P<line>.*)$",
        re.IGNORECASE,
    )
    turns: list[tuple[str, str]] = []
    orphans = 0
    for block in START.split(text):
        current: list[list[str]] = []
        for raw_line in block.splitlines():
            match = speaker_line.match(raw_line)
            if match:
                who = USER if USER_TOKEN.fullmatch(match["who"]) else CHAR
                current.append([who, match["line"].strip()])
            elif raw_line.strip() and current:
                current[-1][1] = f"{current[-1][1]}\n{raw_line.strip()}".strip()
            elif raw_line.strip():
                orphans += 1
        turns += [(who, line) for who, line in current if line]
    if orphans:
        log.warning(
            "%s: %d example line(s) before any `{{user}}:` or `{{char}}:` speaker are ignored",
            file,
            orphans,
        )
    return turns
