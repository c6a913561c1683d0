"""SQLite storage of what happens to an exchange after its reply: the alternatives of a regenerate,
settling, the edits and deletes of the user's message, where memories came from (memory_sources)
and what each reflection changed (memory_changes, the receipts).

Every statement filters on user_id, except `message_owner`: a deleted message reaches the bot
without its author, so the owner is looked up by message id first, then everything is scoped.
Functions taking `conn` join the caller's write transaction.

Over 450 lines on purpose: one module for the exchange's whole life (saved, answered, reflected,
regenerated, edited, erased), so its user scoping is read in one place.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from bot.clients.llm_wire import ChatMessage, Image
from bot.clients.storage import Connection, Database, fetch_all, fetch_one, from_db, inserted_id, to_db
from bot.memory.model import ChangeAction, OwnerKey, StoryId
from bot.memory.text import storable

# How much of a turn's message /why keeps (recall writes it; an edit or a delete rewrites it).
TURN_QUERY_CHARS = 2000


@dataclass(frozen=True, slots=True)
class OpenExchange:
    """An answered exchange whose reply can still be regenerated or swiped."""

    id: int
    user_id: OwnerKey
    story_id: StoryId
    reply_message_id: str | None
    prompt: list[ChatMessage] | None
    choice: int
    replies: list[str]


@dataclass(frozen=True, slots=True)
class SettledExchange:
    id: int
    user_id: OwnerKey
    story_id: StoryId
    reply_message_id: str | None


@dataclass(frozen=True, slots=True)
class MessagePart:
    """One front-end message of an exchange: its text, and the marks of its images."""

    message_id: str
    text: str
    marks: str = ""


def message_text(text: str, max_chars: int) -> str:
    """A message's text as an exchange keeps it: storable, trimmed, at most `max_chars`."""
    return storable(text).strip()[:max_chars]


def join_parts(parts: Sequence[MessagePart]) -> str:
    """What the exchange's messages say together: their texts, one a line, then every image mark
    (as a burst is read by the model)."""
    texts = "\n".join(p.text for p in parts if p.text)
    marks = " ".join(p.marks for p in parts if p.marks)
    return f"{texts}\n{marks}" if texts and marks else texts or marks


@dataclass(frozen=True, slots=True)
class MessageExchange:
    """The exchange of one front-end message, as an edit or a delete finds it: `n` is the
    message's place among the exchange's messages."""

    id: int
    user_id: OwnerKey
    story_id: StoryId
    user_message: str
    reflected: bool
    settled: bool
    deleted: bool
    n: int
    message_deleted: bool


@dataclass(frozen=True, slots=True)
class MemoryChange:
    memory_id: int
    action: ChangeAction
    text: str
    before: str | None
    at: datetime


# --- the reply and its alternatives -----------------------------------------------------------


def _encode(value: Any) -> Any:
    # The images a vision model was shown go with the prompt: a regenerate shows them again.
    if isinstance(value, Image):
        return {"__image__": [value.name, value.mime, base64.b64encode(value.data).decode("ascii")]}
    raise TypeError(f"{type(value).__name__} is not part of a prompt")


def _decode(obj: dict[str, Any]) -> Any:
    if set(obj) == {"__image__"}:
        name, mime, data = obj["__image__"]
        return Image(name, mime, base64.b64decode(data))
    return obj


async def hold_reply(
    conn: Connection,
    user_id: OwnerKey,
    exchange_id: int,
    reply: str,
    prompt: Sequence[ChatMessage],
    *,
    now: datetime,
) -> None:
    """Keep an answered exchange open: its prompt for a regenerate, its reply as alternative 1."""
    await conn.execute(
        "UPDATE exchanges SET prompt = ?, reply_choice = 1 WHERE user_id = ? AND id = ?",
        (json.dumps(list(prompt), ensure_ascii=False, default=_encode), user_id, exchange_id),
    )
    await conn.execute(
        "INSERT INTO exchange_replies (user_id, exchange_id, n, text, created_at) VALUES (?, ?, 1, ?, ?)",
        (user_id, exchange_id, reply, to_db(now)),
    )


