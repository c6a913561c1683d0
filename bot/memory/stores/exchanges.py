"""An exchange's life in the database: saved with its message, answered, its alternatives
(regenerate, swipe), settled, reflected, exported and erased. The edits and deletes of the user's
message are in bot/memory/stores/edits.py, where memories came from and the receipts in
bot/memory/stores/provenance.py.

Every statement filters on user_id. Functions taking `conn` join the caller's write transaction.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from bot.clients.llm_wire import ChatMessage, Image
from bot.clients.storage import Connection, Database, fetch_all, fetch_one, inserted_id, to_db
from bot.memory.model import OwnerKey, PersonId, StoryId
from bot.memory.stores.epoch import STILL_CURRENT
from bot.memory.text import storable


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
        row["id"],
        row["user_id"],
        row["story_id"],
        row["reply_message_id"],
        prompt,
        int(row["reply_choice"] or 1),
        [r["text"] for r in rows],
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


# --- provenance and receipts ------------------------------------------------------------------


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
        db.reader,
        "SELECT exchange_id, text FROM exchange_replies WHERE user_id = ? ORDER BY exchange_id, n",
        (user_id,),
    ):
        answers.setdefault(int(row["exchange_id"]), []).append(row["text"])
    rows = await fetch_all(
        db.reader,
        "SELECT id, story_id, user_message, reply, created_at FROM exchanges WHERE user_id = ? ORDER BY id",
        (user_id,),
    )
    return [
        {
            "id": r["id"],
            "story_id": r["story_id"],
            "message": r["user_message"],
            "reply": r["reply"],
            "answers": answers.get(r["id"], []),
            "at": r["created_at"],
        }
        for r in rows
    ]


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


_INSERT_EXCHANGE = "INSERT INTO exchanges (user_id, user_name, story_id, place, message_id, user_message, created_at) "


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
    current: tuple[PersonId, int] | None = None,
) -> int | None:
    """The new exchange's id. `current`: a turn's person and the epoch it read; then None, and
    nothing stored, when an erase of the person committed since. That check is within the
    INSERT: one statement less in the turn's transaction, run while the model embeds."""
    values = (user_id, user_name, story_id, place, message_id, text, to_db(now))
    if current is None:
        return await inserted_id(conn, _INSERT_EXCHANGE + "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id", values)
    return await inserted_id(
        conn,
        _INSERT_EXCHANGE + "SELECT ?, ?, ?, ?, ?, ?, ? WHERE " + STILL_CURRENT + " RETURNING id",
        (*values, *current),
    )


async def set_reply(
    conn: Connection, user_id: OwnerKey, exchange_id: int, reply: str, *, now: datetime, settle: bool
) -> None:
    """The exchange's reply; `settle`: settled now too (unless it already was), else it stays
    open for regenerate and swipes."""
    await conn.execute(
        "UPDATE exchanges SET reply = ?, answered_at = ?, settled_at = CASE WHEN ? THEN COALESCE(settled_at, ?) "
        "ELSE settled_at END WHERE user_id = ? AND id = ?",
        (reply, to_db(now), settle, to_db(now), user_id, exchange_id),
    )


async def answer_exchange(
    db: Database, user_id: OwnerKey, exchange_id: int, reply: str, *, now: datetime, person: PersonId, epoch: int
) -> bool:
    """The exchange's reply, settled now (unless it already was), in one statement of its own:
    the person waits for it. Nothing is stored when an erase of `person` committed since their
    turn read `epoch`; returns whether it was."""
    changed = await db.write_one(
        "UPDATE exchanges SET reply = ?, answered_at = ?, settled_at = COALESCE(settled_at, ?) "
        "WHERE user_id = ? AND id = ? AND " + STILL_CURRENT,
        (reply, to_db(now), to_db(now), user_id, exchange_id, person, epoch),
    )
    return changed > 0


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
