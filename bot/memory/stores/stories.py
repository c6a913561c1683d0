"""SQLite storage of the per-story memory (summary, anchors, positions, state, their history).

Reads go through `db.reader`. Writes take the open connection of the caller's
`async with db.write() as conn:` so a reflection's memories and story changes commit together.
Every statement filters on user_id and story_id; an id from another user or story is unknown.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clients.storage import Connection, Database, Sql, fetch_all, from_db, inserted_id, to_db
from bot.memory.model import Cause, OwnerKey, StoryId, StoryOperation
from bot.memory.story.plans import Anchor, AnchorPlan, Position, StoryState, plan_anchor_changes, plan_summary
from bot.memory.story.positions import PositionPlan, plan_positions, subject_key
from bot.memory.story.report import StoryReport
from bot.memory.story.state import StatePlan, StateSpec, apply_state_deltas, is_finite_number

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoryHistoryEntry:
    id: int
    user_id: OwnerKey
    story_id: StoryId
    operation: StoryOperation
    item_id: int | None
    payload: dict[str, Any]
    reason: str | None
    cause: Cause
    at: datetime


# The whole story in one statement: one snapshot (a write between four reads could pair a new
# summary with old anchors) and one trip to the database, which a turn makes before its prompt.
# One column per kind of value, typed in the first part: PostgreSQL types each column from it.
_STORY = """
    SELECT 'summary' AS kind, CAST(NULL AS BIGINT) AS id, summary AS a, CAST(NULL AS TEXT) AS b,
           CAST(NULL AS TEXT) AS c, updated_at AS t1, CAST(NULL AS TEXT) AS t2, CAST(NULL AS DOUBLE PRECISION) AS num
      FROM story_summaries WHERE user_id = ? AND story_id = ?
    UNION ALL
    SELECT 'anchor', id, text, NULL, NULL, created_at, NULL, NULL
      FROM story_anchors WHERE user_id = ? AND story_id = ?
    UNION ALL
    SELECT 'position', id, subject, stance, justification, created_at, updated_at, NULL
      FROM story_positions WHERE user_id = ? AND story_id = ?
    UNION ALL
    SELECT 'state', NULL, name, NULL, NULL, NULL, NULL, value
      FROM story_state WHERE user_id = ? AND story_id = ?
    ORDER BY kind, id
