"""Read-only queries for the owner's page and the metrics: nothing here writes.

The per-user ones are scoped by `user_id` like every other statement; the bot-wide ones
(counts over every user, the latest turns of anyone) are the operator's view and are listed,
each with its reason, in tests/reliability/test_sql_scoping.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.clients.storage import Database, Row, fetch_all, fetch_one, from_db, to_db
from bot.memory.choice import TurnOutcome, TurnSelection
from bot.memory.model import Memory, OwnerKey, StoryId
from bot.memory.stores.memories import MEMORY_COLUMNS, memory_row, row_to_memory
from bot.memory.stores.turn import turn_from_row

_TURN_LOG_COLUMNS = (
    "user_id, story_id, outcome, memory_ms, reply_ms, prompt_tokens, completion_tokens, "
    "context_tokens, context_full, created_at"
)
_BOT_TURN_LOG = "SELECT " + _TURN_LOG_COLUMNS + " FROM turn_log WHERE created_at >= ? ORDER BY created_at LIMIT ?"
_USER_TURN_LOG = (
    "SELECT " + _TURN_LOG_COLUMNS + " FROM turn_log WHERE user_id = ? AND created_at >= ? ORDER BY created_at LIMIT ?"
)
# A week of a busy bot; past it, the oldest rows of the window are left out of the charts.
MAX_LOG_ROWS = 100_000
_NEVER_SURFACED = (
    "SELECT " + MEMORY_COLUMNS + " "
    "FROM memories WHERE type != 'rule' AND times_served = 0 AND times_candidate >= ? "
    "ORDER BY times_candidate DESC, id LIMIT ?"
)


@dataclass(frozen=True, slots=True)
class TurnLogEntry:
    user_id: OwnerKey
    story_id: StoryId
    outcome: TurnOutcome
    memory_ms: int | None
    reply_ms: int | None
    prompt_tokens: int | None
    completion_tokens: int | None
    context_tokens: int | None
    context_full: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class UserSummary:
    user_id: OwnerKey
    turns: int
    degraded: int
    failed: int
    memories: int
    last_seen: datetime | None
    name: str = ""  # their display name in their last message


@dataclass(frozen=True, slots=True)
class TurnHeader:
    user_id: OwnerKey
    turn_id: int
    story_id: StoryId
    query: str
    degraded: bool
    created_at: datetime
    # The person's display name and the story's name at that turn (older turns: "").
    user_name: str = ""
    story_name: str = ""


@dataclass(frozen=True, slots=True)
class Backlog:
    pending: int  # answered exchanges waiting for their reflection
    set_aside: int  # exchanges whose reflection was given up


@dataclass(frozen=True, slots=True)
class SetAside:
    exchange_id: int
    created_at: datetime
    attempts: int
    error: str


def _log_entry(row: Row) -> TurnLogEntry:
    return TurnLogEntry(
        user_id=row["user_id"],
        story_id=row["story_id"],
        outcome=row["outcome"],
        memory_ms=row["memory_ms"],
        reply_ms=row["reply_ms"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        context_tokens=row["context_tokens"],
        context_full=bool(row["context_full"]),
        created_at=from_db(row["created_at"]),
    )


def _header(row: Row) -> TurnHeader:
    detail = json.loads(row["detail"])
    names = (
        (str(detail.get("user_name") or ""), str(detail.get("story_name") or ""))
        if isinstance(detail, dict)
        else ("", "")
    )
    return TurnHeader(
        row["user_id"],
        row["id"],
        row["story_id"],
        row["query"],
        bool(row["degraded"]),
        from_db(row["created_at"]),
        *names,
    )


# --- the whole bot ---------------------------------------------------------------------------


async def bot_turn_log(db: Database, since: datetime) -> list[TurnLogEntry]:
    rows = await fetch_all(db.reader, _BOT_TURN_LOG, (to_db(since), MAX_LOG_ROWS))
    return [_log_entry(r) for r in rows]


async def user_summaries(db: Database) -> list[UserSummary]:
    """Every user the bot holds something about, most recently seen first."""
    turns = await fetch_all(
        db.reader,
        "SELECT user_id, COUNT(*) AS turns, SUM(CASE WHEN outcome = 'degraded' THEN 1 ELSE 0 END) AS degraded, "
        "SUM(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END) AS failed, MAX(created_at) AS last "
        "FROM turn_log GROUP BY user_id",
    )
    memories = await fetch_all(
        db.reader, "SELECT user_id, COUNT(*) AS memories FROM memories WHERE type != 'rule' GROUP BY user_id"
    )
    # Users who talked before turns were logged, or whose turns all failed to be recorded.
    exchanges = await fetch_all(db.reader, "SELECT user_id, MAX(created_at) AS last FROM exchanges GROUP BY user_id")
    # Each person's display name in their last message: the page shows names, not only ids.
    names = await fetch_all(
        db.reader,
        "SELECT e.user_id, e.user_name FROM exchanges e "
        "JOIN (SELECT user_id, MAX(id) AS id FROM exchanges GROUP BY user_id) last ON e.id = last.id",
    )
    by_user: dict[str, dict[str, Any]] = {}
    for row in exchanges:
        by_user.setdefault(row["user_id"], {})["last"] = row["last"]
    for row in names:
        by_user.setdefault(row["user_id"], {})["name"] = row["user_name"] or ""
    for row in turns:
        entry = by_user.setdefault(row["user_id"], {})
        entry.update(turns=row["turns"], degraded=row["degraded"] or 0, failed=row["failed"] or 0)
        entry["last"] = max(filter(None, (entry.get("last"), row["last"])), default=None)
    for row in memories:
        by_user.setdefault(row["user_id"], {})["memories"] = row["memories"]
    summaries = [
        UserSummary(
            user_id=OwnerKey(user_id),
            turns=int(v.get("turns", 0)),
            degraded=int(v.get("degraded", 0)),
            failed=int(v.get("failed", 0)),
            memories=int(v.get("memories", 0)),
            last_seen=from_db(v.get("last")),
            name=str(v.get("name", "")),
        )
        for user_id, v in by_user.items()
    ]
    return sorted(
        summaries,
        key=lambda s: (s.last_seen is not None, s.last_seen or datetime.min.replace(tzinfo=UTC), s.user_id),
        reverse=True,
    )


async def bot_memory_types(db: Database) -> dict[str, int]:
    rows = await fetch_all(
        db.reader, "SELECT type, COUNT(*) AS held FROM memories WHERE type != 'rule' GROUP BY type ORDER BY type"
    )
    return {r["type"]: int(r["held"]) for r in rows}


async def bot_backlog(db: Database) -> Backlog:
    row = await fetch_one(
        db.reader,
        "SELECT COUNT(*) FILTER (WHERE reflected_at IS NULL AND reply IS NOT NULL) AS pending, "
        "COUNT(*) FILTER (WHERE reflected_at IS NOT NULL AND last_error IS NOT NULL) AS set_aside FROM exchanges",
    )
    return Backlog(int(row["pending"]), int(row["set_aside"])) if row else Backlog(0, 0)


async def bot_never_surfaced(db: Database, min_candidate: int, limit: int) -> list[Memory]:
    """Memories of any user that were candidates often and never chosen, most often first."""
    rows = await fetch_all(db.reader, _NEVER_SURFACED, (min_candidate, limit))
    return [row_to_memory(memory_row(r)) for r in rows]


async def bot_recent_turns(db: Database, limit: int) -> list[TurnHeader]:
    rows = await fetch_all(
        db.reader,
        "SELECT user_id, id, story_id, query, degraded, created_at, detail FROM turns ORDER BY id DESC LIMIT ?",
        (limit,),
    )
    return [_header(r) for r in rows]


# --- one user --------------------------------------------------------------------------------


async def user_turn_log(
    db: Database, user_id: OwnerKey, since: datetime, limit: int = MAX_LOG_ROWS
) -> list[TurnLogEntry]:
    # A negative limit is no limit, as SQLite reads it; PostgreSQL refuses one, so it is spelt out.
    rows = await fetch_all(db.reader, _USER_TURN_LOG, (user_id, to_db(since), limit if limit >= 0 else 2**63 - 1))
    return [_log_entry(r) for r in rows]


async def user_backlog(db: Database, user_id: OwnerKey) -> Backlog:
    row = await fetch_one(
        db.reader,
        "SELECT COUNT(*) FILTER (WHERE reflected_at IS NULL AND reply IS NOT NULL) AS pending, "
        "COUNT(*) FILTER (WHERE reflected_at IS NOT NULL AND last_error IS NOT NULL) AS set_aside FROM exchanges "
        "WHERE user_id = ?",
        (user_id,),
    )
    return Backlog(int(row["pending"]), int(row["set_aside"])) if row else Backlog(0, 0)


async def user_set_aside(db: Database, user_id: OwnerKey, limit: int) -> list[SetAside]:
    rows = await fetch_all(
        db.reader,
        "SELECT id, created_at, reflection_attempts, last_error FROM exchanges "
        "WHERE user_id = ? AND reflected_at IS NOT NULL AND last_error IS NOT NULL ORDER BY id DESC LIMIT ?",
        (user_id, limit),
    )
    return [SetAside(r["id"], from_db(r["created_at"]), int(r["reflection_attempts"]), r["last_error"]) for r in rows]


async def user_recent_turns(db: Database, user_id: OwnerKey, limit: int) -> list[TurnHeader]:
    rows = await fetch_all(
        db.reader,
        "SELECT user_id, id, story_id, query, degraded, created_at, detail FROM turns WHERE user_id = ? "
        "ORDER BY id DESC LIMIT ?",
        (user_id, limit),
    )
    return [_header(r) for r in rows]


async def user_turn(db: Database, user_id: OwnerKey, turn_id: int) -> TurnSelection | None:
    row = await fetch_one(
        db.reader,
        "SELECT story_id, id, query, degraded, detail, created_at FROM turns WHERE user_id = ? AND id = ?",
        (user_id, turn_id),
    )
    if row is None:
        return None
    return turn_from_row(
        user_id, row["story_id"], row["id"], row["query"], row["degraded"], row["detail"], row["created_at"]
    )


async def export_turns(db: Database, user_id: OwnerKey) -> list[dict[str, Any]]:
    """For the data export: every turn kept for /why, with its whole selection."""
    rows = await fetch_all(
        db.reader,
        "SELECT story_id, query, degraded, detail, created_at FROM turns WHERE user_id = ? ORDER BY id",
        (user_id,),
    )
    return [
        {
            "story_id": r["story_id"],
            "message": r["query"],
            "degraded": bool(r["degraded"]),
            "selection": json.loads(r["detail"]),
            "at": r["created_at"],
        }
        for r in rows
    ]
