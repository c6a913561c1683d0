"""Plain values every layer shares: text that can be stored, instants in UTC, row ids.

A leaf module: the clients use these, and the core re-exports them (bot.memory.text,
bot.memory.model), so the clients import nothing of the core.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

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
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"date out of range: {value.isoformat()} has no UTC instant") from None


# SQLite's largest rowid (PostgreSQL's BIGINT): a bigger id names nothing, and cannot even be bound
# to a statement (OverflowError).
MAX_ROW_ID = 2**63 - 1
_ROW_ID = re.compile(r"[0-9]{1,19}")


def row_id(text: str) -> int | None:
    """The id a front end read from outside (a URL, a custom id, a form, a command), or None when
    it cannot name a row: not ASCII digits ("１２" and "²" are digits to int()), 0, or past
    MAX_ROW_ID. Every id from outside goes through this before it reaches the engine."""
    if not _ROW_ID.fullmatch(text):
        return None
    value = int(text)
    return value if 0 < value <= MAX_ROW_ID else None
