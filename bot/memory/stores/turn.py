"""The turns a user had, as `/why`, the owner's page and the statistics read them: SQL only.

Every statement is scoped by `user_id`. A turn's record is written in the transaction that
counts its memories (bot/memory/read/recall.py, `Recall.record`); the newest TURNS_KEPT_PER_STORY
of each story are kept.
"""

from __future__ import annotations

import json

from bot.clients.storage import Connection, Database, fetch_all, fetch_one, from_db, inserted_id, to_db
from bot.memory.choice import Slot, TurnFigures, TurnSelection
from bot.memory.model import OwnerKey, StoryId, utcnow

# How much of a turn's message /why keeps (recall writes it; an edit or a delete rewrites it).
TURN_QUERY_CHARS = 2000


async def save_turn(conn: Connection, selection: TurnSelection, *, keep: int) -> int:
    """Add the turn to the user's statistics, their /why record and the owner's turn log; keep
    the newest `keep` records of the story. Returns the turn's id."""
    await conn.execute(
        "INSERT INTO turn_stats (user_id, turns, degraded_turns) VALUES (?, 1, ?) "
        "ON CONFLICT (user_id) DO UPDATE SET turns = turn_stats.turns + 1, "
        "degraded_turns = turn_stats.degraded_turns + excluded.degraded_turns",
        (selection.user_id, int(selection.degraded)),
    )
    turn_id = await inserted_id(
        conn,
        "INSERT INTO turns (user_id, story_id, place, query, degraded, detail, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            selection.user_id,
            selection.story_id,
            selection.place,
            selection.query[:TURN_QUERY_CHARS],
            int(selection.degraded),
            selection.to_detail(),
            to_db(selection.created_at),
        ),
    )
    assert turn_id is not None
    figures = selection.figures
    await conn.execute(
        "INSERT INTO turn_log (user_id, story_id, outcome, memory_ms, reply_ms, prompt_tokens, "
        "completion_tokens, context_tokens, context_full, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            selection.user_id,
            selection.story_id,
            selection.outcome,
            figures.memory_ms,
            figures.reply_ms,
            figures.prompt_tokens,
            figures.completion_tokens,
            figures.context_tokens,
            int(figures.context_full),
            to_db(selection.created_at),
        ),
    )
    # The newest `keep` of this user's story; ids are shared by every user and story, so they
    # cannot be counted back from the last one. Fewer than that: the subquery is NULL and
    # nothing is deleted.
    await conn.execute(
        "DELETE FROM turns WHERE user_id = ? AND story_id = ? AND id < ("
        "SELECT id FROM turns WHERE user_id = ? AND story_id = ? "
        "ORDER BY id DESC LIMIT 1 OFFSET ?)",
        (selection.user_id, selection.story_id, selection.user_id, selection.story_id, keep - 1),
    )
    return turn_id


async def last_turn(db: Database, user_id: OwnerKey, story_id: StoryId) -> TurnSelection | None:
    """The user's last recorded turn in this story, for /why (survives restarts)."""
    row = await fetch_one(
        db.reader,
        "SELECT id, query, degraded, detail, created_at FROM turns "
        "WHERE user_id = ? AND story_id = ? ORDER BY id DESC LIMIT 1",
        (user_id, story_id),
    )
    if row is None:
        return None
    return turn_from_row(user_id, story_id, row["id"], row["query"], row["degraded"], row["detail"], row["created_at"])


def turn_from_row(
    user_id: OwnerKey, story_id: StoryId, turn_id: int, query: str, degraded: int, detail_json: str, created_at: str
) -> TurnSelection:
    """A recorded turn, as `record` stored it (turns recorded before figures existed get none)."""
    detail = json.loads(detail_json)
    return TurnSelection(
        turn_id=turn_id,
        user_id=user_id,
        story_id=story_id,
        query=query,
        degraded=bool(degraded),
        slots=[Slot(**s) for s in detail.get("slots", [])],
        rules=list(detail.get("rules", [])),
        created_at=from_db(created_at) or utcnow(),
        story=dict(detail.get("story", {})),
        candidates=int(detail.get("candidates", 0)),
        figures=TurnFigures(**detail.get("figures", {})),
        lore=list(detail.get("lore", [])),
        lore_clock=detail.get("lore_clock"),
        user_name=str(detail.get("user_name") or ""),
        story_name=str(detail.get("story_name") or ""),
    )


async def turn_stats(db: Database, user_id: OwnerKey) -> tuple[int, int]:
    """(turns, degraded turns) of one user, persisted across restarts."""
    row = await fetch_one(db.reader, "SELECT turns, degraded_turns FROM turn_stats WHERE user_id = ?", (user_id,))
    return (int(row["turns"]), int(row["degraded_turns"])) if row else (0, 0)


async def withdraw_from_turns(conn: Connection, user_id: OwnerKey, memory_ids: list[int]) -> None:
    """In the caller's transaction: the user's kept turns (/why, /export) stop showing the text of
    these memories, withdrawn because the message they came from was deleted or edited."""
    if not memory_ids:
        return
    gone = set(memory_ids)
    for row in await fetch_all(conn, "SELECT id, detail FROM turns WHERE user_id = ?", (user_id,)):
        detail = json.loads(row["detail"])
        hit = [s for s in detail.get("slots", []) if s.get("id") in gone and not s.get("withdrawn")]
        if not hit:
            continue
        for slot in hit:
            slot["text"], slot["withdrawn"] = "", True
        await conn.execute(
            "UPDATE turns SET detail = ? WHERE user_id = ? AND id = ?",
            (json.dumps(detail, ensure_ascii=False), user_id, row["id"]),
        )
