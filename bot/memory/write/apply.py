"""The write path: apply one parsed reflection for one user, in one transaction.

The model proposes, this module decides: operations touch only ids that were shown to the model
(`allowed_ids`) and rows of this user; candidates go through the code filters, then dedup/merge.
Every replace, delete and merge archives the old version first. Every decision is reported
(bot/memory/write/decisions.py).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from bot.clients.storage import Connection, Database
from bot.errors import InvalidMemory, MemoryCapReached
from bot.memory.cache.entry import UserMemories
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.model import (
    Memory,
    MemoryType,
    NewMemory,
    Scope,
    check_room,
    utcnow,
)
from bot.memory.series import frame
from bot.memory.stores.memories import delete_memory, insert_memory, rewrite_memory, set_expiry
from bot.memory.stores.provenance import add_sources, record_change
from bot.memory.stores.stories import apply_story_reflection
from bot.memory.write import filters
from bot.memory.write.decisions import CHANGE_ACTIONS, SOURCED, Action, Decision, ReflectionContext, ReflectionReport
from bot.memory.write.dedup import MergeDecision, merge
from bot.memory.write.index import WriteIndex, WriteIndexes, same_place
from bot.memory.write.negation import flipped_negation
from bot.memory.write.reflection import Reflection
from bot.memory.write.replace_guard import judge_replacement

log = logging.getLogger(__name__)


def _same_place(memory: Memory, place: str | None) -> bool:
    return same_place(memory.place, place)


class _Memories:
    """The user's memories (rules aside) as the writer sees them: the cache's rows, built into
    `Memory` objects only when asked for, with the writer's own changes on top."""

    def __init__(self, entry: UserMemories) -> None:
        self._entry = entry
        self._local: dict[int, Memory | None] = {}
        self._count = len(entry)

    def get(self, memory_id: int) -> Memory | None:
        if memory_id in self._local:
            return self._local[memory_id]
        slot = self._entry.slot_of.get(memory_id)
        memory = None if slot is None else self._entry.memory(slot)
        self._local[memory_id] = memory
        return memory

    def __getitem__(self, memory_id: int) -> Memory:
        memory = self.get(memory_id)
        if memory is None:
            raise KeyError(memory_id)
        return memory

    def __setitem__(self, memory_id: int, memory: Memory) -> None:
        if self.get(memory_id) is None:
            self._count += 1
        self._local[memory_id] = memory

    def __delitem__(self, memory_id: int) -> None:
        if self.get(memory_id) is not None:
            self._count -= 1
        self._local[memory_id] = None

    def __len__(self) -> int:
        return self._count


