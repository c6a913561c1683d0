"""Follow-ups on dated memories and each person's check-ins: SQL only (migration 0011).

A row of `followups` per memory followed up, which is why one is never followed up twice; the
states are described in migrations/0011_followups_imports.sql. Every statement filters on user_id but
`checkin_people`, the sweep that finds who turned check-ins on. Functions taking `conn` join the
caller's write transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bot.clients.storage import Connection, Database, Row, fetch_all, fetch_one, from_db, to_db
from bot.memory.model import OwnerKey, PersonId, StoryId

# Follow-ups a check-in is counted by (a conversation's own follow-ups have no claimant).
_CHECKIN_STATES = "('claimed', 'checked_in', 'answered')"


@dataclass(frozen=True, slots=True)
class Due:
    """A dated memory whose date has passed, not followed up yet."""

    memory_id: int
    text: str
    content_hash: str
    event_at: datetime
    created_at: datetime
    type: str
    pinned: bool


@dataclass(frozen=True, slots=True)
class FollowupRow:
    memory_id: int
    text: str
    content_hash: str
    event_at: datetime
    story_id: StoryId
    state: str
    turns: int


@dataclass(frozen=True, slots=True)
class CheckinSettings:
    enabled: bool = False
    timezone: str | None = None
    notice: str | None = None


_DUE = (
    "SELECT m.id AS memory_id, m.text, m.content_hash, m.expires_at, m.created_at, m.type, m.pinned FROM memories m "
    "WHERE m.user_id = ? AND m.type <> 'rule' AND m.expires_at IS NOT NULL "
    "AND m.expires_at <= ? AND m.expires_at > ? "
    "AND (m.scope = 'global' OR m.story_id = ?) AND (m.place IS NULL OR m.place = ? OR ? = 1) "
    "AND NOT EXISTS (SELECT 1 FROM followups f WHERE f.user_id = ? AND f.memory_id = m.id) "
    # A memory the person rewrote by hand is theirs: its date may no longer say what it says.
    "AND NOT EXISTS (SELECT 1 FROM memory_history h WHERE h.user_id = ? AND h.memory_id = m.id "
    "AND h.operation = 'edit') "
    "ORDER BY m.expires_at DESC, m.id DESC LIMIT ?"
)


async def due(
    db: Database,
    user_id: OwnerKey,
    *,
    now: datetime,
    since: datetime,
    story_id: StoryId | None,
    place: str | None,
    share: bool,
    limit: int = 10,
) -> list[Due]:
    """The user's dated memories whose date passed between `since` and `now`, seen from this
    story and place (as recall sees them), not followed up yet; the latest first."""
    rows = await fetch_all(
        db.reader,
        _DUE,
        (user_id, to_db(now), to_db(since), story_id, place, int(share), user_id, user_id, limit),
    )
    return [
        Due(
            int(r["memory_id"]), str(r["text"]), str(r["content_hash"]), from_db(str(r["expires_at"])),
            from_db(str(r["created_at"])), str(r["type"]), bool(r["pinned"]),
        )
        for r in rows
    ]  # fmt: skip


_ROW = "SELECT memory_id, text, content_hash, event_at, story_id, state, turns FROM followups "


def _row(r: Row) -> FollowupRow:
    return FollowupRow(
        int(r["memory_id"]), str(r["text"]), str(r["content_hash"]), from_db(str(r["event_at"])),
        StoryId(str(r["story_id"])), str(r["state"]), int(r["turns"]),
    )  # fmt: skip


# What a turn needs of its story's follow-ups, in one read as it runs beside the model's
# embedding: the latest its turns still carry ('offered') and one awaiting its answer.
_OF_STORY = (
    "SELECT * FROM (" + _ROW + "WHERE user_id = ? AND story_id = ? AND state = 'offered' "
    "ORDER BY updated_at DESC LIMIT 1) AS carried "
    "UNION ALL SELECT * FROM (" + _ROW + "WHERE user_id = ? AND story_id = ? "
    "AND state IN ('asked', 'checked_in') LIMIT 1) AS asked"
)


async def story_followups(db: Database, user_id: OwnerKey, story_id: StoryId) -> list[FollowupRow]:
    """The follow-up this story's turns still carry (state 'offered'), and one whose answer the
    character awaits (asked in a turn or a check-in): at most one of each."""
    return [_row(r) for r in await fetch_all(db.reader, _OF_STORY, (user_id, story_id, user_id, story_id))]


async def offer(
    conn: Connection,
    user_id: OwnerKey,
    d: Due,
    *,
    story_id: StoryId,
    exchange_id: int,
    asked: bool,
    spent: bool,
    now: datetime,
) -> bool:
    """A first turn carried this memory's follow-up. False when it was taken meanwhile (a
    check-in claimed it in another process)."""
    state = "asked" if asked else "spent" if spent else "offered"
    row = await fetch_one(
        conn,
        "INSERT INTO followups (user_id, memory_id, text, content_hash, event_at, story_id, state, turns, "
        "exchange_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?) "
        "ON CONFLICT (user_id, memory_id) DO NOTHING RETURNING memory_id",
        (user_id, d.memory_id, d.text, d.content_hash, to_db(d.event_at), story_id, state, exchange_id, to_db(now),
         to_db(now)),
    )  # fmt: skip
    return row is not None


async def carried(
    conn: Connection, user_id: OwnerKey, memory_id: int, *, exchange_id: int, asked: bool, turns: int, now: datetime
) -> None:
    """One more turn carried the follow-up: asked, spent after `turns` turns, or still offered."""
    await conn.execute(
        "UPDATE followups SET turns = turns + 1, exchange_id = ?, updated_at = ?, "
        "state = CASE WHEN ? = 1 THEN 'asked' WHEN turns + 1 >= ? THEN 'spent' ELSE 'offered' END "
        "WHERE user_id = ? AND memory_id = ? AND state = 'offered'",
        (exchange_id, to_db(now), int(asked), turns, user_id, memory_id),
    )


async def drop(conn: Connection, user_id: OwnerKey, memory_id: int, now: datetime) -> None:
    """The memory was forgotten or changed since it was offered, or its person left the server
    before their check-in: never asked about."""
    await conn.execute(
        "UPDATE followups SET state = 'dropped', updated_at = ? WHERE user_id = ? AND memory_id = ? "
        "AND state IN ('offered', 'asked', 'checked_in', 'claimed')",
        (to_db(now), user_id, memory_id),
    )


async def link_answer(conn: Connection, user_id: OwnerKey, story_id: StoryId, exchange_id: int, now: datetime) -> None:
    """The person wrote in a story where the character asked how an event went (in a turn or a
    check-in): this exchange is the answer, and its reflection is told of the event."""
    await conn.execute(
        "UPDATE followups SET state = 'answered', answer_exchange_id = ?, updated_at = ? "
        "WHERE user_id = ? AND story_id = ? AND state IN ('asked', 'checked_in')",
        (exchange_id, to_db(now), user_id, story_id),
    )


async def of_exchanges(db: Database, user_id: OwnerKey, exchange_ids: list[int]) -> list[int]:
    """The memories whose follow-up was carried or answered by one of these exchanges."""
    rows = []
    for exchange_id in exchange_ids:
        rows += await fetch_all(
            db.reader,
            "SELECT memory_id FROM followups WHERE user_id = ? AND (exchange_id = ? OR answer_exchange_id = ?) "
            "AND state <> 'dropped'",
            (user_id, exchange_id, exchange_id),
        )
    return sorted({int(r["memory_id"]) for r in rows})


async def followed_up(db: Database, user_id: OwnerKey) -> list[FollowupRow]:
    """Every follow-up of the user, newest first (the export, /memory-stats)."""
    rows = await fetch_all(db.reader, _ROW + "WHERE user_id = ? ORDER BY created_at DESC", (user_id,))
    return [_row(r) for r in rows]


# --- check-ins ---------------------------------------------------------------------------------


async def checkin_settings(db: Database, person: PersonId) -> CheckinSettings:
    row = await fetch_one(
        db.reader, "SELECT enabled, timezone, notice FROM checkin_settings WHERE user_id = ?", (person,)
    )
    if row is None:
        return CheckinSettings()
    zone, notice = row["timezone"], row["notice"]
    return CheckinSettings(
        bool(row["enabled"]), str(zone) if zone is not None else None, str(notice) if notice is not None else None
    )


async def set_checkins(
    db: Database, person: PersonId, *, enabled: bool, timezone: str | None, keep_timezone: bool, now: datetime
) -> None:
    """Turn the person's check-ins on or off (and set their time zone, unless `keep_timezone`);
    a notice waiting for them is said by now, so it goes."""
    async with db.write() as conn:
        await conn.execute(
            "INSERT INTO checkin_settings (user_id, enabled, timezone, notice, updated_at) VALUES (?, ?, ?, NULL, ?) "
            "ON CONFLICT (user_id) DO UPDATE SET enabled = excluded.enabled, notice = NULL, "
            "updated_at = excluded.updated_at, "
            "timezone = CASE WHEN ? = 1 THEN checkin_settings.timezone ELSE excluded.timezone END",
            (person, int(enabled), timezone, to_db(now), int(keep_timezone)),
        )


async def blocked(conn: Connection, person: PersonId, now: datetime) -> None:
    """The person's DMs refused a check-in: off, with a notice for their next turn."""
    await conn.execute(
        "UPDATE checkin_settings SET enabled = 0, notice = 'blocked', updated_at = ? WHERE user_id = ?",
        (to_db(now), person),
    )


