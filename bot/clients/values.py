"""Plain values every layer shares: text that can be stored, instants in UTC.

A leaf module: the clients use these, and the core re-exports them (bot.memory.text,
bot.memory.model), so the clients import nothing of the core.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """Text that UTF-8, SQLite and every later read accept: lone surrogates (from a JSON escape,
    a model's byte soup or undecodable terminal input) become U+FFFD and NUL is dropped.

    Every text entering Écho (a message, a model's reply or reflection, a character file) goes
    through this once, where it enters, so nothing downstream has to guard against it."""
    return _UNSTORABLE.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)


def as_utc(value: datetime) -> datetime:
    """`value` in UTC, a naive one read as UTC. ValueError when it has no UTC instant in the
    years 1 to 9999 ("9999-12-31T23:59:59-05:00" parses but has none)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(f"date out of range: {value.isoformat()} has no UTC instant") from None