class _Writer:
    def __init__(
        self, conn: Connection, ctx: ReflectionContext, now: datetime, entry: UserMemories, index: WriteIndex
    ) -> None:
        self.conn = conn
        self.ctx = ctx
        self.now = now
        self.report = ReflectionReport()
        self.by_id = _Memories(entry)
        # The live memories of this place, which new text is compared with. Expired memories
        # are not merged into: a new "en congé en août" must not be absorbed by last year's
        # expired one and stay invisible.
        self.index = index
        # The texts this reflection stores, new or rewritten.
        self.written: list[str] = []

    def decide(
        self, action: Action, text: str, memory_id: int | None = None, detail: str = "", before: str | None = None
    ) -> None:
        self.report.decisions.append(Decision(action, text, memory_id, detail, before))

    def _refusal(self, memory_id: int) -> str | None:
        """Why the reflection may not touch this id at all, or None."""
        memory = self.by_id.get(memory_id)
        if memory_id not in self.ctx.allowed_ids:
            return "id not shown to the model"
        if memory is None:
            return "no such memory"
        if not _same_place(memory, self.ctx.place):
            # A reflection in one place never edits what was said in another (a DM, a guild).
            return "memory of another place"
        if memory.pinned:
            # The user holds a pinned memory by hand: only the user changes it.
            return "pinned by the user"
        return None

    async def delete(self, memory_id: int) -> None:
        refusal = self._refusal(memory_id)
        memory = self.by_id.get(memory_id)
        if refusal is not None or memory is None:
            self.decide("delete_refused", memory.text if memory else "", memory_id, refusal or "no such memory")
            return
        await delete_memory(self.conn, self.ctx.user_id, memory_id, cause=self.ctx.cause, now=self.now)
        del self.by_id[memory_id]
        self.index.drop(memory_id)  # expired or other-place memories were never indexed
        self.decide("deleted", memory.text, memory_id)

    async def replace(self, memory_id: int, text: str, expires_at: datetime | None) -> None:
        refusal = self._refusal(memory_id)
        memory = self.by_id.get(memory_id)
        if refusal is not None or memory is None:
            self.decide("replace_refused", text, memory_id, refusal or "no such memory")
            return
        rejection = self._lexical_rejection(text)
        if rejection is not None:
            self.decide("dropped", text, memory_id, rejection)
            return
        if memory_id in self.ctx.correctable:
            await self._rewrite(memory, text, expires_at)
            return
        flipped = flipped_negation(text, [(memory.id, memory.text)], self.ctx.user_message)
        if flipped is not None:
            self.decide("replace_refused", text, memory_id, "flipped_negation: the message does not support the change")
            return
        verdict = judge_replacement(memory.text, text, self.ctx.user_message)
        if not verdict.replace:
            await self.candidate(
                text,
                type_=memory.type,
                scope=memory.scope,
                confidence=1.0,
                expires_at=expires_at,
                as_replacement_of=(memory_id, verdict.why),
            )
            return
        await self._rewrite(memory, text, expires_at)

    async def _rewrite(self, memory: Memory, text: str, expires_at: datetime | None) -> None:
        memory_id = memory.id
        if text.strip() == memory.text.strip() and expires_at == memory.expires_at:
            self.decide("absorbed", text, memory_id, "replacement identical to the memory")
            return
        # The corrected text carries its own expiry: a dated fact corrected into a durable one
        # loses the old date, and a new date is never silently dropped.
        await rewrite_memory(
            self.conn,
            self.ctx.user_id,
            memory_id,
            text,
            operation="replace",
            cause=self.ctx.cause,
            now=self.now,
            expires_at=expires_at,
            keep_expiry=False,
        )
        before = memory.text
        memory.text, memory.expires_at = text, expires_at
        self.written.append(text)
        if memory_id in self.index:  # only live memories of this place are merge targets
            self.index.index_text(memory_id, text)
        self.decide("replaced", text, memory_id, before=before)

    async def record_provenance(self) -> None:
        if not self.ctx.exchange_ids:
            return
        receipt_exchange = self.ctx.exchange_ids[-1]
        for d in self.report.decisions:
            if d.memory_id is None:
                continue
            if d.action in SOURCED:
                await add_sources(self.conn, self.ctx.user_id, d.memory_id, self.ctx.exchange_ids)
            change = CHANGE_ACTIONS.get(d.action)
            if change is not None:
                await record_change(
                    self.conn, self.ctx.user_id, receipt_exchange, d.memory_id, change, d.text, d.before, now=self.now
                )

    def _lexical_rejection(self, text: str) -> str | None:
        if filters.not_about_user(
            text, self.ctx.character_name, user_name=self.ctx.user_name, user_message=self.ctx.user_message
        ):
            return "not_about_user"
        if filters.character_attitude(text, self.ctx.character_name, user_name=self.ctx.user_name):
            return "character_attitude"
        return None

    async def candidate(
        self,
        text: str,
        *,
        type_: MemoryType,
        scope: Scope,
        confidence: float,
        expires_at: datetime | None,
        as_replacement_of: tuple[int, str] | None = None,
    ) -> None:
        added_action: Action = "added"
        note = ""
        if as_replacement_of is not None:
            added_action = "replace_as_add"
            old_id, why = as_replacement_of
            note = f"{why}; #{old_id} kept"
        rejection = filters.check_candidate(
            text,
            confidence,
            character_name=self.ctx.character_name,
            flip_check=self.index.flips.flipped,
            user_message=self.ctx.user_message,
            user_name=self.ctx.user_name,
            other_names=self.ctx.other_names,
        )
        if rejection is not None:
            self.decide("dropped", text, None, f"{rejection.filter}: {rejection.detail}")
            return
        match = self.index.dedup.best_match(text)
        if match is not None:
            await self._merge_into(match, text, expires_at)
            return
        try:
            check_room(len(self.by_id), self.ctx.max_memories)
        except MemoryCapReached as exc:
            self.decide("dropped", text, None, f"memory cap: {exc}")
            return
        await self._add(
            text, type_=type_, scope=scope, confidence=confidence, expires_at=expires_at, action=added_action, note=note
        )

    async def _merge_into(self, match: tuple[int, float], text: str, expires_at: datetime | None) -> None:
        """The candidate says what a memory already says: merged into it, or absorbed."""
        match_id, score = match
        existing = self.by_id[match_id]
        decision = merge(existing.text, text)
        if existing.pinned and decision.rewrite:
            decision = MergeDecision(existing.text, False, "pinned by the user: kept as written")
        if decision.rewrite and decision.text.strip() != existing.text.strip():
            await rewrite_memory(
                self.conn,
                self.ctx.user_id,
                match_id,
                decision.text,
                operation="merge",
                cause=self.ctx.cause,
                now=self.now,
                expires_at=expires_at,
            )
            before = existing.text
            existing.text = decision.text
            existing.expires_at = expires_at or existing.expires_at
            self.index.index_text(match_id, decision.text)
            self.decide("merged", decision.text, match_id, f"score {score:.2f}: {decision.reason}", before=before)
            return
        # Absorption does not refresh the date: a fact the user keeps repeating must not climb
        # the recency ranking above fresh memories. A newly given expiry is kept, archived
        # first; a pinned memory keeps its own (only its owner changes it).
        detail = f"score {score:.2f}: {decision.reason}"
        if expires_at is not None and expires_at != existing.expires_at:
            if existing.pinned:
                detail += "; pinned by the user: its expiry is kept"
            else:
                await set_expiry(self.conn, self.ctx.user_id, match_id, expires_at, cause=self.ctx.cause, now=self.now)
                existing.expires_at = expires_at
        self.decide("absorbed", text, match_id, detail)

    async def _add(
        self,
        text: str,
        *,
        type_: MemoryType,
        scope: Scope,
        confidence: float,
        expires_at: datetime | None,
        action: Action,
        note: str,
    ) -> None:
        """A new memory of this place, indexed for the candidates after it."""
        # A story memory needs a story; without one it is global.
        scope = scope if (scope == "global" or self.ctx.story_id) else "global"
        new = NewMemory(
            text=text,
            type=type_,
            scope=scope,
            confidence=confidence,
            story_id=self.ctx.story_id,
            place=self.ctx.place,
            expires_at=expires_at,
            source=self.ctx.source,
        )
        memory_id = await insert_memory(self.conn, self.ctx.user_id, new, now=self.now)
        stored = Memory(
            id=memory_id,
            user_id=self.ctx.user_id,
            text=new.text,
            type=new.type,
            scope=new.scope,
            pinned=False,
            confidence=new.confidence,
            created_at=self.now,
            updated_at=self.now,
            place=self.ctx.place,
            expires_at=new.expires_at,
        )
        self.by_id[memory_id] = stored
        self.index.index_text(memory_id, new.text)
        self.written.append(new.text)
        self.decide(action, new.text, memory_id, note)