async def mark_settled_now(conn: Connection, user_id: OwnerKey, exchange_id: int, *, now: datetime) -> None:
    await conn.execute(
        "UPDATE exchanges SET settled_at = ? WHERE user_id = ? AND id = ? AND settled_at IS NULL",
        (to_db(now), user_id, exchange_id),
    )


async def open_exchange(db: Database, user_id: OwnerKey, exchange_id: int) -> OpenExchange | None:
    """The exchange if it is still open (answered, not settled, not deleted), else None."""
    row = await fetch_one(
        db.reader,
        "SELECT id, user_id, story_id, reply_message_id, prompt, reply_choice FROM exchanges "
        "WHERE user_id = ? AND id = ? AND settled_at IS NULL AND reply IS NOT NULL AND deleted_at IS NULL",
        (user_id, exchange_id),
    )
    if row is None:
        return None
    rows = await fetch_all(
        db.reader,
        "SELECT text FROM exchange_replies WHERE user_id = ? AND exchange_id = ? ORDER BY n",
        (user_id, exchange_id),
    )
    prompt = json.loads(row["prompt"], object_hook=_decode) if row["prompt"] else None
    return OpenExchange(
        row["id"], row["user_id"], row["story_id"], row["reply_message_id"], prompt,
        int(row["reply_choice"] or 1), [r["text"] for r in rows],
    )


async def add_alternative(
    conn: Connection, user_id: OwnerKey, exchange_id: int, text: str, *, now: datetime
) -> int | None:
    """Store a new answer and show it. Its number, or None when the exchange is no longer open."""
    row = await fetch_one(
        conn,
        "SELECT COALESCE(MAX(r.n), 0) AS last FROM exchange_replies AS r WHERE r.user_id = ? AND r.exchange_id = ? "
        "AND EXISTS (SELECT 1 FROM exchanges AS e WHERE e.user_id = ? AND e.id = r.exchange_id "
        "AND e.settled_at IS NULL AND e.deleted_at IS NULL)",
        (user_id, exchange_id, user_id),
    )
    n = int(row["last"]) + 1 if row is not None and row["last"] else 0
    if n == 0:
        return None
    await conn.execute(
        "INSERT INTO exchange_replies (user_id, exchange_id, n, text, created_at) VALUES (?, ?, ?, ?, ?)",
        (user_id, exchange_id, n, text, to_db(now)),
    )
    await choose_alternative(conn, user_id, exchange_id, n)
    return n


async def choose_alternative(conn: Connection, user_id: OwnerKey, exchange_id: int, n: int) -> bool:
    """Show (and keep) alternative n: the exchange's reply becomes its text. False when closed."""
    cur = await conn.execute(
        "UPDATE exchanges SET reply_choice = ?, reply = (SELECT r.text FROM exchange_replies AS r "
        "WHERE r.user_id = ? AND r.exchange_id = ? AND r.n = ?) "
        "WHERE user_id = ? AND id = ? AND settled_at IS NULL AND deleted_at IS NULL "
        "AND EXISTS (SELECT 1 FROM exchange_replies AS x WHERE x.user_id = ? AND x.exchange_id = ? AND x.n = ?)",
        (n, user_id, exchange_id, n, user_id, exchange_id, user_id, exchange_id, n),
    )
    return cur.rowcount == 1


async def set_reply_message(
    db: Database, user_id: OwnerKey, exchange_id: int, message_id: str
) -> tuple[StoryId, bool] | None:
    """Where the exchange's reply was posted; returns its story and whether it was reflected
    already (None: no such exchange)."""
    async with db.write() as conn:
        await conn.execute(
            "UPDATE exchanges SET reply_message_id = ? WHERE user_id = ? AND id = ?",
            (message_id, user_id, exchange_id),
        )
        row = await fetch_one(
            conn, "SELECT story_id, reflected_at FROM exchanges WHERE user_id = ? AND id = ?", (user_id, exchange_id)
        )
    return (row["story_id"], row["reflected_at"] is not None) if row else None


