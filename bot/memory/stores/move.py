"""Moving a bot from its SQLite file to PostgreSQL: every table copied, then verified.

`python -m bot migrate-store --from sqlite:///data/echo.sqlite3 --to postgresql://…/echo`.
The copy is one PostgreSQL transaction: it lands whole or not at all. Each table is then
counted and checksummed on both sides (its rows in key order, every column). Safe to re-run: a
target that already holds the same rows is verified and left as it is; a target holding other
rows is refused (unless `replace`, which empties it inside the same transaction).

Spans every user by design: it moves the whole database. The statements are assembled from the
constant table and column lists below, never from input.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.clients.postgres import PostgresDatabase
from bot.clients.storage import Database, Row, fetch_all, fetch_one
from bot.errors import MoveRefused

log = logging.getLogger(__name__)

CHUNK_ROWS = 5000

# Bookkeeping the target rebuilds by itself: its triggers (migration 0007) write a user's
# memory versions as the memories and vectors are copied in, so these are not copied; nor are the
# turns' epochs (migration 0009): no turn is under way while the store moves, and each person's
# next turn draws a new one.
DERIVED_TABLES = ("memory_versions", "memory_version_log", "user_epochs")

# Every table of the schema, parents before children, with its columns and its key order.
TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    "memories": (
        (
            "id",
            "user_id",
            "text",
            "type",
            "scope",
            "story_id",
            "place",
            "confidence",
            "pinned",
            "created_at",
            "updated_at",
            "expires_at",
            "source",
            "content_hash",
            "times_candidate",
            "times_served",
            "times_semantic",
        ),
        "id",
    ),
    "memory_history": (
        (
            "id",
            "user_id",
            "memory_id",
            "operation",
            "text",
            "type",
            "scope",
            "story_id",
            "place",
            "confidence",
            "pinned",
            "created_at",
            "updated_at",
            "expires_at",
            "source",
            "archived_at",
            "cause",
            "restored_at",
        ),
        "id",
    ),
    "memory_vectors": (
        ("memory_id", "user_id", "model", "content_hash", "dim", "vector", "embedded_at"),
        "memory_id, model",
    ),
    "exchanges": (
        (
            "id",
            "user_id",
            "user_name",
            "story_id",
            "place",
            "message_id",
            "user_message",
            "reply",
            "created_at",
            "answered_at",
            "reflected_at",
            "reflection_attempts",
            "last_error",
            "settled_at",
            "prompt",
            "reply_choice",
            "reply_message_id",
            "edited_from",
            "deleted_at",
        ),
        "id",
    ),
    "exchange_replies": (("id", "user_id", "exchange_id", "n", "text", "created_at"), "id"),
    "exchange_messages": (
        ("user_id", "exchange_id", "n", "message_id", "text", "marks", "deleted_at"),
        "exchange_id, n",
    ),
    "turns": (("id", "user_id", "story_id", "place", "query", "degraded", "detail", "created_at"), "id"),
    "turn_stats": (("user_id", "turns", "degraded_turns"), "user_id"),
    "user_settings": (("user_id", "share_memories"), "user_id"),
    "turn_log": (
        (
            "id",
            "user_id",
            "story_id",
            "outcome",
            "memory_ms",
            "reply_ms",
            "prompt_tokens",
            "completion_tokens",
            "context_tokens",
            "context_full",
            "created_at",
        ),
        "id",
    ),
    "story_summaries": (("user_id", "story_id", "summary", "updated_at"), "user_id, story_id"),
    "story_anchors": (("id", "user_id", "story_id", "text", "created_at", "cause"), "id"),
    "story_positions": (
        ("id", "user_id", "story_id", "subject", "subject_key", "stance", "justification", "created_at", "updated_at"),
        "id",
    ),
    "story_state": (("user_id", "story_id", "name", "value", "updated_at"), "user_id, story_id, name"),
    "story_history": (
        ("id", "user_id", "story_id", "operation", "item_id", "payload", "reason", "cause", "at"),
        "id",
    ),
    "memory_sources": (("memory_id", "exchange_id", "user_id"), "memory_id, exchange_id"),
    "memory_changes": (
        ("id", "user_id", "exchange_id", "memory_id", "action", "text", "before", "at"),
        "id",
    ),
    "consolidations": (("memory_id", "user_id", "at", "undone_at", "undone_by"), "memory_id"),
    "consolidation_members": (("memory_id", "member_id", "user_id", "history_id"), "memory_id, member_id"),
    "erasures": (("person_hash", "erased_at"), "person_hash, erased_at"),
    "followups": (
        (
            "user_id",
            "memory_id",
            "text",
            "content_hash",
            "event_at",
            "story_id",
            "state",
            "turns",
            "exchange_id",
            "answer_exchange_id",
            "claimed_by",
            "created_at",
            "updated_at",
        ),
        "user_id, memory_id",
    ),
    "checkin_settings": (("user_id", "enabled", "timezone", "notice", "updated_at"), "user_id"),
    "imports": (("user_id", "story_id", "source", "exchanges", "finished_at"), "user_id, story_id, source"),
}
# Statements per table, assembled once from the constants above.
_SELECT_CHUNK = {
    t: "SELECT rowid, " + ", ".join(cols) + " FROM " + t + " WHERE rowid > ? ORDER BY rowid LIMIT ?"
    for t, (cols, _) in TABLES.items()
}
_SELECT_ORDERED = {
    t: "SELECT " + ", ".join(cols) + " FROM " + t + " ORDER BY " + key for t, (cols, key) in TABLES.items()
}
_COUNT = {t: "SELECT COUNT(*) FROM " + t for t in TABLES}
_EMPTY = {t: "DELETE FROM " + t for t in TABLES}
# Tables whose identity must continue past every id SQLite ever gave (AUTOINCREMENT never
# reuses one, even after a delete): sqlite_sequence knows those.
_IDENTITIES = {
    t: "SELECT setval(pg_get_serial_sequence('" + t + "', 'id'), ?, ?)"
    for t, (cols, _) in TABLES.items()
    if cols[0] == "id"
}
_MAX_ID = {t: "SELECT COALESCE(MAX(id), 0) AS highest FROM " + t for t in _IDENTITIES}
# Floats and ints by column type on the PostgreSQL side: SQLite hands back what it stored.
_FLOATS = frozenset({("memories", "confidence"), ("memory_history", "confidence"), ("story_state", "value")})


@dataclass(frozen=True, slots=True)
class TableReport:
    table: str
    rows: int
    checksum: str
    copied: bool  # False: the target already held the same rows


def _normal(table: str, columns: Sequence[str], row: Row) -> list[Any]:
    out: list[Any] = []
    for column, value in zip(columns, row):
        if value is not None and (table, column) in _FLOATS:
            value = float(value)
        elif isinstance(value, memoryview):
            value = bytes(value)
        out.append(value)
    return out


def _digest(rows: list[list[Any]]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(
            json.dumps(
                [v.hex() if isinstance(v, bytes) else repr(v) if isinstance(v, float) else v for v in row]
            ).encode()
        )
        h.update(b"\n")
    return h.hexdigest()[:16]


async def _checksum(db: Database | PostgresDatabase, table: str) -> tuple[int, str]:
    columns = TABLES[table][0]
    rows = [_normal(table, columns, r) for r in await fetch_all(db.reader, _SELECT_ORDERED[table])]
    return len(rows), _digest(rows)


async def _sqlite_sequences(source: Database) -> dict[str, int]:
    rows = await fetch_all(source.reader, "SELECT name, seq FROM sqlite_sequence")
    return {str(r["name"]): int(r["seq"]) for r in rows}


async def move(source: Database, target: PostgresDatabase, *, replace: bool = False) -> list[TableReport]:
    """Copy every table of `source` into `target`, then verify counts and checksums."""
    expected = {t: await _checksum(source, t) for t in TABLES}
    present = {t: await _checksum(target, t) for t in TABLES}
    if present == expected:
        log.info("the target already holds the same rows: nothing to copy")
        return [TableReport(t, n, c, False) for t, (n, c) in expected.items()]
    if any(n for n, _ in present.values()) and not replace:
        held = ", ".join(f"{t} ({n})" for t, (n, _) in present.items() if n)
        raise MoveRefused(
            f"the target database already holds other rows: {held}. Nothing was changed. Copy into "
            "an empty database, or pass --replace to empty this one first (in the same transaction)."
        )
    sequences = await _sqlite_sequences(source)
    async with target.write() as conn:
        for table in reversed(TABLES):
            await conn.execute(_EMPTY[table])
        for table, (columns, _) in TABLES.items():
            last = 0
            while True:
                rows = await fetch_all(source.reader, _SELECT_CHUNK[table], (last, CHUNK_ROWS))
                if not rows:
                    break
                last = int(rows[-1][0])
                records = [tuple(_normal(table, columns, r[1:])) for r in rows]
                await conn.raw.copy_records_to_table(table, records=records, columns=list(columns))
        for table, statement in _IDENTITIES.items():
            row = await fetch_one(conn, _MAX_ID[table])
            highest = max(int(row["highest"]) if row else 0, sequences.get(table, 0))
            # setval(…, 1, false): the next id is 1; setval(…, n, true): the next is n + 1.
            await conn.execute(statement, (max(highest, 1), highest > 0))
    reports: list[TableReport] = []
    for table in TABLES:
        got = await _checksum(target, table)
        if got != expected[table]:
            raise RuntimeError(
                f"table {table} differs after the copy: {got[0]} rows (checksum {got[1]}) for "
                f"{expected[table][0]} (checksum {expected[table][1]}) in the source"
            )
        reports.append(TableReport(table, got[0], got[1], True))
    return reports