async def apply_reflection(
    db: Database,
    reflection: Reflection,
    ctx: ReflectionContext,
    *,
    problems: list[str] | None = None,
    clock: Callable[[], datetime] = utcnow,
    finalize: Callable[[Connection], Awaitable[None]] | None = None,
    indexes: WriteIndexes | None = None,
) -> ReflectionReport:
    """Apply a reflection for `ctx.user_id`: all of it lands, or none of it.

    `finalize` runs last inside the same transaction (the caller marks its exchanges reflected
    there, so a crash can never apply a reflection without recording it, or the reverse).
    `indexes` (the engine's) hold the user's memories and write indexes from one reflection to
    the next; without them they are read whole for this one.
    """
    now = clock()
    indexes = indexes if indexes is not None else WriteIndexes(MemoryCache(db, None))
    # Brought up to date before the lock (the first one of a user is built then): inside it,
    # only what another write changed in between is read again.
    await indexes.get(ctx.user_id, ctx.place, now)
    try:
        return await _apply(db, reflection, ctx, problems, now, finalize, indexes)
    except BaseException:
        # The writer changed the indexes in place, for rows that did not land.
        indexes.drop(ctx.user_id)
        raise


async def _apply(
    db: Database,
    reflection: Reflection,
    ctx: ReflectionContext,
    problems: list[str] | None,
    now: datetime,
    finalize: Callable[[Connection], Awaitable[None]] | None,
    indexes: WriteIndexes,
) -> ReflectionReport:
    async with db.write() as conn:
        # Through the transaction's own connection: the shared reader may be busy with others' reads.
        entry, index = await indexes.get(ctx.user_id, ctx.place, now, conn)
        writer = _Writer(conn, ctx, now, entry, index)
        writer.report.problems.extend(problems or [])
        for memory_id in dict.fromkeys(reflection.delete):
            await writer.delete(memory_id)
        for item in reflection.replace:
            try:
                await writer.replace(item.id, item.text, item.expires_at)
            except InvalidMemory as exc:  # refused before any statement: its neighbours land
                writer.decide("dropped", item.text, item.id, f"invalid: {exc}")
        for candidate in reflection.memories:
            try:
                await writer.candidate(
                    candidate.text,
                    type_=candidate.type,
                    scope=candidate.scope,
                    confidence=candidate.confidence,
                    expires_at=candidate.expires_at,
                )
            except InvalidMemory as exc:
                writer.decide("dropped", candidate.text, None, f"invalid: {exc}")
        if ctx.story_id is not None:
            writer.report.story = await apply_story_reflection(
                conn,
                ctx.user_id,
                ctx.story_id,
                summary=reflection.summary,
                anchor_add=reflection.anchors.add,
                anchor_remove=reflection.anchors.remove,
                positions=reflection.positions,
                state_deltas=reflection.state,
                specs=ctx.state_specs,
                cause=ctx.cause,
                now=now,
            )
        await writer.record_provenance()
        if finalize is not None:
            await finalize(conn)
    # The next turn's series cap reads the frames of what was just stored (bot/memory/series.py
    # memoises them): made now, after the write lock, rather than on the reply's path.
    for text in writer.written:
        frame(text)
    log.info("reflection applied for one user: %s", writer.report.summary())
    return writer.report
