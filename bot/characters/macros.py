"""SillyTavern's macros in a card's and a lorebook's texts: replaced, or removed, never sent raw.

Two passes, as what they stand for is known at two moments:

- `at_load`, when the file is read: `{{char}}` (and the cards' `<BOT>`, `<CHAR>`; a V3 card's
  nickname when it has one), the card's own fields (`{{description}}`, `{{personality}}`,
  `{{scenario}}`, ...), comments (`{{// ...}}`, `{{comment: ...}}`, `{{hidden_key: ...}}`, and the
  scoped `{{//}} ... {{///}}`), `{{newline}}`, `{{noop}}`, `{{trim}}`, `{{reverse:...}}`. `<USER>`
  is written `{{user}}`. A macro Écho does not know (variables, `{{if}}`, instruct sequences...)
  is removed, and its name is returned so the reader logs it once per file.
- `at_turn`, for each reply: `{{user}}` (the person talking), `{{time}}`, `{{date}}`,
  `{{weekday}}`, `{{isotime}}`, `{{isodate}}`, `{{random}}`, `{{pick}}` and `{{roll}}`. Random
  choices are drawn from a seed the turn gives: the same message draws the same, and `{{pick}}`
  draws the same in the same story and place of the text, as SillyTavern's does in a chat.

Names are case-insensitive; arguments follow `::`, a single `:` (the legacy form, whose list is
comma-separated) or a space. One pass each: a value put in (a person's name holding `{{time}}`)
is never read as a macro.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

_MACRO = re.compile(r"\{\{(?P<body>[^{}]*)\}\}")
_SCOPED_COMMENT = re.compile(r"\{\{\s*//\s*\}\}.*?\{\{\s*///\s*\}\}", re.DOTALL)
_TRIM = re.compile(r"\s*\{\{\s*trim\s*\}\}\s*", re.IGNORECASE)
_LEGACY_CHAR = re.compile(r"<(?:bot|char)>", re.IGNORECASE)
_LEGACY_USER = re.compile(r"<user>", re.IGNORECASE)
_NAME = re.compile(r"\s*(?P<name>//|[A-Za-z_][A-Za-z0-9_]*)\s*(?P<rest>.*)", re.DOTALL)
_DICE = re.compile(r"^(?P<count>\d*)d(?P<sides>\d+)(?P<bonus>[+-]\d+)?$", re.IGNORECASE)
# Dice past these are no throw anyone writes, only work for the server.
MAX_DICE = 100
MAX_SIDES = 1_000_000

# The macros a reply gives values to, left as written at load.
TURN_MACROS = frozenset({"user", "time", "date", "weekday", "isotime", "isodate", "random", "pick", "roll"})
# The card fields a macro may name, by their SillyTavern macro name.
CARD_FIELD_MACROS = {
    "description": "description",
    "personality": "personality",
    "scenario": "scenario",
    "charprompt": "system_prompt",
    "charinstruction": "post_history_instructions",
    "mesexamplesraw": "mes_example",
    "charversion": "character_version",
    "charcreatornotes": "creator_notes",
}
_EMPTY = frozenset({"noop", "original", "persona", "comment", "hidden_key", "//"})


@dataclass(frozen=True, slots=True)
class TurnValues:
    """What the turn's macros stand for."""

    user: str
    now: datetime
    # Draws for {{random}} and {{roll}}: the turn's message.
    seed: str = ""
    # Draws for {{pick}}: the story, so that a pick stays the same in it.
    story: str = ""


def at_load(text: str, *, char: str, fields: Mapping[str, str] | None = None) -> tuple[str, set[str]]:
    """`text` with what is known at load put in; (the text, the names of the macros removed
    because Écho does not know them)."""
    unknown: set[str] = set()
    text = _SCOPED_COMMENT.sub("", text)
    text = _TRIM.sub("", text)
    text = _LEGACY_USER.sub("{{user}}", _LEGACY_CHAR.sub(lambda _: "{{char}}", text))
    values = {key: fields.get(field, "") for key, field in CARD_FIELD_MACROS.items()} if fields else {}

    def replace(found: re.Match[str]) -> str:
        parsed = _NAME.match(found["body"])
        if parsed is None:
            unknown.add(found["body"].strip()[:40] or "(empty)")
            return ""
        name, rest = parsed["name"].lower(), parsed["rest"]
        if name in TURN_MACROS:
            return found.group(0)
        if name in ("char", "bot"):
            return char
        if name in _EMPTY:
            return ""
        if name == "newline":
            return "\n"
        if name == "reverse":
            return _arguments(rest)[0][::-1] if rest else ""
        if name in values:
            return values[name]
        unknown.add(name)
        return ""

    return _MACRO.sub(replace, text), unknown


def at_turn(text: str, values: TurnValues) -> str:
    """`text` with the turn's macros replaced (a text read by `at_load` first)."""
    if "{{" not in text:
        return text
    name = " ".join(values.user.split()) or "User"
    handlers: dict[str, Callable[[list[str], int], str]] = {
        "user": lambda _args, _at: name,
        "time": lambda _args, _at: f"{values.now:%H:%M}",
        "isotime": lambda _args, _at: f"{values.now:%H:%M}",
        "date": lambda _args, _at: f"{values.now:%B} {values.now.day}, {values.now.year}",
        "isodate": lambda _args, _at: f"{values.now:%Y-%m-%d}",
        "weekday": lambda _args, _at: f"{values.now:%A}",
        "random": lambda args, at: _draw(values.seed, text, at).choice(args) if args else "",
        "pick": lambda args, at: _draw(values.story, text, at).choice(args) if args else "",
        "roll": lambda args, at: _roll(args[0] if args else "", _draw(values.seed, text, at)),
    }

    def replace(found: re.Match[str]) -> str:
        parsed = _NAME.match(found["body"])
        handler = handlers.get(parsed["name"].lower()) if parsed else None
        if parsed is None or handler is None:
            return found.group(0)
        return handler(_arguments(parsed["rest"]), found.start())

    return _MACRO.sub(replace, text)


def _arguments(rest: str) -> list[str]:
    """`::a::b`, `:a,b` (commas escaped `\\,`) or ` a`: the list of arguments."""
    rest = rest.strip()
    if rest.startswith("::"):
        return [part.strip() for part in rest[2:].split("::")]
    if rest.startswith(":"):
        parts = re.split(r"(?<!\\),", rest[1:])
        return [part.replace("\\,", ",").strip() for part in parts]
    return [rest] if rest else []


def _draw(seed: str, text: str, at: int) -> random.Random:
    """A generator drawn from the seed and the macro's place in its text: reproducible."""
    digest = hashlib.blake2b(f"{seed}\x00{at}\x00{text}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def _roll(formula: str, draw: random.Random) -> str:
    """`{{roll:1d20}}`, `{{roll::2d6+3}}`, `{{roll:6}}`: the total, or "" for what is not a throw."""
    formula = formula.replace(" ", "")
    dice = _DICE.match(formula if not formula.isdigit() else f"d{formula}")
    if dice is None:
        return ""
    count, sides = int(dice["count"] or 1), int(dice["sides"])
    if not 1 <= count <= MAX_DICE or not 1 <= sides <= MAX_SIDES:
        return ""
    return str(sum(draw.randint(1, sides) for _ in range(count)) + int(dice["bonus"] or 0))