"""


async def _load(conn: Connection, user_id: OwnerKey, story_id: StoryId) -> StoryState:
    state = StoryState()
    for r in await fetch_all(conn, _STORY, (user_id, story_id) * 4):
        kind = r["kind"]
        if kind == "summary":
            state.summary, state.summary_updated_at = r["a"], from_db(r["t1"])
        elif kind == "anchor":
            state.anchors.append(Anchor(r["id"], r["a"], from_db(r["t1"])))
        elif kind == "position":
            state.positions.append(Position(r["id"], r["a"], r["b"], r["c"], from_db(r["t1"]), from_db(r["t2"])))
        elif is_finite_number(r["num"]):
            # A value that is not a number (a row written by hand) reads as absent: the default applies.
            state.state[r["a"]] = float(r["num"])
    return state


async def load_story(db: Database, user_id: OwnerKey, story_id: StoryId) -> StoryState:
    """Everything stored for this user in this story (empty StoryState when nothing is)."""
    return await _load(db.reader, user_id, story_id)


async def user_story_ids(db: Database, user_id: OwnerKey) -> list[StoryId]:
    """Every story in which something is stored for this user (for the data export)."""
    rows = await fetch_all(
        db.reader,
        "SELECT story_id FROM story_summaries WHERE user_id = ?"
        " UNION SELECT story_id FROM story_anchors WHERE user_id = ?"
        " UNION SELECT story_id FROM story_positions WHERE user_id = ?"
        " UNION SELECT story_id FROM story_state WHERE user_id = ?"
        " ORDER BY story_id",
        (user_id, user_id, user_id, user_id),
    )
    return [r["story_id"] for r in rows]


async def _archive(
    conn: Connection,
    user_id: OwnerKey,
    story_id: StoryId,
    operation: StoryOperation,
    item_id: int | None,
    payload: Mapping[str, Any],
    reason: str | None,
    cause: Cause,
    now: datetime,
) -> None:
    await conn.execute(
        "INSERT INTO story_history"
        " (user_id, story_id, operation, item_id, payload, reason, cause, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            user_id,
            story_id,
            operation,
            item_id,
            json.dumps(dict(payload), ensure_ascii=False),
            reason,
            cause.stored(),
            to_db(now),
        ),
    )


def _position_payload(p: Position) -> dict[str, Any]:
    return {
        "subject": p.subject,
        "stance": p.stance,
        "justification": p.justification,
        "created_at": to_db(p.created_at),
        "updated_at": to_db(p.updated_at),
    }


async def apply_story_reflection(
    conn: Connection,
    user_id: OwnerKey,
    story_id: StoryId,
    *,
    summary: str | None,
    anchor_add: Iterable[str] | None,
    anchor_remove: Iterable[Any] | None,
    positions: Iterable[Any] | None,
    state_deltas: Mapping[str, Any] | None,
    specs: Mapping[str, StateSpec],
    cause: Cause,
    now: datetime,
) -> StoryReport:
    """Apply one reflection's story proposals inside the caller's write transaction.

    `anchor_remove` items are (id, reason) tuples, {"id", "reason"} mappings or objects with
    those attributes; `positions` items likewise carry subject, stance and justification.
    Every removal, rewrite and eviction is archived in story_history before it happens.
    """
    current = await _load(conn, user_id, story_id)
    summary_plan = plan_summary(current.summary, summary)
    new_summary = summary_plan.text
    if new_summary is not None:
        await _write_summary(conn, user_id, story_id, current, new_summary, cause=cause, now=now)
    anchor_plan = plan_anchor_changes(current.anchors, anchor_add, anchor_remove)
    added_ids = await _write_anchors(conn, user_id, story_id, anchor_plan, cause=cause, now=now)
    position_plan = plan_positions(current.positions, positions, now)
    inserted_ids = await _write_positions(conn, user_id, story_id, position_plan, cause=cause, now=now)
    state_plan = apply_state_deltas(specs, current.state, state_deltas)
    await _write_state(conn, user_id, story_id, state_plan, cause=cause, now=now)

    notes = [*anchor_plan.notes, *position_plan.notes, *state_plan.notes]
    if summary_plan.note is not None:
        notes.insert(0, summary_plan.note)
    self_cited = len(position_plan.not_reanchored) + len(position_plan.refused)
    if anchor_plan.refused or self_cited or summary_plan.note:
        log.info(
            "story %s: %d anchor removal(s) refused, %d self-cited position(s) not anchored, summary: %s",
            story_id,
            len(anchor_plan.refused),
            self_cited,
            summary_plan.note or "ok",
        )
    return StoryReport(
        summary_replaced=new_summary is not None,
        anchors=anchor_plan,
        added_anchor_ids=added_ids,
        positions=position_plan,
        inserted_position_ids=inserted_ids,
        state=state_plan,
        notes=notes,
    )


async def _write_summary(
    conn: Connection,
    user_id: OwnerKey,
    story_id: StoryId,
    current: StoryState,
    text: str,
    *,
    cause: Cause,
    now: datetime,
) -> None:
    if current.summary is not None:
        await _archive(
            conn,
            user_id,
            story_id,
            "summary_replaced",
            None,
            {"summary": current.summary, "updated_at": to_db(current.summary_updated_at)},
            None,
            cause,
            now,
        )
    await conn.execute(
        "INSERT INTO story_summaries (user_id, story_id, summary, updated_at)"
        " VALUES (?, ?, ?, ?)"
        " ON CONFLICT (user_id, story_id) DO UPDATE SET summary = excluded.summary,"
        " updated_at = excluded.updated_at",
        (user_id, story_id, text, to_db(now)),
    )


async def _write_anchors(
    conn: Connection, user_id: OwnerKey, story_id: StoryId, plan: AnchorPlan, *, cause: Cause, now: datetime
) -> list[int]:
    """Removals archived then deleted, additions inserted; the new anchors' ids."""
    for removal in plan.remove:
        a = removal.anchor
        await _archive(
            conn,
            user_id,
            story_id,
            "anchor_removed",
            a.id,
            {"text": a.text, "created_at": to_db(a.created_at)},
            removal.reason,
            cause,
            now,
        )
        await conn.execute(
            "DELETE FROM story_anchors WHERE id = ? AND user_id = ? AND story_id = ?",
            (a.id, user_id, story_id),
        )
    added_ids: list[int] = []
    for text in plan.add:
        anchor_id = await inserted_id(
            conn,
            "INSERT INTO story_anchors (user_id, story_id, text, created_at, cause)"
            " VALUES (?, ?, ?, ?, ?) RETURNING id",
            (user_id, story_id, text, to_db(now), cause.stored()),
        )
        added_ids.append(anchor_id or 0)
    return added_ids