# --- settling ---------------------------------------------------------------------------------


async def settle_exchanges(
    db: Database, user_id: OwnerKey, *, now: datetime, exchange_id: int | None = None, story_id: StoryId | None = None
) -> list[SettledExchange]:
    """Settle this user's open exchanges (one, those of one story, or all). Returns those settled.

    The prompt is dropped: it held other people's lines of the channel, kept only for a regenerate.
    """
    select = (
        "SELECT id, user_id, story_id, reply_message_id FROM exchanges WHERE user_id = ? "
        "AND settled_at IS NULL AND reply IS NOT NULL AND (CAST(? AS BIGINT) IS NULL OR id = ?) "
        "AND (CAST(? AS TEXT) IS NULL OR story_id = ?)"
    )
    params = (user_id, exchange_id, exchange_id, story_id, story_id)
    # Read first: every turn asks, and most find nothing open; no write transaction for that.
    if not await fetch_all(db.reader, select, params):
        return []
    settled: list[SettledExchange] = []
    async with db.write() as conn:
        for row in await fetch_all(conn, select, params):
            cur = await conn.execute(
                "UPDATE exchanges SET settled_at = ?, prompt = NULL WHERE user_id = ? AND id = ? AND settled_at IS NULL",
                (to_db(now), user_id, row["id"]),
            )
            if cur.rowcount == 1:
                settled.append(SettledExchange(row["id"], row["user_id"], row["story_id"], row["reply_message_id"]))
    return settled


async def users_with_open_exchanges(db: Database) -> list[OwnerKey]:
    rows = await fetch_all(
        db.reader,
        "SELECT DISTINCT user_id FROM exchanges WHERE settled_at IS NULL AND reply IS NOT NULL",
    )
    return [r["user_id"] for r in rows]


async def recent_speakers(db: Database, since: datetime, limit: int) -> list[tuple[OwnerKey, str]]:
    """(user_id, place) of the exchanges since `since`, the most recent first, at most `limit`."""
    rows = await fetch_all(
        db.reader,
        "SELECT user_id, place FROM exchanges WHERE created_at >= ? "
        "GROUP BY user_id, place ORDER BY MAX(id) DESC LIMIT ?",
        (to_db(since), limit),
    )
    return [(OwnerKey(r["user_id"]), str(r["place"])) for r in rows]


# --- edits and deletes of the user's message -------------------------------------------------


async def message_owner(db: Database, message_id: str) -> OwnerKey | None:
    """Who wrote this front-end message, if it is one of an exchange (a raw delete carries no author)."""
    row = await fetch_one(
        db.reader, "SELECT user_id FROM exchange_messages WHERE message_id = ? LIMIT 1", (message_id,)
    )
    return OwnerKey(row["user_id"]) if row is not None else None


async def message_exchange(db: Database, user_id: OwnerKey, message_id: str) -> MessageExchange | None:
    row = await fetch_one(
        db.reader,
        "SELECT e.id, e.user_id, e.story_id, e.user_message, e.reflected_at, e.settled_at, e.deleted_at, "
        "m.n, m.deleted_at AS message_deleted_at FROM exchange_messages AS m JOIN exchanges AS e ON e.id = m.exchange_id "
        "WHERE m.user_id = ? AND e.user_id = ? AND m.message_id = ? ORDER BY e.id DESC LIMIT 1",
        (user_id, user_id, message_id),
    )
    if row is None:
        return None
    return MessageExchange(
        row["id"], row["user_id"], row["story_id"], row["user_message"], row["reflected_at"] is not None,
        row["settled_at"] is not None, row["deleted_at"] is not None, int(row["n"]), row["message_deleted_at"] is not None,
    )


