"""Each user's memories held in memory, in step with the database.

One entry per user: the rows of their memories (rules aside) and, aligned with them, numpy
columns of what the read path filters and ranks on (type, scope, pin, confidence, dates, story,
place) and the matrix of their vectors for the engine's embedding model. A turn filters,
scores and ranks over these arrays and builds `Memory` objects only for what it keeps.

SQLite stays the only truth. Every change to a user's memories or vectors bumps that user's
version in the same transaction (triggers of migration 0007) and records which memory changed
at which version. Before serving an entry, the cache reads the user's version (one indexed
row): equal, the entry is current; ahead, the cache reads again only the memories changed
since (their rows and vectors) and updates the entry in place. So writes of this process (a
reflection, a command, the indexer) and of any other process sharing the file reach every
entry the same way, without being thrown away. A new epoch (the user was erased) or a large
share of changed rows loads the entry again whole.

The entry may be a little ahead of the version it is labelled with (rows are read after the
version, outside one snapshot); a later check then reads those rows again: never behind.

Bounded by bytes (`max_bytes`), the estimate counting arrays, vectors and rows. Eviction is
size-aware (GreedyDual-Size): each entry is worth the time its load took per byte it holds,
aged by a clock that rises to the value of each evicted entry, so a large user that is cheap
to read again goes before many small ones read often, and an idle entry ages out whatever its
size. An entry larger than the whole budget is served once and not kept.

Over 450 lines on purpose: loading, catching up by version, the columns selection reads and
eviction share one entry's invariants (rows, arrays and vectors aligned by slot), so they stay
in one file.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from bot.clients.db import from_db
from bot.clients.locks import KeyedLocks
from bot.clients.storage import Connection, Database
from bot.memory.model import Memory
from bot.memory.stores.memories import changed_since, memory_rows, memory_version, row_to_memory
from bot.memory.stores.vectors import VECTOR_DTYPE, vector_rows
from bot.memory.write_index import WriteIndex

DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
# A change log longer than this share of the entry is read as a reload: one scan beats many
# lookups by id.
RELOAD_SHARE = 0.25
# Rows read per statement when a user is loaded whole.
LOAD_PAGE = 5_000
# Long jobs on the event loop (filling an entry, building a write index) return to it once they
# have run this long.
SLICE_SECONDS = 0.005
# Rows an entry is filled by between two looks at the clock (well under a millisecond of work).
FILL_SLICE = 250
# What one cached row costs beyond its arrays and vector, measured with tracemalloc on the
# recall corpus (a sqlite3.Row, its strings and the list slot), text length aside.
ROW_OVERHEAD_BYTES = 520
# What a memory costs in a write index (dedup features and character codes, flip keys), measured
# the same way (bench/latency.py --rss prints the RSS it takes).
WRITE_INDEX_BYTES_PER_MEMORY = 3000
TYPE_CODES: dict[str, int] = {"fact": 0, "preference": 1, "promise": 2, "episode": 3}
RULE_CODE = 4
NO_EXPIRY = np.iinfo(np.int64).max
NO_CODE = -1
UNKNOWN_CODE = -2
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

Version = tuple[int, int]


def micros(dt: datetime) -> int:
    """Exact microseconds since the epoch (a float timestamp loses the last digit)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // _MICROSECOND


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - _EPOCH


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
            out[i] = micros(from_db(value))  # type: ignore[arg-type]
    return out