async def _write_positions(
    conn: Connection, user_id: OwnerKey, story_id: StoryId, plan: PositionPlan, *, cause: Cause, now: datetime
) -> list[int]:
    """Evictions and updates archived first, then new positions inserted; their ids."""
    stamp = to_db(now)
    for p in plan.evict:
        await _archive(
            conn,
            user_id,
            story_id,
            "position_evicted",
            p.id,
            _position_payload(p),
            None,
            cause,
            now,
        )
        await conn.execute(
            "DELETE FROM story_positions WHERE id = ? AND user_id = ? AND story_id = ?",
            (p.id, user_id, story_id),
        )
    for update in plan.update:
        before, after = update.before, update.after
        await _archive(
            conn,
            user_id,
            story_id,
            "position_updated",
            before.id,
            _position_payload(before),
            None,
            cause,
            now,
        )
        await conn.execute(
            "UPDATE story_positions SET stance = ?, justification = ?, updated_at = ?"
            " WHERE id = ? AND user_id = ? AND story_id = ?",
            (
                after.stance,
                after.justification,
                to_db(after.updated_at),
                before.id,
                user_id,
                story_id,
            ),
        )
    inserted_ids: list[int] = []
    for prop in plan.insert:
        position_id = await inserted_id(
            conn,
            "INSERT INTO story_positions (user_id, story_id, subject, subject_key, stance,"
            " justification, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                user_id,
                story_id,
                prop.subject,
                subject_key(prop.subject),
                prop.stance,
                prop.justification,
                stamp,
                stamp,
            ),
        )
        inserted_ids.append(position_id or 0)
    return inserted_ids


async def _write_state(
    conn: Connection, user_id: OwnerKey, story_id: StoryId, plan: StatePlan, *, cause: Cause, now: datetime
) -> None:
    for change in plan.changes:
        await _archive(
            conn,
            user_id,
            story_id,
            "state_changed",
            None,
            {
                "name": change.name,
                "before": change.before,
                "after": change.after,
                "proposed": change.proposed,
                "applied": change.applied,
            },
            None,
            cause,
            now,
        )
        await conn.execute(
            "INSERT INTO story_state (user_id, story_id, name, value, updated_at)"
            " VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (user_id, story_id, name) DO UPDATE SET value = excluded.value,"
            " updated_at = excluded.updated_at",
            (user_id, story_id, change.name, change.after, to_db(now)),
        )


# A NULL story or operation list keeps every story or kind. The operation names travel as one
# JSON array: one SQL text whatever their number.
_STORY_HISTORY = Sql(
    "SELECT id, user_id, story_id, operation, item_id, payload, reason, cause, at"
    " FROM story_history WHERE user_id = ? AND (? IS NULL OR story_id = ?)"
    " AND (? IS NULL OR operation IN (SELECT value FROM json_each(?)))"
    " ORDER BY at DESC, id DESC LIMIT ?",
    postgresql="SELECT id, user_id, story_id, operation, item_id, payload, reason, cause, at"
    " FROM story_history WHERE user_id = ? AND (CAST(? AS TEXT) IS NULL OR story_id = ?)"
    " AND (CAST(? AS TEXT) IS NULL OR operation IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))))"
    " ORDER BY at DESC, id DESC LIMIT ?",
)


async def story_history(
    db: Database,
    user_id: OwnerKey,
    story_id: StoryId | None = None,
    *,
    limit: int = 50,
    operations: Sequence[StoryOperation] | None = None,
) -> list[StoryHistoryEntry]:
    """This user's story history, newest first; all stories when story_id is None.

    `operations` keeps only those kinds (e.g. ("anchor_removed",)), before `limit` applies:
    every reflection writes summary and state rows that would otherwise push the rare kinds out.
    None keeps every kind.
    """
    if isinstance(operations, str):
        # A bare string is a Sequence[str] of letters: it would silently match nothing.
        raise TypeError("operations must be a sequence of operation names, not a string")
    kinds = None if operations is None else json.dumps(list(operations))
    rows = await fetch_all(db.reader, _STORY_HISTORY, (user_id, story_id, story_id, kinds, kinds, limit))
    return [
        StoryHistoryEntry(
            r["id"],
            r["user_id"],
            r["story_id"],
            r["operation"],
            r["item_id"],
            json.loads(r["payload"]),
            r["reason"],
            Cause.from_stored(r["cause"]),
            from_db(r["at"]),
        )
        for r in rows
    ]


# One literal statement per table: SQL text is never assembled from strings.
_ERASE_USER: Sequence[str] = (
    "DELETE FROM story_summaries WHERE user_id = ?",
    "DELETE FROM story_anchors WHERE user_id = ?",
    "DELETE FROM story_positions WHERE user_id = ?",
    "DELETE FROM story_state WHERE user_id = ?",
    "DELETE FROM story_history WHERE user_id = ?",
)


async def erase_user_story_data(conn: Connection, user_id: OwnerKey) -> int:
    """Delete every story row of this user, history included. Returns the number of rows."""
    total = 0
    for statement in _ERASE_USER:
        cur = await conn.execute(statement, (user_id,))
        total += max(cur.rowcount, 0)
        await cur.close()
    return total
