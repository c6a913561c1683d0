"""Bursts: a person's messages that follow each other in one channel within BURST_SECONDS are
answered once, together, as a reply to the last of them.

A burst is one answer (the rate limit counts it once) and one exchange that knows each of its
messages. From its first message until its answer's turn is over, the messages are held here:
an edit or a delete changes what the turn reads (or reaches the engine once the turn has saved
them), and an erase of the person drops what is not answered yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import discord

from bot.engine import Engine, MessagePart
from cogs.utils.answering import person_of

# A burst is answered once it holds this many messages, however quickly the next one comes: a
# bound on what one person's typing can hold in memory and join into one exchange.
BURST_MAX_MESSAGES = 20


@dataclass(eq=False, slots=True)
class Burst:
    person: int
    messages: list[discord.Message]
    # The text of each message as the character reads it, edits applied.
    texts: dict[int, str]
    deadline: float
    deleted: set[int] = field(default_factory=set)
    # No longer joined: full, or being answered.
    closed: bool = False
    cancelled: bool = False
    # Its turn has begun: from then on an erase is the engine's to stop.
    turning: bool = False
    task: asyncio.Task[None] | None = None
    # The channel's messages before its first one, read when it began: its turn's history,
    # with which the engine reads its texts during the wait (`Engine.conversation.read_ahead`).
    earlier: asyncio.Task[list[discord.Message]] | None = None

    # What its turn read of each message, once the turn has begun.
    read: dict[int, str] = field(default_factory=dict)

    def kept(self) -> list[discord.Message]:
        return [m for m in self.messages if m.id not in self.deleted]

    def text(self) -> str:
        """Its texts so far, as its turn joins them (images aside)."""
        return "\n".join(t for m in self.kept() if (t := self.texts[m.id]))

    def begin_turn(
        self, messages: Sequence[discord.Message], marks_of: Callable[[discord.Message], str]
    ) -> list[MessagePart]:
        """The messages its turn reads, edits and deletes so far applied. Called on the same step
        of the event loop as the turn starts: an erase lands before (Dropped: nothing reaches the
        engine) or during the turn (the engine keeps nothing after it)."""
        kept = [m for m in messages if m.id not in self.deleted]
        if self.cancelled or not kept:
            raise Dropped
        self.read = {m.id: self.texts[m.id] for m in kept}
        self.turning = True
        return [MessagePart(str(m.id), self.texts[m.id], marks_of(m)) for m in kept]

    async def catch_up(self, engine: Engine) -> None:
        """Edits and deletes that came while its turn was saving the messages: the engine did
        not know them yet, and is told now."""
        for message_id, text in self.read.items():
            if message_id in self.deleted:
                await engine.conversation.message_deleted(str(message_id))
            elif self.texts[message_id] != text:
                await engine.conversation.message_edited(
                    str(message_id), self.texts[message_id], author=person_of(self.person)
                )


class Dropped(Exception):
    """Every message of the burst was deleted, or its person erased, before its turn began."""


class Bursts:
    """The burst each (channel, person) is joining, and every message waiting for its answer or
    being answered, by id."""

    def __init__(self) -> None:
        self._joining: dict[tuple[int, int], Burst] = {}
        self._pending: dict[int, Burst] = {}

    def join(self, key: tuple[int, int], message: discord.Message, text: str, deadline: float) -> Burst | None:
        """Add the message to the burst its person is writing here, if there is one still open:
        that burst, else None."""
        burst = self._joining.get(key)
        if burst is None or burst.closed:
            return None
        burst.messages.append(message)
        burst.texts[message.id] = text
        burst.deadline = deadline
        burst.closed = len(burst.messages) >= BURST_MAX_MESSAGES
        self._pending[message.id] = burst
        return burst

    def start(self, key: tuple[int, int] | None, message: discord.Message, text: str, deadline: float) -> Burst:
        """A new burst; `key` None: answered at once, joined by nothing."""
        burst = Burst(message.author.id, [message], {message.id: text}, deadline, closed=key is None)
        self._pending[message.id] = burst
        if key is not None:
            self._joining[key] = burst
        return burst

    def close(self, key: tuple[int, int], burst: Burst) -> None:
        """The burst is being answered: the person's next message starts another."""
        burst.closed = True
        if self._joining.get(key) is burst:
            del self._joining[key]

    def forget(self, burst: Burst) -> None:
        """Its answer's turn is over: the engine knows its messages now."""
        for message in burst.messages:
            if self._pending.get(message.id) is burst:
                del self._pending[message.id]

    def edited(self, message_id: int, author_id: int, text: str) -> None:
        burst = self._pending.get(message_id)
        if burst is not None and burst.person == author_id:
            burst.texts[message_id] = text

    def deleted(self, message_id: int) -> None:
        burst = self._pending.get(message_id)
        if burst is not None:
            burst.deleted.add(message_id)

    def erasing(self, person: str) -> None:
        """What the person sent that no turn has begun on is dropped, never stored after the erase."""
        for key, burst in list(self._joining.items()):
            if str(burst.person) == person:
                del self._joining[key]
        for burst in {id(b): b for b in self._pending.values()}.values():
            if str(burst.person) == person and not burst.turning:
                burst.cancelled = True
                if burst.task is not None:
                    burst.task.cancel()

    def cancel_all(self) -> None:
        for burst in self._joining.values():
            if burst.task is not None:
                burst.task.cancel()