@dataclass(slots=True)
class _Vector:
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

    def __init__(self, user_id: str, model: str | None, version: Version) -> None:
        self.user_id = user_id
        self.model = model
        self.version = version
        self.rows: list[Any] = []
        self.slot_of: dict[int, int] = {}
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
        # computed earlier must compute again (bot/memory/recall.py, the conversation's column).
        self.vector_stamp = np.zeros(capacity, dtype=np.int64)
        self.matrix = np.zeros((capacity, self.dim), dtype=np.float32)

    _COLUMNS = (
        "ids", "alive", "type_code", "is_global", "pinned", "confidence", "updated_us",
        "expires_us", "story", "place", "has_vector", "vector_stamp", "matrix",
    )  # fmt: skip

    def _grow(self, needed: int) -> None:
        capacity = self.ids.shape[0]
        if needed <= capacity:
            return
        new_capacity = max(needed, 2 * capacity, 64)
        for name in self._COLUMNS:
            old = getattr(self, name)
            fill: Any = {"type_code": RULE_CODE, "expires_us": NO_EXPIRY, "story": NO_CODE, "place": NO_CODE}.get(name, 0)
            new = np.full((new_capacity, *old.shape[1:]), fill, dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)

    def __len__(self) -> int:
        return len(self.slot_of)

    @property
    def nbytes(self) -> int:
        arrays = sum(getattr(self, name).nbytes for name in self._COLUMNS)
        return arrays + ROW_OVERHEAD_BYTES * len(self.rows) + self._text_chars

    def _code(self, codes: dict[str, int], value: str | None) -> int:
        if value is None:
            return NO_CODE
        return codes.setdefault(value, len(codes))

    def story_code(self, story_id: str | None) -> int:
        return NO_CODE if story_id is None else self.story_codes.get(story_id, UNKNOWN_CODE)

    def place_code(self, place: str | None) -> int:
        return NO_CODE if place is None else self.place_codes.get(place, UNKNOWN_CODE)

    # --- filling -----------------------------------------------------------------------------

    async def fill(self, rows: Sequence[Any], vectors: dict[int, _Vector], slices: _Slices) -> None:
        """The whole entry from the user's rows (in id order) and vectors, on the event loop,
        returning to it every SLICE_SECONDS: a worker thread would hold the GIL against the loop
        (several hundred milliseconds of lag at 20,000 memories), and at 100,000 memories even
        one unsliced pass over the rows (the id map, a sum of lengths) stops it for 20-60 ms."""
        values = list(vectors.values())
        newest: _Vector | None = None
        for start in range(0, len(values), FILL_SLICE):
            candidate = _newest(values[start : start + FILL_SLICE])
            if newest is None or candidate.embedded_at > newest.embedded_at:
                newest = candidate
            await slices.tick()
        self.dim = 0 if newest is None else newest.dim
        self._alloc(len(rows))
        self.rows = list(rows)
        self.slot_of = {}
        self._text_chars = 0
        for start in range(0, len(rows), FILL_SLICE):
            part = rows[start : start + FILL_SLICE]
            end = start + len(part)
            self.slot_of.update((int(r[0]), slot) for slot, r in enumerate(part, start))
            self._text_chars += sum(len(r[2]) for r in part)
            self.ids[start:end] = [r[0] for r in part]
            self.alive[start:end] = True
            self.type_code[start:end] = [TYPE_CODES.get(r[3], RULE_CODE) for r in part]
            self.is_global[start:end] = [r[4] == "global" for r in part]
            self.story[start:end] = [self._code(self.story_codes, r[5]) for r in part]
            self.place[start:end] = [self._code(self.place_codes, r[6]) for r in part]
            self.confidence[start:end] = [r[7] for r in part]
            self.pinned[start:end] = [bool(r[8]) for r in part]
            self.updated_us[start:end] = _db_micros([r[10] for r in part])
            self.expires_us[start:end] = _db_micros([r[11] for r in part])
            await slices.tick()
        for done, (memory_id, vector) in enumerate(vectors.items(), 1):
            slot = self.slot_of.get(memory_id)
            if slot is not None:
                self._set_vector(slot, rows[slot][13], vector)
            if not done % FILL_SLICE:
                await slices.tick()

    def _set_vector(self, slot: int, memory_hash: str, vector: _Vector | None) -> None:
        fresh = vector is not None and vector.dim == self.dim and vector.content_hash == memory_hash
        self.has_vector[slot] = fresh
        self.vector_stamp[slot] = self.changes
        if fresh:
            assert vector is not None
            self.matrix[slot] = np.frombuffer(vector.blob, dtype=VECTOR_DTYPE)

    def update(self, changed: Sequence[int], rows: Sequence[Any], vectors: dict[int, _Vector]) -> bool:
        """Bring the `changed` memories to their current `rows` and `vectors` (absent: deleted).

        False when the entry cannot take them in place (vectors of another dimension): the
        caller loads it again.
        """
        if not self.dim and vectors:
            self.dim = _newest(list(vectors.values())).dim
            self.matrix = np.zeros((self.ids.shape[0], self.dim), dtype=np.float32)
        if any(v.dim != self.dim for v in vectors.values()):
            return False
        self.changes += 1
        current = {int(r[0]): r for r in rows}
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
                self._text_chars -= len(self.rows[slot][2])
                self.rows[slot] = row
            self._text_chars += len(row[2])
            self._set_row(slot, row)
            self._set_vector(slot, row[13], vectors.get(memory_id))
        if len(self.rows) > 64 and len(self.slot_of) < len(self.rows) // 2:
            self._compact()
        return True

    def _set_row(self, slot: int, row: Any) -> None:
        self.ids[slot] = row[0]
        self.alive[slot] = True
        self.type_code[slot] = TYPE_CODES.get(row[3], RULE_CODE)
        self.is_global[slot] = row[4] == "global"
        self.story[slot] = self._code(self.story_codes, row[5])
        self.place[slot] = self._code(self.place_codes, row[6])
        self.confidence[slot] = row[7]
        self.pinned[slot] = bool(row[8])
        self.updated_us[slot] = _db_micros([row[10]])[0]
        self.expires_us[slot] = _db_micros([row[11]])[0]

    def _kill(self, slot: int) -> None:
        row = self.rows[slot]
        del self.slot_of[int(row[0])]
        self._text_chars -= len(row[2])
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
        self.slot_of = {int(r[0]): i for i, r in enumerate(self.rows)}

    # --- reading -----------------------------------------------------------------------------

    def candidates(self, now: datetime, *, story_id: str, place: str | None, share: bool) -> np.ndarray:
        """Slots of the turn's candidates, in id order within each load (the store's filter:
        no rule, not expired, global or of this story, of this place unless shared)."""
        n = len(self.rows)
        mask = self.alive[:n] & (self.type_code[:n] < RULE_CODE) & (self.expires_us[:n] > micros(now))
        mask &= self.is_global[:n] | (self.story[:n] == self.story_code(story_id))
        if not share:
            places = self.place[:n]
            mask &= (places == NO_CODE) | (places == self.place_code(place))
        return np.flatnonzero(mask)

    def memory(self, slot: int) -> Memory:
        return row_to_memory(self.rows[slot])

    def memories(self, slots: Sequence[int] | np.ndarray) -> list[Memory]:
        rows = self.rows
        return [row_to_memory(rows[i]) for i in (slots.tolist() if isinstance(slots, np.ndarray) else slots)]

    def ids_of(self, slots: np.ndarray) -> list[int]:
        return self.ids[slots].tolist()

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
        # at 100 000 memories). einsum, not `@`: see bot.memory.scoring.cosine_scores (no BLAS
        # thread pool woken per turn).
        every = np.einsum("ij,kj->ki", self.matrix[: len(self.rows)], rows.astype(np.float32, copy=False))
        return with_vector, every[:, with_vector] if query.ndim == 2 else every[0, with_vector]


