"""The user's message edited or deleted after its turn: which exchange holds it, its parts, its
text rewritten or forgotten, and the memories it alone produced.

Every statement filters on user_id, except `message_owner`: a deleted message reaches the bot
without its author, so the owner is looked up by message id first, then everything is scoped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.clients.storage import Connection, Database, fetch_all, fetch_one, to_db
from bot.memory.model import OwnerKey, StoryId
from bot.memory.stores.exchanges import MessagePart
from bot.memory.stores.turn import TURN_QUERY_CHARS


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
        row["id"],
        row["user_id"],
        row["story_id"],
        row["user_message"],
        row["reflected_at"] is not None,
        row["settled_at"] is not None,
        row["deleted_at"] is not None,
        int(row["n"]),
        row["message_deleted_at"] is not None,
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
    row = await fetch_one(
        conn, "SELECT user_message FROM exchanges WHERE user_id = ? AND id = ?", (user_id, exchange_id)
    )
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