async def take_notice(db: Database, person: PersonId) -> str | None:
    """The notice waiting for the person, cleared as it is read (said once)."""
    row = await fetch_one(db.reader, "SELECT notice FROM checkin_settings WHERE user_id = ?", (person,))
    if row is None or row["notice"] is None:
        return None
    async with db.write() as conn:
        row = await fetch_one(conn, "SELECT notice FROM checkin_settings WHERE user_id = ?", (person,))
        if row is None or row["notice"] is None:
            return None  # said by another turn meanwhile
        await conn.execute("UPDATE checkin_settings SET notice = NULL WHERE user_id = ?", (person,))
    return str(row["notice"])


async def checkin_people(db: Database) -> list[PersonId]:
    return [
        PersonId(str(r["user_id"]))
        for r in await fetch_all(db.reader, "SELECT user_id FROM checkin_settings WHERE enabled = 1")
    ]


async def checkins_since(conn: Connection | None, db: Database, person: OwnerKey, since: datetime) -> int:
    """Check-ins claimed or sent to the person since `since` (one process's claim counts)."""
    row = await fetch_one(
        conn if conn is not None else db.reader,
        "SELECT COUNT(*) AS n FROM followups WHERE user_id = ? AND claimed_by IS NOT NULL "
        "AND state IN " + _CHECKIN_STATES + " AND created_at >= ?",
        (person, to_db(since)),
    )
    return int(row["n"]) if row is not None else 0


