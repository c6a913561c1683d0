"""A turn's choice recorded: the memories' counters (candidate, served, recalled by meaning),
the person's turn stats and the /why row, in one write transaction once the reply is out.

A recording that can wait is written later: past DIRECT_COUNT_LIMIT candidates a turn's
candidate counts are held in memory and written in slices.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from bot.clients.storage import Connection, Database
from bot.memory.choice import Slot, TurnSelection
from bot.memory.model import OwnerKey
from bot.memory.stores.counters import count_candidates, count_served, record_turn
from bot.memory.stores.turn import save_turn

# Counting every candidate of a turn rewrites one row per candidate: 257 ms of write lock per turn
# at 100,000 memories. Past DIRECT_COUNT_LIMIT candidates, a turn writes only its selected rows
# (times_served, times_semantic) and keeps its candidates in memory; times_candidate is written
# every COUNT_FLUSH_TURNS turns, COUNT_SLICE rows per transaction, and whenever something reads
# the counters through the engine (`flush_counts`, from `Engine.conversation.wait_recorded`) or it closes. A
# crash loses at most the candidate counts of the turns held (never a served count).
DIRECT_COUNT_LIMIT = 1_000
COUNT_FLUSH_TURNS = 16
COUNT_SLICE = 1_000
TURNS_KEPT_PER_STORY = 20
# Reasons under which a slot is there because of its score: the semantic pass (by the message
# or by the conversation), and the global pass, which takes the eligible globals by score
# before any other global.
_BY_MEANING = frozenset({"semantic", "conversation", "global"})


def served_by_meaning(slots: Sequence[Slot], threshold: float) -> list[int]:
    """Ids of the slots chosen because of their score: what `times_semantic` counts.

    A lexical stand-in is not a score, and a memory admitted by rank or pin was not recalled,
    only sorted (docs/design.md, "Read path": forgetting made measurable).
    """
    return [
        s.id
        for s in slots
        if s.reason in _BY_MEANING and not s.lexical and s.score is not None and s.score >= threshold
    ]


class TurnRecords:
    """Records turns, holding the candidate counts of the large ones until a flush."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._held_counts: dict[OwnerKey, list[np.ndarray]] = {}

    async def record(
        self, selection: TurnSelection, *, cancelled: Callable[[Connection], Awaitable[bool]] | None = None
    ) -> int:
        """Count the turn and keep it for /why, in one write transaction; returns its turn id.

        A selection is recorded once: again, it returns the id it already has. `cancelled` is
        asked inside the transaction: when it says so (the user erased their data meanwhile),
        nothing is written and 0 is returned.
        """
        if selection.turn_id:
            return selection.turn_id
        user_id = selection.user_id
        held = not selection.degraded and (
            len(selection.candidate_ids) > DIRECT_COUNT_LIMIT or user_id in self._held_counts
        )
        async with self._db.write() as conn:
            if cancelled is not None and await cancelled(conn):
                return 0
            served = [s.id for s in selection.slots]
            semantic = served_by_meaning(selection.slots, selection.threshold)
            # A degraded turn counts nothing: a sleeping embedder must not read as ignored
            # memories.
            if held:
                await count_served(conn, user_id, served, semantic)
            elif not selection.degraded:
                await record_turn(conn, user_id, selection.candidate_ids.tolist(), served, semantic)
            turn_id = await save_turn(conn, selection, keep=TURNS_KEPT_PER_STORY)
        selection.turn_id = turn_id
        if held:
            turns = self._held_counts.setdefault(user_id, [])
            turns.append(selection.candidate_ids)
            if len(turns) >= COUNT_FLUSH_TURNS:
                await self.flush_counts(user_id)
        return turn_id

    async def flush_counts(self, user_id: OwnerKey | None = None) -> None:
        """Write the candidate counts held for `user_id` (everyone's without), in short
        transactions of COUNT_SLICE rows."""
        for user in [user_id] if user_id is not None else list(self._held_counts):
            turns = self._held_counts.pop(user, None)
            if not turns:
                continue
            # In a thread: numpy sorts without the GIL, and at 100,000 candidates a turn the 16
            # turns held take 100-400 ms to tally, which on the loop stopped everyone's turns.
            ids, times = await asyncio.to_thread(_tally, turns)
            for count in np.unique(times).tolist():
                same = ids[times == count]
                for start in range(0, same.size, COUNT_SLICE):
                    async with self._db.write() as conn:
                        await count_candidates(conn, user, same[start : start + COUNT_SLICE].tolist(), int(count))


def _tally(turns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate id of the turns held, and in how many of them it was a candidate."""
    return np.unique(np.concatenate(turns), return_counts=True)
