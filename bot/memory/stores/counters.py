"""Per-memory counters of the read path: times candidate, times served, times served by the
semantic pass. They answer "which memory exists but never surfaces?".

The caller skips degraded turns: a sleeping embedder must not read as an ignored memory.
`record_turn` counts a whole turn in one statement; a caller that defers the candidates' count
(bot.memory.read.recall, for users with many memories) writes `count_served` per turn and
`count_candidates` once for many turns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from bot.clients.storage import Connection, Sql
from bot.memory.model import OwnerKey

# The id lists travel as JSON arrays: one SQL text whatever their length (no statement
# recompiled per candidate count, no bound-variable limit at 32 766 ids). A list of "?" is
# 5 to 15 % faster (bench/latency.py measures both: about 0.2 ms at 300 candidates, 2 ms at
# 3 000) but fails outright past that limit; 0.03 ms per turn does not buy that failure.
# In SQLite's texts, `+user_id` keeps the planner from walking the user's index: it would read
# every row of the user to find the listed ones (130 ms inside the write lock for the 24 served
# memories of a person of 100,000), where the ids find theirs by primary key.
_RECORD_TURN = Sql(
    """
UPDATE memories SET
    times_candidate = times_candidate + 1,
    times_served = times_served + (id IN (SELECT value FROM json_each(:served))),
    times_semantic = times_semantic + (id IN (SELECT value FROM json_each(:semantic)))
WHERE +user_id = :user_id AND id IN (SELECT value FROM json_each(:candidates))
""",
    postgresql="""
UPDATE memories SET
    times_candidate = times_candidate + 1,
    times_served = times_served + (id IN (SELECT jsonb_array_elements_text(:served::jsonb)::bigint))::int,
    times_semantic = times_semantic + (id IN (SELECT jsonb_array_elements_text(:semantic::jsonb)::bigint))::int
WHERE user_id = :user_id AND id IN (SELECT jsonb_array_elements_text(:candidates::jsonb)::bigint)
""",
)


async def record_turn(
    conn: Connection,
    user_id: OwnerKey,
    candidate_ids: Iterable[int],
    served_ids: Iterable[int],
    semantic_ids: Iterable[int],
) -> None:
    """Count one turn, in one statement, inside the caller's `db.write()` transaction.

    Only the user's own candidates are counted; served and semantic ids are expected to be
    among them.
    """
    candidates = _json_ids(candidate_ids)
    if candidates == "[]":
        return
    await conn.execute(
        _RECORD_TURN,
        {
            "user_id": user_id,
            "candidates": candidates,
            "served": _json_ids(served_ids),
            "semantic": _json_ids(semantic_ids),
        },
    )


_COUNT_SERVED = Sql(
    """
UPDATE memories SET
    times_served = times_served + 1,
    times_semantic = times_semantic + (id IN (SELECT value FROM json_each(:semantic)))
WHERE +user_id = :user_id AND id IN (SELECT value FROM json_each(:served))
""",
    postgresql="""
UPDATE memories SET
    times_served = times_served + 1,
    times_semantic = times_semantic + (id IN (SELECT jsonb_array_elements_text(:semantic::jsonb)::bigint))::int
WHERE user_id = :user_id AND id IN (SELECT jsonb_array_elements_text(:served::jsonb)::bigint)
""",
)
_COUNT_CANDIDATES = Sql(
    """
UPDATE memories SET times_candidate = times_candidate + :times
WHERE +user_id = :user_id AND id IN (SELECT value FROM json_each(:candidates))
""",
    postgresql="""
UPDATE memories SET times_candidate = times_candidate + :times
WHERE user_id = :user_id AND id IN (SELECT jsonb_array_elements_text(:candidates::jsonb)::bigint)
""",
)


async def count_served(
    conn: Connection, user_id: OwnerKey, served_ids: Iterable[int], semantic_ids: Iterable[int]
) -> None:
    """The served and semantic counts of one turn: rows of the selected memories only."""
    served = _json_ids(served_ids)
    if served == "[]":
        return
    await conn.execute(_COUNT_SERVED, {"user_id": user_id, "served": served, "semantic": _json_ids(semantic_ids)})


async def count_candidates(conn: Connection, user_id: OwnerKey, candidate_ids: Iterable[int], times: int) -> None:
    """Add `times` to times_candidate of each of the user's `candidate_ids` (gone ones: nothing)."""
    await conn.execute(_COUNT_CANDIDATES, {"user_id": user_id, "candidates": _json_ids(candidate_ids), "times": times})


def _json_ids(ids: Iterable[int]) -> str:
    return json.dumps(list(map(int, ids)))