async def claim(conn: Connection, person: OwnerKey, d: Due, *, process: str, now: datetime) -> bool:
    """This process claims the check-in on this memory; False when it was followed up or
    another process holds it."""
    row = await fetch_one(
        conn,
        "INSERT INTO followups (user_id, memory_id, text, content_hash, event_at, story_id, state, claimed_by, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, '', 'claimed', ?, ?, ?) "
        "ON CONFLICT (user_id, memory_id) DO NOTHING RETURNING memory_id",
        (person, d.memory_id, d.text, d.content_hash, to_db(d.event_at), process, to_db(now), to_db(now)),
    )
    return row is not None


async def take_over(
    conn: Connection, person: OwnerKey, memory_id: int, *, process: str, now: datetime, stale_before: datetime
) -> bool:
    """A claim left by a process that stopped before sending (older than `stale_before`) is
    this process's now."""
    row = await fetch_one(
        conn,
        "UPDATE followups SET claimed_by = ?, updated_at = ? WHERE user_id = ? AND memory_id = ? "
        "AND state = 'claimed' AND updated_at < ? RETURNING memory_id",
        (process, to_db(now), person, memory_id, to_db(stale_before)),
    )
    return row is not None


async def claimed(conn: Connection, person: OwnerKey, memory_id: int, process: str) -> bool:
    row = await fetch_one(
        conn,
        "SELECT 1 FROM followups WHERE user_id = ? AND memory_id = ? AND state = 'claimed' AND claimed_by = ?",
        (person, memory_id, process),
    )
    return row is not None


