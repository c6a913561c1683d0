"""One person's memories as aligned columns: the rows, numpy columns of what the read path
filters and ranks on (type, scope, pin, confidence, dates, story, place) and the matrix of their
vectors for the engine's embedding model. Slot `i` of every column is row `rows[i]`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from bot.clients.storage import from_db
from bot.memory.cache.slices import FILL_SLICE, ShardedDict, Slices
from bot.memory.model import USER_MEMORY_TYPES, Memory, OwnerKey, StoryId
from bot.memory.stores.memories import MemoryRow, row_to_memory
from bot.memory.stores.vectors import VECTOR_DTYPE

# What one cached row costs beyond its arrays and vector, measured with tracemalloc on the
# recall corpus (a row as sqlite3 read it, its strings and the list slot), text length aside: a
# MemoryRow, one tuple, costs less.
ROW_OVERHEAD_BYTES = 520
# Vectors copied into the matrix between two looks at the clock.
VECTOR_SLICE = 32
# A vector matrix of this size or more is written and grown in a thread, off the loop.
IN_THREAD_BYTES = 4 * 1024 * 1024
# A memory type as a column: its rank among the user types (rules after them all).
TYPE_CODES: dict[str, int] = {memory_type: code for code, memory_type in enumerate(USER_MEMORY_TYPES)}
RULE_CODE = len(USER_MEMORY_TYPES)
NO_EXPIRY = np.iinfo(np.int64).max
NO_CODE = -1
UNKNOWN_CODE = -2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Version = tuple[int, int]


def micros(dt: datetime) -> int:
    """Exact microseconds since the epoch (a float timestamp loses the last digit)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // _MICROSECOND


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - _EPOCH


def _db_micros(values: Sequence[str | None]) -> np.ndarray:
    """Stored datetimes as int64 microseconds (None: NO_EXPIRY). The shape `to_db` writes is
    parsed by numpy in one go; anything else is read by `from_db`, which never raises."""
    out = np.full(len(values), NO_EXPIRY, dtype=np.int64)
    fast = [i for i, v in enumerate(values) if isinstance(v, str) and len(v) == 32 and v.endswith("+00:00")]
    if fast:
        try:
            out[fast] = np.array([values[i][:26] for i in fast], dtype="datetime64[us]").astype(np.int64)  # type: ignore[index]
        except ValueError:
            fast = []
    done = set(fast)
    for i, value in enumerate(values):
        if value is not None and i not in done:
            out[i] = micros(from_db(value))
    return out


@dataclass(slots=True)
class Vector:
    content_hash: str
    dim: int
    blob: bytes
    embedded_at: str