async def save_parts(conn: Connection, user_id: OwnerKey, exchange_id: int, parts: Sequence[MessagePart]) -> None:
    for n, part in enumerate(parts, 1):
        await conn.execute(
            "INSERT INTO exchange_messages (user_id, exchange_id, n, message_id, text, marks) VALUES (?, ?, ?, ?, ?, ?)",
            (user_id, exchange_id, n, part.message_id, part.text, part.marks),
        )


async def parts_of(conn: Connection, user_id: OwnerKey, exchange_id: int) -> list[MessagePart]:
    """The exchange's messages still there (not deleted), in order."""
    rows = await fetch_all(
        conn,
        "SELECT message_id, text, marks FROM exchange_messages WHERE user_id = ? AND exchange_id = ? "
        "AND deleted_at IS NULL ORDER BY n",
        (user_id, exchange_id),
    )
    return [MessagePart(r["message_id"], r["text"], r["marks"]) for r in rows]


async def set_part_text(conn: Connection, user_id: OwnerKey, exchange_id: int, n: int, text: str) -> bool:
    """The user edited one message of the exchange. False when it is deleted or unchanged."""
    cur = await conn.execute(
        "UPDATE exchange_messages SET text = ? WHERE user_id = ? AND exchange_id = ? AND n = ? "
        "AND deleted_at IS NULL AND text != ?",
        (text, user_id, exchange_id, n, text),
    )
    return cur.rowcount == 1


async def delete_part(conn: Connection, user_id: OwnerKey, exchange_id: int, n: int, *, now: datetime) -> bool:
    """The user deleted one message of the exchange: its text and marks are emptied."""
    cur = await conn.execute(
        "UPDATE exchange_messages SET text = '', marks = '', deleted_at = ? "
        "WHERE user_id = ? AND exchange_id = ? AND n = ? AND deleted_at IS NULL",
        (to_db(now), user_id, exchange_id, n),
    )
    return cur.rowcount == 1


async def edit_message(conn: Connection, user_id: OwnerKey, exchange_id: int, text: str) -> bool:
    """The user edited their message. Not yet reflected: the edited text is what gets reflected.
    Already reflected: it is pending again, as a correction of what the old text produced.

    One statement, so the choice between the two is made on the row as it is at that instant
    (SQLite and PostgreSQL evaluate every SET expression on the old row)."""
    cur = await conn.execute(
        "UPDATE exchanges SET user_message = ?, "
        "edited_from = CASE WHEN reflected_at IS NOT NULL AND reply IS NOT NULL "
        "THEN COALESCE(edited_from, user_message) ELSE edited_from END, "
        "reflection_attempts = CASE WHEN reflected_at IS NOT NULL THEN 0 ELSE reflection_attempts END, "
        "reflected_at = CASE WHEN reply IS NOT NULL THEN NULL ELSE reflected_at END "
        "WHERE user_id = ? AND id = ? AND deleted_at IS NULL AND user_message != ?",
        (text, user_id, exchange_id, text),
    )
    return cur.rowcount == 1


async def exchange_text(conn: Connection, user_id: OwnerKey, exchange_id: int) -> str:
    row = await fetch_one(conn, "SELECT user_message FROM exchanges WHERE user_id = ? AND id = ?", (user_id, exchange_id))
    return str(row["user_message"]) if row is not None else ""


async def drop_message_text(conn: Connection, user_id: OwnerKey, exchange_id: int, text: str) -> None:
    """One message of a burst was deleted: the exchange keeps what the others say, forgets what
    it was reflected from (it is reflected again from `text`) and the prompt that quoted it (no
    regenerate any more)."""
    await conn.execute(
        "UPDATE exchanges SET user_message = ?, edited_from = NULL, prompt = NULL, "
        "reflection_attempts = CASE WHEN reflected_at IS NOT NULL THEN 0 ELSE reflection_attempts END, "
        "reflected_at = CASE WHEN reply IS NOT NULL THEN NULL ELSE reflected_at END "
        "WHERE user_id = ? AND id = ? AND deleted_at IS NULL",
        (text, user_id, exchange_id),
    )


