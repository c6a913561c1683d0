"""Each user's memories held in memory, in step with the database.

One entry per user (`UserMemories`, bot/memory/cache/entry.py): the rows of their memories and
the columns the read path filters and ranks on. A turn filters, scores and ranks over these
arrays and builds `Memory` objects only for what it keeps.

SQLite stays the only truth. Every change to a user's memories or vectors bumps that user's
version in the same transaction (triggers of migration 0007) and records which memory changed
at which version. Before serving an entry, the cache reads the user's version (one indexed
row): equal, the entry is current; ahead, the cache reads again only the memories changed
since (their rows and vectors) and updates the entry in place. So writes of this process (a
reflection, a command, the indexer) and of any other process sharing the file reach every
entry the same way, without being thrown away. A new epoch (the user was erased) or a large
share of changed rows loads the entry again whole.

The entry may be a little ahead of the version it is labelled with (rows are read after the
version, outside one snapshot); a later check then reads those rows again: never behind. A
person of more than LOAD_PAGE memories is read on a connection of its own, in one snapshot with
their version (`Database.reading()`): a turn for them waits for their rows, nobody else does.

Bounded by bytes (`max_bytes`), the estimate counting arrays, vectors and rows. Eviction is
size-aware (GreedyDual-Size): each entry is worth the time its load took per byte it holds,
aged by a clock that rises to the value of each evicted entry, so a large user that is cheap
to read again goes before many small ones read often, and an idle entry ages out whatever its
size. An entry larger than the whole budget is served once and not kept.

What derives state from an entry (the write path's indexes) follows it (`Follower`): told of each
catch-up and drop, and counted in the budget with the entry.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, MutableMapping, Sequence
from datetime import datetime
from typing import Protocol

import numpy as np

from bot.clients.locks import KeyedLocks
from bot.clients.storage import Connection, Database, Row
from bot.memory.cache.entry import UserMemories, Vector
from bot.memory.cache.slices import Foreground, ShardedDict, Slices, freeze_long_lived
from bot.memory.model import OwnerKey, StoryId
from bot.memory.stores.memories import (
    MemoryRow,
    changed_since,
    holds_more_than,
    memory_pages,
    memory_rows,
    memory_version,
)
from bot.memory.stores.vectors import vector_pages, vector_rows

DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
# A change log longer than this share of the entry is read as a reload: one scan beats many
# lookups by id.
RELOAD_SHARE = 0.25
# A person with more memories than this, or a catch-up of more, is read on a connection of its
# own (`Database.reading()`), this many rows at a time; fewer, in one statement on the caller's.
LOAD_PAGE = 5_000


class Follower(Protocol):
    """State derived from a person's entry and kept beside it (the write path's indexes): told
    which memories each catch-up read and when the entry goes, and counted in the budget."""

    def caught_up(self, user_id: OwnerKey, entry: UserMemories, changed: Sequence[int]) -> None: ...

    def dropped(self, user_id: OwnerKey) -> None: ...

    def nbytes(self, user_id: OwnerKey) -> int: ...


class MemoryCache:
    """The users' `UserMemories`, current when handed out, bounded by `max_bytes`."""

    def __init__(
        self,
        db: Database,
        model: str | None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        foreground: Foreground | None = None,
    ) -> None:
        if max_bytes < 1:
            raise ValueError("a memory cache needs room for at least one byte")
        self.db = db
        self.model = model
        self.max_bytes = max_bytes
        # The turns doing memory work now: a long job for one person (a load, and what follows
        # the entry: the write index, the series scan) steps aside for the others' (Slices).
        self.foreground = foreground if foreground is not None else Foreground()
        self._entries: dict[OwnerKey, UserMemories] = {}
        self._value: dict[OwnerKey, float] = {}
        self._clock = 0.0
        self._locks: KeyedLocks[str] = KeyedLocks()
        # Erasures per user, so that a load under way when the user was erased is not kept.
        self._forgotten: dict[OwnerKey, int] = {}
        self._followers: list[Follower] = []
        # How entries were brought up to date, for benches and tests.
        self.loads = 0
        self.catch_ups = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._entries

    def reads(self) -> dict[str, int]:
        """How reads were served: from the entry as held, after a catch-up, by a whole load."""
        return {"hit": self.hits, "catch_up": self.catch_ups, "load": self.loads}

    @property
    def nbytes(self) -> int:
        return sum(self._bytes_of(u) for u in self._entries)

    def follow(self, follower: Follower) -> None:
        """Keep `follower` told of every entry's catch-ups and drops from now on."""
        self._followers.append(follower)

    def _bytes_of(self, user_id: OwnerKey) -> int:
        return self._entries[user_id].nbytes + sum(f.nbytes(user_id) for f in self._followers)

    def forget(self, user_id: OwnerKey) -> None:
        """Drop a user's entry (after an erase: nothing of theirs stays in memory, and a load
        under way is not kept)."""
        self._drop(user_id)
        self._forgotten[user_id] = self._forgotten.get(user_id, 0) + 1

    def _drop(self, user_id: OwnerKey) -> None:
        self._entries.pop(user_id, None)
        self._value.pop(user_id, None)
        for follower in self._followers:
            follower.dropped(user_id)

    async def rows_in_reach(
        self, user_id: OwnerKey, ids: Iterable[int], now: datetime, *, story_id: StoryId, place: str, share: bool
    ) -> dict[int, MemoryRow]:
        """The rows of `ids` among a turn's candidates (`UserMemories.candidates`; deleted, expired
        and out-of-reach ones missing) as the cache last read them: a turn asks this of every
        memory its last prompt showed, moments after its selection read the entry, so the
        database is asked again only when the entry was let go; rows, not memories."""
        entry = self._entries.get(user_id)
        if entry is None:
            entry = await self.get(user_id)
        slot_of = entry.slot_of
        found = [(i, slot) for i in ids if (slot := slot_of.get(i)) is not None]
        if not found:
            return {}
        slots = np.fromiter((slot for _, slot in found), dtype=np.int64, count=len(found))
        reach = entry.in_reach(slots, now, story_id=story_id, place=place, share=share).tolist()
        return {i: entry.row(slot) for (i, slot), kept in zip(found, reach, strict=True) if kept}

    async def get(self, user_id: OwnerKey, conn: Connection | None = None) -> UserMemories:
        """The user's memories as of now: one read of their version when nothing changed.

        `conn`: the connection to read through, by default the shared reader. A caller holding
        the write lock passes its own: the reader may be busy with others' reads, and the lock
        would be held while waiting for them."""
        async with self._locks.hold(user_id):
            return await self._current(user_id, conn)

    async def catch_up(self, user_id: OwnerKey) -> None:
        """Bring a held entry level with the database now, after a write nobody waits for (a
        reflection, its vectors): the person's next turn then reads their version alone, not
        the rows and vectors that changed. An entry not held stays unloaded."""
        async with self._locks.hold(user_id):
            if user_id in self._entries:
                await self._current(user_id, None)

    async def _current(self, user_id: OwnerKey, own: Connection | None) -> UserMemories:
        # `own`: a caller's connection, inside the write lock (see `get`); a load for it never
        # steps aside for other people's turns, which may be waiting for that lock.
        conn = own or self.db.reader
        forgotten = self._forgotten.get(user_id, 0)
        version = await memory_version(conn, user_id)
        entry = self._entries.get(user_id)
        if entry is not None and entry.version == version:
            self.hits += 1
            self._touch(user_id, entry)
            return entry
        if entry is not None and entry.version[0] == version[0] and entry.version[1] < version[1]:
            changed = await changed_since(conn, user_id, entry.version[1])
            if len(changed) <= max(64, RELOAD_SHARE * len(entry)):
                if len(changed) > LOAD_PAGE:
                    async with self.db.reading() as own:
                        rows, vectors = await self._changed(own, user_id, changed)
                else:
                    rows, vectors = await self._changed(conn, user_id, changed)
                await entry.make_room(len(rows))
                if entry.update(changed, rows, vectors):
                    entry.version = version
                    self.catch_ups += 1
                    if self._forgotten.get(user_id, 0) != forgotten:
                        # Erased while the changes were read: served once, not kept (as a load).
                        return entry
                    for follower in self._followers:
                        follower.caught_up(user_id, entry, changed)
                    self._keep(user_id, entry)
                    return entry
        return await self._load(conn, user_id, version, step_aside=own is None)

    async def _changed(
        self, conn: Connection, user_id: OwnerKey, changed: Sequence[int]
    ) -> tuple[list[MemoryRow], dict[int, Vector]]:
        rows = await memory_rows(conn, user_id, changed)
        vectors: dict[int, Vector] = {}
        if self.model is not None:
            await _add_vectors(vectors, await vector_rows(conn, user_id, self.model, changed), Slices())
        return rows, vectors

    async def _load(
        self, conn: Connection, user_id: OwnerKey, version: tuple[int, int], *, step_aside: bool
    ) -> UserMemories:
        """The whole entry, read again. `step_aside`: for other people's turns (Foreground);
        never for a caller holding the write lock, which those turns may be waiting for."""
        started = time.perf_counter()
        forgotten = self._forgotten.get(user_id, 0)
        rows: list[MemoryRow] = []
        # Split (see ShardedDict): a dict of 100,000 vectors grew by a 5 MB table in one step,
        # 41 ms of page faults on the loop in a cold load.
        vectors: ShardedDict[int, Vector] = ShardedDict()
        slices = Slices(self.foreground if step_aside else None, user_id)
        if await holds_more_than(conn, user_id, LOAD_PAGE):
            # On a connection of its own, in one snapshot: on the shared reader, which runs one
            # statement at a time, the pages of a person's 100,000 rows and vectors held every
            # other person's reads (their turns waited seconds).
            async with self.db.reading() as own:
                version = await memory_version(own, user_id)
                # Closed before the connection, whatever stops the load (a cancel, an error).
                async with contextlib.aclosing(memory_pages(own, user_id, LOAD_PAGE)) as pages:
                    async for page in pages:
                        rows.extend(page)
                        # Each page, not once at the end: the rows read so far would otherwise
                        # be walked by every full collection the next pages' allocations trigger
                        # (30-55 ms each at 100,000).
                        freeze_long_lived()
                        # Before the next page: the reading thread makes its rows holding the
                        # GIL against everyone's turns.
                        await slices.tick()
                if self.model is not None:
                    async with contextlib.aclosing(
                        vector_pages(own, user_id, self.model, LOAD_PAGE)
                    ) as vector_rows_read:
                        async for vector_page in vector_rows_read:
                            await _add_vectors(vectors, vector_page, slices)
                            freeze_long_lived()
        else:
            rows = await memory_rows(conn, user_id)
            if self.model is not None:
                await _add_vectors(vectors, await vector_rows(conn, user_id, self.model), slices)
        freeze_long_lived()
        entry = UserMemories(user_id, self.model, version)
        await entry.fill(rows, vectors, slices)
        await vectors.release(slices)  # copied into the entry's matrix
        freeze_long_lived()
        entry.load_seconds = time.perf_counter() - started
        self.loads += 1
        if self._forgotten.get(user_id, 0) == forgotten:
            # Otherwise the user was erased while their rows were read: served once, not kept.
            self._keep(user_id, entry)
        return entry

    def _touch(self, user_id: OwnerKey, entry: UserMemories) -> None:
        self._value[user_id] = self._clock + entry.load_seconds / max(1, entry.nbytes) * 1e9

    def _keep(self, user_id: OwnerKey, entry: UserMemories) -> None:
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


async def _add_vectors(vectors: MutableMapping[int, Vector], rows: Sequence[Row], slices: Slices) -> None:
    """The vectors of `rows` (as `vector_rows` reads them) into `vectors`, by memory id, giving
    the loop back between slices: the clock after each id, so that a ShardedDict's parts grow in
    different slices."""
    for r in rows:
        vectors[int(r["memory_id"])] = Vector(r["content_hash"], int(r["dim"]), r["vector"], r["embedded_at"])
        await slices.tick()