class UserMemories:
    """One user's memories as aligned arrays; slot `i` of every array is row `rows[i]`.

    Deleted memories leave a dead slot (`alive` False) until the arrays are compacted. Only the
    event loop changes an entry, in place; `changes` counts the updates, so that a reader that
    awaited between two uses of slots can tell whether they still mean the same rows.
    """

    def __init__(self, user_id: OwnerKey, model: str | None, version: Version) -> None:
        self.user_id = user_id
        self.model = model
        self.version = version
        self.rows: list[MemoryRow | None] = []
        # In shards past a few thousand ids (bot/memory/cache/slices.py): a dict of 100,000
        # grew by a 5 MB table cleared in one step, 40-52 ms of page faults on the loop.
        self.slot_of: ShardedDict[int, int] = ShardedDict()
        self.story_codes: dict[str, int] = {}
        self.place_codes: dict[str, int] = {}
        self.dim = 0
        self.load_seconds = 0.0
        self._text_chars = 0
        self.changes = 0
        # Bumped whenever slots move (compaction): slot-aligned arrays kept outside are void.
        self.layout = 0
        self._alloc(0)

    # --- arrays ------------------------------------------------------------------------------

    def _alloc(self, capacity: int) -> None:
        self.ids = np.zeros(capacity, dtype=np.int64)
        self.alive = np.zeros(capacity, dtype=bool)
        self.type_code = np.full(capacity, RULE_CODE, dtype=np.int8)
        self.is_global = np.zeros(capacity, dtype=bool)
        self.pinned = np.zeros(capacity, dtype=bool)
        self.confidence = np.zeros(capacity, dtype=np.float64)
        self.updated_us = np.zeros(capacity, dtype=np.int64)
        self.expires_us = np.full(capacity, NO_EXPIRY, dtype=np.int64)
        self.story = np.full(capacity, NO_CODE, dtype=np.int32)
        self.place = np.full(capacity, NO_CODE, dtype=np.int32)
        self.has_vector = np.zeros(capacity, dtype=bool)
        # The `changes` at which each slot's vector was last set: what a column of scores
        # computed earlier must compute again (bot/memory/read/recall.py, the conversation's column).
        self.vector_stamp = np.zeros(capacity, dtype=np.int64)
        self.matrix = np.zeros((capacity, self.dim), dtype=np.float32)

    _COLUMNS = (
        "ids", "alive", "type_code", "is_global", "pinned", "confidence", "updated_us",
        "expires_us", "story", "place", "has_vector", "vector_stamp", "matrix",
    )  # fmt: skip

    def _grown(self, needed: int) -> dict[str, np.ndarray]:
        """Every column with room for `needed` slots (a quarter more at least), the current
        values copied: new arrays, the entry untouched (so a thread may build them)."""
        capacity = self.ids.shape[0]
        new_capacity = max(needed, capacity + capacity // 4, 64)
        grown = {}
        for name in self._COLUMNS:
            old = getattr(self, name)
            fill: Any = {"type_code": RULE_CODE, "expires_us": NO_EXPIRY, "story": NO_CODE, "place": NO_CODE}.get(
                name, 0
            )
            new = np.full((new_capacity, *old.shape[1:]), fill, dtype=old.dtype)
            new[: old.shape[0]] = old
            grown[name] = new
        return grown

    def _grow(self, needed: int) -> None:
        if needed > self.ids.shape[0]:
            for name, array in self._grown(needed).items():
                setattr(self, name, array)

    async def make_room(self, count: int) -> None:
        """Room for `count` more memories before `update` takes them. A large entry's columns
        are copied in a thread (numpy copies without the GIL): growing a person of 100,000 on
        the loop copied 150 MB there (2 s, 0.8 s of it the loop's CPU). Only the loop changes an
        entry, and the caller holds the person's lock: the arrays copied are still the current
        ones when they replace them."""
        needed = len(self.rows) + count
        if needed <= self.ids.shape[0]:
            return
        if self.matrix.nbytes < IN_THREAD_BYTES:
            self._grow(needed)
            return
        for name, array in (await asyncio.to_thread(self._grown, needed)).items():
            setattr(self, name, array)

    def __len__(self) -> int:
        return len(self.slot_of)

    @property
    def nbytes(self) -> int:
        arrays: int = sum(getattr(self, name).nbytes for name in self._COLUMNS)
        return arrays + ROW_OVERHEAD_BYTES * len(self.rows) + self._text_chars

    def _code(self, codes: dict[str, int], value: str | None) -> int:
        if value is None:
            return NO_CODE
        return codes.setdefault(value, len(codes))

    def story_code(self, story_id: StoryId | None) -> int:
        return NO_CODE if story_id is None else self.story_codes.get(story_id, UNKNOWN_CODE)

    def place_code(self, place: str | None) -> int:
        return NO_CODE if place is None else self.place_codes.get(place, UNKNOWN_CODE)

    # --- filling -----------------------------------------------------------------------------

    async def fill(self, rows: Sequence[MemoryRow], vectors: Mapping[int, Vector], slices: Slices) -> None:
        """The whole entry from the user's rows (in id order) and vectors, on the event loop,
        returning to it every SLICE_SECONDS: a worker thread would hold the GIL against the loop
        (several hundred milliseconds of lag at 20,000 memories), and at 100,000 memories even
        one unsliced pass over the rows (the id map, a sum of lengths) stops it for 20-60 ms."""
        newest: Vector | None = None
        for done, vector in enumerate(vectors.values(), 1):
            if newest is None or vector.embedded_at > newest.embedded_at:
                newest = vector
            if not done % FILL_SLICE:
                await slices.tick()
        self.dim = 0 if newest is None else newest.dim
        self._alloc(len(rows))
        if self.matrix.nbytes >= IN_THREAD_BYTES:
            # Written once in a thread, so that the copies below find its pages in place: the
            # first write to each page of a new array is a page fault, and on a loaded virtual
            # machine 32 vectors' worth of them held the loop for 20 ms.
            await asyncio.to_thread(self.matrix.fill, 0)
        self.rows = list(rows)
        self.slot_of = ShardedDict()
        self._text_chars = 0
        for start in range(0, len(rows), FILL_SLICE):
            part = rows[start : start + FILL_SLICE]
            end = start + len(part)
            for slot, r in enumerate(part, start):
                self.slot_of[int(r.id)] = slot
                # The clock after each id: consecutive ids fill the map's parts evenly, so that
                # all of them grow within a few dozen ids (see ShardedDict).
                await slices.tick()
            self._text_chars += sum(len(r.text) for r in part)
            self.ids[start:end] = [r.id for r in part]
            self.alive[start:end] = True
            self.type_code[start:end] = [TYPE_CODES.get(r.type, RULE_CODE) for r in part]
            self.is_global[start:end] = [r.scope == "global" for r in part]
            self.story[start:end] = [self._code(self.story_codes, r.story_id) for r in part]
            self.place[start:end] = [self._code(self.place_codes, r.place) for r in part]
            self.confidence[start:end] = [r.confidence for r in part]
            self.pinned[start:end] = [bool(r.pinned) for r in part]
            self.updated_us[start:end] = _db_micros([r.updated_at for r in part])
            self.expires_us[start:end] = _db_micros([r.expires_at for r in part])
            await slices.tick()
        for done, (memory_id, vector) in enumerate(vectors.items(), 1):
            held = self.slot_of.get(memory_id)
            if held is not None:
                self._set_vector(held, rows[held].content_hash, vector)
            # More often than the rows: the first write to each page of a new matrix is a page
            # fault, and on a loaded machine 250 of them took 20 ms.
            if not done % VECTOR_SLICE:
                await slices.tick()

    def _set_vector(self, slot: int, memory_hash: str, vector: Vector | None) -> None:
        fresh = vector is not None and vector.dim == self.dim and vector.content_hash == memory_hash
        self.has_vector[slot] = fresh
        self.vector_stamp[slot] = self.changes
        if fresh:
            assert vector is not None
            self.matrix[slot] = np.frombuffer(vector.blob, dtype=VECTOR_DTYPE)

    def update(self, changed: Sequence[int], rows: Sequence[MemoryRow], vectors: dict[int, Vector]) -> bool:
        """Bring the `changed` memories to their current `rows` and `vectors` (absent: deleted).

        False when the entry cannot take them in place (vectors of another dimension): the
        caller loads it again.
        """
        if not self.dim and vectors:
            self.dim = newest_vector(list(vectors.values())).dim
            self.matrix = np.zeros((self.ids.shape[0], self.dim), dtype=np.float32)
        if any(v.dim != self.dim for v in vectors.values()):
            return False
        self.changes += 1
        current = {int(r.id): r for r in rows}
        for memory_id in changed:
            slot = self.slot_of.get(memory_id)
            row = current.get(memory_id)
            if row is None:
                if slot is not None:
                    self._kill(slot)
                continue
            if slot is None:
                slot = len(self.rows)
                self._grow(slot + 1)
                self.rows.append(row)
                self.slot_of[memory_id] = slot
            else:
                self._text_chars -= len(self.row(slot).text)
                self.rows[slot] = row
            self._text_chars += len(row.text)
            self._set_row(slot, row)
            self._set_vector(slot, row.content_hash, vectors.get(memory_id))
        if len(self.rows) > 64 and len(self.slot_of) < len(self.rows) // 2:
            self._compact()
        return True

    def _set_row(self, slot: int, row: MemoryRow) -> None:
        self.ids[slot] = row.id
        self.alive[slot] = True
        self.type_code[slot] = TYPE_CODES.get(row.type, RULE_CODE)
        self.is_global[slot] = row.scope == "global"
        self.story[slot] = self._code(self.story_codes, row.story_id)
        self.place[slot] = self._code(self.place_codes, row.place)
        self.confidence[slot] = row.confidence
        self.pinned[slot] = bool(row.pinned)
        self.updated_us[slot] = _db_micros([row.updated_at])[0]
        self.expires_us[slot] = _db_micros([row.expires_at])[0]

    def _kill(self, slot: int) -> None:
        row = self.row(slot)
        del self.slot_of[int(row.id)]
        self._text_chars -= len(row.text)
        self.rows[slot] = None
        self.alive[slot] = False
        self.has_vector[slot] = False
        self.type_code[slot] = RULE_CODE

    def _compact(self) -> None:
        keep = np.flatnonzero(self.alive[: len(self.rows)])
        self.layout += 1
        for name in self._COLUMNS:
            setattr(self, name, getattr(self, name)[keep].copy())
        self.rows = [self.rows[i] for i in keep.tolist()]
        slot_of: ShardedDict[int, int] = ShardedDict()
        for i in range(len(self.rows)):
            slot_of[self.row(i).id] = i
        self.slot_of = slot_of

    # --- reading -----------------------------------------------------------------------------

    def candidates(self, now: datetime, *, story_id: StoryId, place: str | None, share: bool) -> np.ndarray:
        """Slots of the turn's candidates, in id order within each load (the store's filter:
        no rule, not expired, global or of this story, of this place unless shared)."""
        return np.flatnonzero(self._in_reach(slice(0, len(self.rows)), now, story_id, place, share))

    def in_reach(
        self, slots: np.ndarray, now: datetime, *, story_id: StoryId, place: str | None, share: bool
    ) -> np.ndarray:
        """Which of `slots` are among `candidates(...)`: read at those slots only, whatever the
        number of candidates."""
        return self._in_reach(slots, now, story_id, place, share)

    def _in_reach(
        self, at: slice | np.ndarray, now: datetime, story_id: StoryId, place: str | None, share: bool
    ) -> np.ndarray:
        mask: np.ndarray = self.alive[at] & (self.type_code[at] < RULE_CODE) & (self.expires_us[at] > micros(now))
        mask &= self.is_global[at] | (self.story[at] == self.story_code(story_id))
        if not share:
            places = self.place[at]
            mask &= (places == NO_CODE) | (places == self.place_code(place))
        return mask

    def row(self, slot: int) -> MemoryRow:
        """The row of a live slot (a forgotten one holds None until the entry is compacted)."""
        row = self.rows[slot]
        assert row is not None, f"slot {slot} holds no memory"
        return row

    def memory(self, slot: int) -> Memory:
        return row_to_memory(self.row(slot))

    def memories(self, slots: Sequence[int] | np.ndarray) -> list[Memory]:
        return [row_to_memory(self.row(i)) for i in (slots.tolist() if isinstance(slots, np.ndarray) else slots)]

    def ids_of(self, slots: np.ndarray) -> list[int]:
        ids: list[int] = self.ids[slots].tolist()
        return ids

    def scores(self, query: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots that have a vector, their cosines) for an L2-normalised query (d,), or for
        several stacked (k, d): then cosines are (k, slots), read in one pass over the matrix."""
        with_vector = slots[self.has_vector[slots]]
        rows = query.reshape(-1, query.shape[-1])
        if not with_vector.size:
            empty = np.empty((rows.shape[0], 0), dtype=np.float32)
            return with_vector, empty if query.ndim == 2 else empty[0]
        if self.dim != query.shape[-1]:
            raise ValueError(f"the query has {query.shape[-1]} dimensions and the stored vectors {self.dim}")
        # Every row, then the wanted ones: gathering the rows first would copy the matrix (150 MB
        # at 100 000 memories). einsum, not `@`: see bot.memory.reference.scoring.cosine_scores (no BLAS
        # thread pool woken per turn).
        every = np.einsum("ij,kj->ki", self.matrix[: len(self.rows)], rows.astype(np.float32, copy=False))
        return with_vector, every[:, with_vector] if query.ndim == 2 else every[0, with_vector]


def expiry_of(expires_us: Any) -> int | None:
    value = int(expires_us)
    return None if value == NO_EXPIRY else value


def newest_vector(vectors: Sequence[Vector]) -> Vector:
    # One model name gives one dimension, unless the server behind it was swapped: then only the
    # newest vectors are comparable with today's queries.
    return max(vectors, key=lambda v: v.embedded_at)