async def rewrite_turn_query(conn: Connection, user_id: OwnerKey, story_id: StoryId, old: str, new: str) -> None:
    """/why's log of the turn quotes the message (as recall stored it, cut at TURN_QUERY_CHARS)."""
    if old:
        await conn.execute(
            "UPDATE turns SET query = ? WHERE user_id = ? AND story_id = ? AND query = ?",
            (new[:TURN_QUERY_CHARS], user_id, story_id, old[:TURN_QUERY_CHARS]),
        )


async def memories_only_from(conn: Connection, user_id: OwnerKey, exchange_id: int) -> list[tuple[int, bool]]:
    """(id, pinned) of the user's live memories whose every source is this exchange."""
    rows = await fetch_all(
        conn,
        "SELECT s.memory_id, m.pinned FROM memory_sources AS s JOIN memories AS m ON m.id = s.memory_id "
        "WHERE s.user_id = ? AND m.user_id = ? AND s.exchange_id = ? "
        "AND NOT EXISTS (SELECT 1 FROM memory_sources AS o WHERE o.user_id = ? "
        "AND o.memory_id = s.memory_id AND o.exchange_id != ?) ORDER BY s.memory_id",
        (user_id, user_id, exchange_id, user_id, exchange_id),
    )
    return [(int(r["memory_id"]), bool(r["pinned"])) for r in rows]


async def forget_message_text(conn: Connection, user_id: OwnerKey, exchange_id: int, *, now: datetime) -> str:
    """Empty the message's text from the exchange (and its copy in the turn log); never reflected
    again. Returns the text that was removed."""
    row = await fetch_one(
        conn, "SELECT user_message, story_id FROM exchanges WHERE user_id = ? AND id = ?", (user_id, exchange_id)
    )
    text = str(row["user_message"]) if row is not None else ""
    await conn.execute(
        "UPDATE exchanges SET user_message = '', edited_from = NULL, prompt = NULL, deleted_at = ?, "
        "settled_at = COALESCE(settled_at, ?), reflected_at = COALESCE(reflected_at, ?) "
        "WHERE user_id = ? AND id = ?",
        (to_db(now), to_db(now), to_db(now), user_id, exchange_id),
    )
    await conn.execute(
        "UPDATE exchange_messages SET text = '', marks = '', deleted_at = COALESCE(deleted_at, ?) "
        "WHERE user_id = ? AND exchange_id = ?",
        (to_db(now), user_id, exchange_id),
    )
    if row is not None:
        await rewrite_turn_query(conn, user_id, row["story_id"], text, "")
    return text


# --- provenance and receipts ------------------------------------------------------------------


async def add_sources(conn: Connection, user_id: OwnerKey, memory_id: int, exchange_ids: Iterable[int]) -> None:
    for exchange_id in exchange_ids:
        await conn.execute(
            "INSERT OR IGNORE INTO memory_sources (memory_id, exchange_id, user_id) VALUES (?, ?, ?)",
            (memory_id, exchange_id, user_id),
        )


async def copy_sources(conn: Connection, user_id: OwnerKey, from_ids: Iterable[int], to_id: int) -> None:
    """Memory `to_id` comes from every exchange the memories `from_ids` came from."""
    for memory_id in from_ids:
        rows = await fetch_all(
            conn, "SELECT exchange_id FROM memory_sources WHERE user_id = ? AND memory_id = ?", (user_id, memory_id)
        )
        await add_sources(conn, user_id, to_id, [int(r["exchange_id"]) for r in rows])


async def sources_of(db: Database, user_id: OwnerKey, memory_id: int) -> list[int]:
    rows = await fetch_all(
        db.reader,
        "SELECT exchange_id FROM memory_sources WHERE user_id = ? AND memory_id = ? ORDER BY exchange_id",
        (user_id, memory_id),
    )
    return [int(r["exchange_id"]) for r in rows]