def _freeze_long_lived() -> None:
    """Move every object alive now out of the cyclic collector's reach (`gc.freeze`).

    A full collection walks every tracked object: with a user's 100,000 rows, vectors and write
    index alive, each one stopped the event loop for seconds (0.6 s already at 20,000 memories),
    however the work around it was sliced. What the cache holds lives until evicted and holds no
    reference cycle, so reference counting still frees it then; a garbage cycle of other code
    frozen along with it stays until exit.
    """
    gc.freeze()


def _expiry(expires_us: Any) -> int | None:
    value = int(expires_us)
    return None if value == NO_EXPIRY else value


def _newest(vectors: Sequence[_Vector]) -> _Vector:
    # One model name gives one dimension, unless the server behind it was swapped: then only the
    # newest vectors are comparable with today's queries.
    return max(vectors, key=lambda v: v.embedded_at)


class _Slices:
    """Where a long job on the event loop gives it back: `tick` returns to the loop once the job
    has run SLICE_SECONDS since it last did, so that turns go on between its slices."""

    def __init__(self) -> None:
        self._started = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._started > SLICE_SECONDS:
            await asyncio.sleep(0)
            self._started = time.perf_counter()


class MemoryCache:
    """The users' `UserMemories`, current when handed out, bounded by `max_bytes`."""

    def __init__(self, db: Database, model: str | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError("a memory cache needs room for at least one byte")
        self.db = db
        self.model = model
        self.max_bytes = max_bytes
        self._entries: dict[str, UserMemories] = {}
        self._value: dict[str, float] = {}
        self._clock = 0.0
        self._locks: KeyedLocks[str] = KeyedLocks()
        # One builder per user and place at a time: the start-up warm-up and a reflection may
        # both ask for the same index, and a half-built one must never be used. Per place, so
        # that a reflection holding the write lock never waits for another place's build.
        self._index_locks: KeyedLocks[tuple[str, str | None]] = KeyedLocks()
        # Erasures per user, so that a load under way when the user was erased is not kept.
        self._forgotten: dict[str, int] = {}
        # Per user and place, what the write path compares new text with (built on the first
        # reflection, then fed the rows each catch-up reads), and the entry it was built from.
        self._write_indexes: dict[str, tuple[UserMemories, dict[str | None, WriteIndex]]] = {}
        # How entries were brought up to date, for benches and tests.
        self.loads = 0
        self.catch_ups = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._entries

    @property
    def nbytes(self) -> int:
        return sum(self._bytes_of(u) for u in self._entries)

    def _bytes_of(self, user_id: str) -> int:
        held = self._write_indexes.get(user_id)
        indexed = sum(len(index) for index in held[1].values()) if held is not None else 0
        return self._entries[user_id].nbytes + WRITE_INDEX_BYTES_PER_MEMORY * indexed

    def forget(self, user_id: str) -> None:
        """Drop a user's entry (after an erase: nothing of theirs stays in memory, and a load
        under way is not kept)."""
        self._drop(user_id)
        self._forgotten[user_id] = self._forgotten.get(user_id, 0) + 1

    def _drop(self, user_id: str) -> None:
        self._entries.pop(user_id, None)
        self._value.pop(user_id, None)
        self._write_indexes.pop(user_id, None)

    async def get(self, user_id: str, conn: Connection | None = None) -> UserMemories:
        """The user's memories as of now: one read of their version when nothing changed.

        `conn`: the connection to read through, by default the shared reader. A caller holding
        the write lock passes its own: the reader may be busy loading another user's 100,000
        rows, and the lock would be held while waiting for it."""
        async with self._locks.hold(user_id):
            return await self._current(user_id, conn or self.db.reader)

    async def _current(self, user_id: str, conn: Connection) -> UserMemories:
        version = await memory_version(conn, user_id)
        entry = self._entries.get(user_id)
        if entry is not None and entry.version == version:
            self.hits += 1
            self._touch(user_id, entry)
            return entry
        if entry is not None and entry.version[0] == version[0] and entry.version[1] < version[1]:
            changed = await changed_since(conn, user_id, entry.version[1])
            if len(changed) <= max(64, RELOAD_SHARE * len(entry)):
                rows = await memory_rows(conn, user_id, changed)
                vectors = await self._vectors(conn, user_id, changed)
                if entry.update(changed, rows, vectors):
                    entry.version = version
                    self.catch_ups += 1
                    for index in self._write_indexes.get(user_id, (None, {}))[1].values():
                        index.pending.update(changed)
                    self._keep(user_id, entry)
                    return entry
        return await self._load(conn, user_id, version)

    async def write_index(
        self, user_id: str, place: str | None, now: datetime, conn: Connection | None = None
    ) -> tuple[UserMemories, WriteIndex]:
        """The user's memories as of now and their write index for `place`, caught up with
        every change read since it was last used. The first one of a user and place is built in
        slices on the event loop: one long job, not one per reflection.

        The write path may change the index in place while its transaction runs; if that
        transaction does not commit, it must call `drop_write_indexes`. `conn`: as for `get`.
        """
        async with self._index_locks.hold((user_id, place)):
            return await self._write_index(user_id, place, now, conn)

    async def _write_index(
        self, user_id: str, place: str | None, now: datetime, conn: Connection | None
    ) -> tuple[UserMemories, WriteIndex]:
        entry = await self.get(user_id, conn)
        now_us = micros(now)
        held = self._write_indexes.get(user_id)
        if held is None or held[0] is not entry:
            held = (entry, {})
            self._write_indexes[user_id] = held
        index = held[1].get(place)
        if index is None:
            index = WriteIndex(place)
            held[1][place] = index
            # Copies: a catch-up may change the entry between two slices (its ids go to `pending`).
            rows, expiries = list(entry.rows), entry.expires_us[: len(entry.rows)].tolist()
            index.reserve(len(rows))

            # On the loop in slices, not in a thread: a thread doing this pure-Python work holds
            # the GIL against the loop (750 ms of lag at 20,000 memories); slices hold it a few
            # milliseconds. The first index of a user with 100,000 memories takes 20-70 s of CPU
            # (by machine), once per process (the start-up warm-up does it ahead of the user);
            # turns go on meanwhile.
            slices = _Slices()
            try:
                for done, (row, expires_us) in enumerate(zip(rows, expiries), 1):
                    if row is not None:
                        expiry = None if expires_us == NO_EXPIRY else expires_us
                        index.put(int(row[0]), row[2], row[6], expiry, now_us)
                    if not done % FILL_SLICE:
                        _freeze_long_lived()
                    await slices.tick()
            except BaseException:
                # Cancelled halfway (shutdown, an erase): a partial index would miss duplicates.
                if held[1].get(place) is index:
                    del held[1][place]
                raise
            _freeze_long_lived()
            entry = await self.get(user_id, conn)  # what changed while it was built is in `pending`
            if self._write_indexes.get(user_id) is not held:
                # Reloaded whole meanwhile (another epoch, many changes): build from that one.
                return await self._write_index(user_id, place, now, conn)
        pending, index.pending = index.pending, set()
        for memory_id in sorted(pending):
            slot = entry.slot_of.get(memory_id)
            if slot is None:
                index.drop(memory_id)
            else:
                row = entry.rows[slot]
                index.put(memory_id, row[2], row[6], _expiry(entry.expires_us[slot]), now_us)
        index.expire(now_us)
        return entry, index

    def drop_write_indexes(self, user_id: str) -> None:
        """After a write that changed the user's write indexes and did not commit."""
        self._write_indexes.pop(user_id, None)

    async def _vectors(
        self, conn: Connection, user_id: str, among: Sequence[int] | None = None
    ) -> dict[int, _Vector]:
        if self.model is None:
            return {}
        vectors: dict[int, _Vector] = {}
        slices = _Slices()
        after = 0
        while True:
            # A whole load reads by pages: other users' reads on the shared reader go in between.
            if among is not None:
                rows = await vector_rows(conn, user_id, self.model, among)
            else:
                rows = await vector_rows(conn, user_id, self.model, after=after, limit=LOAD_PAGE)
            for start in range(0, len(rows), FILL_SLICE):
                part = rows[start : start + FILL_SLICE]
                vectors.update((int(r[0]), _Vector(r[1], int(r[2]), r[3], r[4])) for r in part)
                await slices.tick()
            if among is not None or len(rows) < LOAD_PAGE:
                return vectors
            after = int(rows[-1][0])

    async def _load(self, conn: Connection, user_id: str, version: tuple[int, int]) -> UserMemories:
        started = time.perf_counter()
        forgotten = self._forgotten.get(user_id, 0)
        rows: list[Any] = []
        while True:
            page = await memory_rows(conn, user_id, after=int(rows[-1][0]) if rows else 0, limit=LOAD_PAGE)
            rows.extend(page)
            # Each page, not once at the end: the rows read so far would otherwise be walked by
            # every full collection the next pages' allocations trigger (30-55 ms each at 100,000).
            _freeze_long_lived()
            if len(page) < LOAD_PAGE:
                break
        vectors = await self._vectors(conn, user_id)
        _freeze_long_lived()
        entry = UserMemories(user_id, self.model, version)
        await entry.fill(rows, vectors, _Slices())
        _freeze_long_lived()
        entry.load_seconds = time.perf_counter() - started
        self.loads += 1
        if self._forgotten.get(user_id, 0) == forgotten:
            # Otherwise the user was erased while their rows were read: served once, not kept.
            self._keep(user_id, entry)
        return entry

    def _touch(self, user_id: str, entry: UserMemories) -> None:
        self._value[user_id] = self._clock + entry.load_seconds / max(1, entry.nbytes) * 1e9

    def _keep(self, user_id: str, entry: UserMemories) -> None:
        self._entries[user_id] = entry
        if self._bytes_of(user_id) > self.max_bytes:
            self._drop(user_id)
            return
        self._touch(user_id, entry)
        total = self.nbytes
        while total > self.max_bytes and len(self._entries) > 1:
            victim = min((u for u in self._entries if u != user_id), key=self._value.__getitem__)
            self._clock = self._value[victim]
            total -= self._bytes_of(victim)
            self._drop(victim)
