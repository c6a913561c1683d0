"""Open exchanges: a reply the user may still regenerate or swipe, until it settles; and the
user's message edited or deleted after its exchange.

An exchange settles on the next message in its story, after SETTLE_SECONDS without a choice,
or at the next start; once settled, the answer shown is the one kept, and it is reflected.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from bot.engine.context import EngineContext
from bot.engine.events import Receipt
from bot.engine.llm_calls import final_reply
from bot.engine.reflection_worker import Reflections
from bot.errors import StorageError
from bot.memory.model import Cause, OwnerKey, PersonId, StoryId
from bot.memory.stores.consolidations import undo_consolidations_from
from bot.memory.stores.edits import (
    delete_part,
    drop_message_text,
    edit_message,
    exchange_text,
    forget_message_text,
    memories_only_from,
    message_exchange,
    message_owner,
    parts_of,
    rewrite_turn_query,
    set_part_text,
)
from bot.memory.stores.exchanges import (
    SettledExchange,
    add_alternative,
    choose_alternative,
    join_parts,
    message_text,
    open_exchange,
    set_reply_message,
    settle_exchanges,
)
from bot.memory.stores.memories import delete_memory
from bot.memory.stores.provenance import changes_of
from bot.memory.stores.turn import withdraw_from_turns

# What an edit of a user's message does: nothing (no exchange of it, or the same text), a
# reflection of the edited text (not reflected yet), or a correction of what it produced.
EditOutcome = Literal["unknown", "unchanged", "reflected as edited", "correction"]


@dataclass(slots=True)
class DeleteOutcome:
    user_id: OwnerKey | None
    archived: list[int] = field(default_factory=list)
    kept_pinned: list[int] = field(default_factory=list)
    # Consolidated memories that held what the message alone said: undone, the members back
    # (and that member archived with the rest of `archived`).
    undone: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Shown:
    """The answer an open exchange shows now: alternative `n` of `total`."""

    exchange_id: int
    n: int
    total: int
    text: str


class OpenExchanges:
    def __init__(
        self, ctx: EngineContext, reflections: Reflections, recorded: Callable[[OwnerKey], Awaitable[None]]
    ) -> None:
        self.ctx = ctx
        self.reflections = reflections
        # Waits until a user's turns are recorded: an edit or a delete rewrites /why's row.
        self.recorded = recorded
        self._timers: dict[tuple[str, int], asyncio.TimerHandle] = {}
        self._closing = False

    def close(self) -> None:
        self._closing = True
        for timer in self._timers.values():
            timer.cancel()  # what is still open is settled at the next start
        self._timers.clear()

    def has_open(self, user_id: OwnerKey) -> bool:
        return any(key == user_id for key, _ in self._timers)

    def drop(self, user_id: OwnerKey, exchange_id: int) -> None:
        """The exchange settles no more by itself (its message was deleted)."""
        timer = self._timers.pop((user_id, exchange_id), None)
        if timer is not None:
            timer.cancel()

    async def reply_sent(self, user_id: OwnerKey, exchange_id: int, message_id: str) -> None:
        with contextlib.suppress(StorageError):  # only the later button edits are lost
            posted = await set_reply_message(self.ctx.db, user_id, exchange_id, message_id)
            # A reflection that ended before the reply was posted (an answer settled at once, a
            # fast model, a slow channel) had no message to show its receipt on: shown now.
            if posted is not None and posted[1]:
                changes = await changes_of(self.ctx.db, user_id, exchange_id)
                if changes:
                    await self.ctx.events.receipt(Receipt(user_id, exchange_id, posted[0], message_id, len(changes)))
        if (user_id, exchange_id) in self._timers:
            self.arm(user_id, exchange_id)  # the delay counts from when it is shown

    async def shown(self, user_id: OwnerKey, exchange_id: int) -> Shown | None:
        ex = await open_exchange(self.ctx.db, user_id, exchange_id)
        if ex is None or not ex.replies:
            return None
        return Shown(exchange_id, ex.choice, len(ex.replies), ex.replies[ex.choice - 1])

    async def regenerate(self, user_id: OwnerKey, exchange_id: int, *, max_chars: int | None = None) -> Shown | None:
        ctx = self.ctx
        ex = await open_exchange(ctx.db, user_id, exchange_id)
        if ex is None or ex.prompt is None:
            return None
        answer = await ctx.calls.chat(
            "reply", ex.prompt, model=ctx.settings.llm_model, timeout=ctx.settings.llm_timeout_seconds
        )
        reply = final_reply(answer.text, max_chars=max_chars)
        async with ctx.db.write() as conn:
            n = await add_alternative(conn, user_id, exchange_id, reply, now=ctx.clock())
        if n is None:
            return None  # settled while the model was answering: that answer was kept
        self.arm(user_id, exchange_id)
        return Shown(exchange_id, n, n, reply)

    async def swipe(self, user_id: OwnerKey, exchange_id: int, step: int) -> Shown | None:
        ex = await open_exchange(self.ctx.db, user_id, exchange_id)
        if ex is None or not ex.replies:
            return None
        n = max(1, min(len(ex.replies), ex.choice + step))
        async with self.ctx.db.write() as conn:
            if not await choose_alternative(conn, user_id, exchange_id, n):
                return None
        self.arm(user_id, exchange_id)
        return Shown(exchange_id, n, len(ex.replies), ex.replies[n - 1])

    async def settle(
        self, user_id: OwnerKey, *, exchange_id: int | None = None, story_id: StoryId | None = None
    ) -> list[SettledExchange]:
        settled = await settle_exchanges(
            self.ctx.db, user_id, now=self.ctx.clock(), exchange_id=exchange_id, story_id=story_id
        )
        for ex in settled:
            self.drop(user_id, ex.id)
        if settled:
            self.reflections.schedule(user_id)
            for ex in settled:
                self.ctx.events.settled(ex)
        return settled

    def arm(self, user_id: OwnerKey, exchange_id: int) -> None:
        """(Re)start the exchange's settle delay: choosing among answers postpones it."""
        self.drop(user_id, exchange_id)
        if self._closing:
            return
        loop = asyncio.get_running_loop()
        self._timers[(user_id, exchange_id)] = loop.call_later(
            self.ctx.settings.settle_seconds, self._due, user_id, exchange_id
        )

    def _due(self, user_id: OwnerKey, exchange_id: int) -> None:
        self._timers.pop((user_id, exchange_id), None)
        if not self._closing:
            self.ctx.tasks.spawn(self._settle_quietly(user_id, exchange_id), name=f"settle:{user_id}")

    async def _settle_quietly(self, user_id: OwnerKey, exchange_id: int) -> None:
        try:
            await self.settle(user_id, exchange_id=exchange_id)
        except StorageError:
            self.arm(user_id, exchange_id)  # logged by the database; tried again later

    async def message_edited(self, message_id: str, text: str, *, author: PersonId | None = None) -> EditOutcome:
        """The user edited a message the character answered (any message of a burst). Returns
        what happens: "unknown" (no exchange), "unchanged", "reflected as edited" (not reflected
        yet), or "correction" (already reflected: reflected again as a correction of its memories)."""
        owner = await message_owner(self.ctx.db, message_id)
        # The author, when given, must be the person of the owner key (their own id, or
        # `<id>@<character>` for a character with its own memory of them).
        if owner is None or (author is not None and self.ctx.cast.user_of_key(owner) != author):
            return "unknown"
        ex = await message_exchange(self.ctx.db, owner, message_id)
        if ex is None or ex.deleted or ex.message_deleted:
            return "unknown"
        text = self._text(text)
        if not text:
            return "unchanged"
        await self.recorded(owner)
        async with self.ctx.db.write() as conn:
            if not await set_part_text(conn, owner, ex.id, ex.n, text):
                return "unchanged"
            before = await exchange_text(conn, owner, ex.id)
            after = self._text(join_parts(await parts_of(conn, owner, ex.id)))
            if not await edit_message(conn, owner, ex.id, after):
                return "unchanged"
            await rewrite_turn_query(conn, owner, ex.story_id, before, after)
            if ex.reflected:
                # A consolidation holding what the message alone said is undone: that member is
                # live again, and the correction reflects it with the rest of what it produced.
                undone = await undo_consolidations_from(
                    conn, owner, ex.id, cause=Cause("message_edited"), now=self.ctx.clock()
                )
                await withdraw_from_turns(conn, owner, undone.undone)
        if ex.settled:
            self.reflections.schedule(owner)
        return "correction" if ex.reflected else "reflected as edited"

    async def message_deleted(self, message_id: str) -> DeleteOutcome:
        """The user deleted a message (any message of a burst): the memories its exchange alone
        produced are archived (pinned ones stay), and its text leaves the exchange, /why and the
        prompt kept for a regenerate. What the burst's other messages say stays, and is
        reflected again. A reflection of it in flight rolls back."""
        owner = await message_owner(self.ctx.db, message_id)
        if owner is None:
            return DeleteOutcome(None)
        ex = await message_exchange(self.ctx.db, owner, message_id)
        if ex is None or ex.deleted or ex.message_deleted:
            return DeleteOutcome(owner)
        outcome = DeleteOutcome(owner)
        now = self.ctx.clock()
        await self.recorded(owner)
        async with self.ctx.db.write() as conn:
            if not await delete_part(conn, owner, ex.id, ex.n, now=now):
                return outcome
            # A consolidation holding a member the exchange alone produced is undone first (each
            # member kept its own sources): the members come back, and that one goes below.
            undone = await undo_consolidations_from(conn, owner, ex.id, cause=Cause("message_deleted"), now=now)
            outcome.undone, outcome.kept_pinned = undone.undone, undone.kept_pinned
            # Which of the burst's messages a memory came from is not known: every memory the
            # exchange alone produced goes, and what the other messages say is learnt again.
            for memory_id, pinned in await memories_only_from(conn, owner, ex.id):
                if pinned:
                    outcome.kept_pinned.append(memory_id)
                elif await delete_memory(conn, owner, memory_id, cause=Cause("message_deleted"), now=now):
                    outcome.archived.append(memory_id)
            # /why and /export no longer show what the message alone said.
            await withdraw_from_turns(conn, owner, outcome.undone + outcome.archived)
            rest = self._text(join_parts(await parts_of(conn, owner, ex.id)))
            if rest:
                before = await exchange_text(conn, owner, ex.id)
                await drop_message_text(conn, owner, ex.id, rest)
                await rewrite_turn_query(conn, owner, ex.story_id, before, rest)
            else:
                await forget_message_text(conn, owner, ex.id, now=now)
        if not rest:
            self.drop(owner, ex.id)
        elif ex.settled:
            self.reflections.schedule(owner)
        return outcome

    def _text(self, text: str) -> str:
        return message_text(text, self.ctx.settings.max_message_chars)