async def produced_by(db: Database, user_id: OwnerKey, exchange_id: int) -> list[int]:
    """Ids of the memories this exchange is a source of."""
    rows = await fetch_all(
        db.reader,
        "SELECT memory_id FROM memory_sources WHERE user_id = ? AND exchange_id = ? ORDER BY memory_id",
        (user_id, exchange_id),
    )
    return [int(r["memory_id"]) for r in rows]


async def record_change(
    conn: Connection,
    user_id: OwnerKey,
    exchange_id: int,
    memory_id: int,
    action: ChangeAction,
    text: str,
    before: str | None,
    *,
    now: datetime,
) -> None:
    await conn.execute(
        "INSERT INTO memory_changes (user_id, exchange_id, memory_id, action, text, before, at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (user_id, exchange_id, memory_id, action, text, before, to_db(now)),
    )


async def changes_of(db: Database, user_id: OwnerKey, exchange_id: int) -> list[MemoryChange]:
    rows = await fetch_all(
        db.reader,
        "SELECT memory_id, action, text, before, at FROM memory_changes WHERE user_id = ? AND exchange_id = ? "
        "ORDER BY id",
        (user_id, exchange_id),
    )
    return [MemoryChange(int(r["memory_id"]), r["action"], r["text"], r["before"], from_db(r["at"])) for r in rows]


# One literal statement per table: SQL text is never assembled from strings.
# The exchanges and what the turns recorded of them (/why, counters, the turn log).
_ERASE_USER: Sequence[str] = (
    "DELETE FROM exchange_replies WHERE user_id = ?",
    "DELETE FROM exchange_messages WHERE user_id = ?",
    "DELETE FROM memory_sources WHERE user_id = ?",
    "DELETE FROM memory_changes WHERE user_id = ?",
    "DELETE FROM exchanges WHERE user_id = ?",
    "DELETE FROM turns WHERE user_id = ?",
    "DELETE FROM turn_stats WHERE user_id = ?",
    "DELETE FROM turn_log WHERE user_id = ?",
)


async def erase_user_exchange_data(conn: Connection, user_id: OwnerKey) -> None:
    for statement in _ERASE_USER:
        await conn.execute(statement, (user_id,))


async def export_exchanges(db: Database, user_id: OwnerKey) -> list[dict[str, Any]]:
    """For the data export: the user's exchanges, each with its answers in order."""
    answers: dict[int, list[str]] = {}
    for row in await fetch_all(
        db.reader, "SELECT exchange_id, text FROM exchange_replies WHERE user_id = ? ORDER BY exchange_id, n", (user_id,)
    ):
        answers.setdefault(int(row["exchange_id"]), []).append(row["text"])
    rows = await fetch_all(
        db.reader,
        "SELECT id, story_id, user_message, reply, created_at FROM exchanges WHERE user_id = ? ORDER BY id",
        (user_id,),
    )
    return [
        {
            "id": r["id"], "story_id": r["story_id"], "message": r["user_message"], "reply": r["reply"],
            "answers": answers.get(r["id"], []), "at": r["created_at"],
        }
        for r in rows
    ]


async def memory_sources(db: Database, user_id: OwnerKey) -> dict[int, list[int]]:
    """For the data export: each memory's source exchanges."""
    sources: dict[int, list[int]] = {}
    for row in await fetch_all(
        db.reader,
        "SELECT memory_id, exchange_id FROM memory_sources WHERE user_id = ? ORDER BY memory_id, exchange_id",
        (user_id,),
    ):
        sources.setdefault(int(row["memory_id"]), []).append(int(row["exchange_id"]))
    return sources


# --- the turn's exchange and its reflection --------------------------------------------------


@dataclass(slots=True)
class PendingExchange:
    """An answered, settled exchange waiting for its reflection."""

    id: int
    user_id: OwnerKey
    user_name: str
    story_id: StoryId
    place: str
    message_id: str | None
    user_message: str
    reply: str
    attempts: int
    edited_from: str | None
    reply_message_id: str | None