async def checked_in(
    conn: Connection,
    person: OwnerKey,
    memory_id: int,
    *,
    process: str,
    story_id: StoryId,
    exchange_id: int,
    now: datetime,
) -> bool:
    row = await fetch_one(
        conn,
        "UPDATE followups SET state = 'checked_in', story_id = ?, exchange_id = ?, updated_at = ? "
        "WHERE user_id = ? AND memory_id = ? AND state = 'claimed' AND claimed_by = ? RETURNING memory_id",
        (story_id, exchange_id, to_db(now), person, memory_id, process),
    )
    return row is not None


async def release(conn: Connection, person: OwnerKey, memory_id: int, process: str) -> None:
    """The check-in was not sent: the memory may be followed up again (by a turn or later)."""
    await conn.execute(
        "DELETE FROM followups WHERE user_id = ? AND memory_id = ? AND state = 'claimed' AND claimed_by = ?",
        (person, memory_id, process),
    )


async def nothing_to_reflect(conn: Connection, person: OwnerKey, exchange_id: int, now: datetime) -> None:
    """A check-in's exchange: the person said nothing in it, so it is never reflected."""
    await conn.execute(
        "UPDATE exchanges SET reflected_at = ? WHERE user_id = ? AND id = ?", (to_db(now), person, exchange_id)
    )


async def delivered(conn: Connection, person: OwnerKey, exchange_id: int, message_id: str) -> None:
    await conn.execute(
        "UPDATE exchanges SET reply_message_id = ? WHERE user_id = ? AND id = ?", (message_id, person, exchange_id)
    )


async def drop_exchange(conn: Connection, person: OwnerKey, exchange_id: int) -> None:
    """A check-in never sent leaves no exchange behind."""
    await conn.execute("DELETE FROM exchanges WHERE user_id = ? AND id = ?", (person, exchange_id))


async def last_exchange(db: Database, user_id: OwnerKey) -> tuple[datetime, str] | None:
    """When and where (its place) the user last wrote."""
    row = await fetch_one(
        db.reader,
        "SELECT created_at, place FROM exchanges WHERE user_id = ? AND user_message <> '' ORDER BY id DESC LIMIT 1",
        (user_id,),
    )
    if row is None:
        return None
    return from_db(str(row["created_at"])), str(row["place"])


async def writing_times(db: Database, user_id: OwnerKey, since: datetime, limit: int = 1000) -> list[datetime]:
    """When the user wrote since `since` (their messages, not check-ins), newest first."""
    rows = await fetch_all(
        db.reader,
        "SELECT created_at FROM exchanges WHERE user_id = ? AND user_message <> '' AND created_at >= ? "
        "ORDER BY id DESC LIMIT ?",
        (user_id, to_db(since), limit),
    )
    return [from_db(str(r["created_at"])) for r in rows]


async def erase_user_followups(conn: Connection, user_id: OwnerKey) -> None:
    await conn.execute("DELETE FROM followups WHERE user_id = ?", (user_id,))
    await conn.execute("DELETE FROM checkin_settings WHERE user_id = ?", (user_id,))