async def save_exchange(
    conn: Connection,
    user_id: OwnerKey,
    *,
    user_name: str,
    story_id: StoryId,
    place: str,
    message_id: str | None,
    text: str,
    now: datetime,
) -> int:
    exchange_id = await inserted_id(
        conn,
        "INSERT INTO exchanges (user_id, user_name, story_id, place, message_id, "
        "user_message, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (user_id, user_name, story_id, place, message_id, text, to_db(now)),
    )
    assert exchange_id is not None
    return exchange_id


async def set_reply(conn: Connection, user_id: OwnerKey, exchange_id: int, reply: str, *, now: datetime) -> None:
    await conn.execute(
        "UPDATE exchanges SET reply = ?, answered_at = ? WHERE user_id = ? AND id = ?",
        (reply, to_db(now), user_id, exchange_id),
    )


async def reply_message_of(db: Database, user_id: OwnerKey, exchange_id: int) -> str | None:
    """The front end's id of the message holding the exchange's reply, once it was sent."""
    row = await fetch_one(
        db.reader, "SELECT reply_message_id FROM exchanges WHERE user_id = ? AND id = ?", (user_id, exchange_id)
    )
    return row["reply_message_id"] if row else None


async def exchange_failed(db: Database, user_id: OwnerKey, exchange_id: int, error: str) -> None:
    async with db.write() as conn:
        await conn.execute(
            "UPDATE exchanges SET last_error = ? WHERE user_id = ? AND id = ?",
            (error[:500], user_id, exchange_id),
        )


async def users_pending_reflection(db: Database) -> list[OwnerKey]:
    rows = await fetch_all(
        db.reader,
        "SELECT DISTINCT user_id FROM exchanges WHERE reflected_at IS NULL AND reply IS NOT NULL",
    )
    return [r["user_id"] for r in rows]


async def count_pending_reflection(db: Database, user_id: OwnerKey) -> int:
    row = await fetch_one(
        db.reader,
        "SELECT COUNT(*) AS pending FROM exchanges WHERE user_id = ? AND reflected_at IS NULL AND reply IS NOT NULL",
        (user_id,),
    )
    return int(row["pending"]) if row else 0


_PENDING_FIELDS = tuple(f.name for f in fields(PendingExchange))


async def pending_exchanges(db: Database, user_id: OwnerKey, limit: int) -> list[PendingExchange]:
    """The user's oldest answered, settled and unreflected exchanges."""
    rows = await fetch_all(
        db.reader,
        "SELECT id, user_id, user_name, story_id, place, message_id, user_message, reply, "
        "reflection_attempts AS attempts, edited_from, reply_message_id FROM exchanges "
        "WHERE user_id = ? AND reflected_at IS NULL AND reply IS NOT NULL AND settled_at IS NOT NULL "
        "ORDER BY id LIMIT ?",
        (user_id, limit),
    )
    return [PendingExchange(**{name: row[name] for name in _PENDING_FIELDS}) for row in rows]


async def mark_reflected(conn: Connection, user_id: OwnerKey, exchange: PendingExchange, *, now: datetime) -> int:
    """1 when marked; 0 when the exchange is gone, already reflected, or its text was edited
    since it was read (it is then pending again)."""
    cur = await conn.execute(
        "UPDATE exchanges SET reflected_at = ?, last_error = NULL, edited_from = NULL "
        "WHERE user_id = ? AND id = ? AND reflected_at IS NULL AND user_message = ?",
        (to_db(now), user_id, exchange.id, exchange.user_message),
    )
    return cur.rowcount


async def reflection_attempt_failed(
    conn: Connection, user_id: OwnerKey, exchange_id: int, *, attempts: int, error: str, set_aside_at: datetime | None
) -> None:
    """Count a failed attempt; with `set_aside_at`, the exchange is no longer pending."""
    await conn.execute(
        "UPDATE exchanges SET reflection_attempts = ?, last_error = ?, "
        "reflected_at = COALESCE(?, reflected_at) WHERE user_id = ? AND id = ?",
        (attempts, error[:500], to_db(set_aside_at) if set_aside_at is not None else None, user_id, exchange_id),
    )
