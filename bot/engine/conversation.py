"""The conversation port: what a front end does with a message and the reply it got.

One turn (which schedules its own reflection), the answers a user may still choose among, the
user's messages edited or deleted, the receipt of what a reply's reflection changed, and what
the character says first: a check-in after a dated event (bot/engine/followups.py), and the
notice the person's next turn gives when one could not be sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.clients.llm import OnText
from bot.engine.context import EngineContext
from bot.engine.followups import Checkin
from bot.engine.open_exchanges import DeleteOutcome, EditOutcome, OpenExchanges, Shown
from bot.engine.prompting import ChannelLine
from bot.engine.reflection_worker import Reflections
from bot.engine.rules import CharacterRules
from bot.engine.turn import Turns
from bot.engine.turn_values import Incoming, TurnResult
from bot.memory.model import Memory, OwnerKey, PersonId, StoryId
from bot.memory.read.indexing import Indexer
from bot.memory.stores.exchanges import SettledExchange
from bot.memory.stores.provenance import MemoryChange, changes_of


@dataclass(frozen=True, slots=True)
class ReceiptLine:
    change: MemoryChange
    # The memory as it is now; None once it was forgotten (or the change itself forgot it).
    current: Memory | None


class Conversation:
    def __init__(
        self,
        ctx: EngineContext,
        turns: Turns,
        exchanges: OpenExchanges,
        reflections: Reflections,
        rules: CharacterRules,
        indexer: Indexer | None,
    ) -> None:
        self._ctx = ctx
        self._turns = turns
        self._exchanges = exchanges
        self._reflections = reflections
        self._rules = rules
        self._indexer = indexer

    async def turn(self, msg: Incoming, *, on_text: OnText | None = None) -> TurnResult:
        """Answer one message, then schedule its reflection. With `on_text`, the answer is
        streamed: `on_text` sees the visible text as it grows, and a stream cut halfway keeps
        (and saves) what arrived."""
        return await self._turns.run(msg, self._rules.of(msg.character), on_text=on_text)

    def read_ahead(self, user_id: OwnerKey, story_id: StoryId, text: str, history: Sequence[ChannelLine]) -> None:
        """A message the front end holds (a burst's wait) and the lines before it: read now, its
        turn embeds nothing if its text is still `text` (`Recall.prepare_turn`)."""
        self._turns.read_ahead(user_id, story_id, text, history)

    async def wait_recorded(self, user_id: OwnerKey) -> None:
        """Wait until the user's turns are recorded (what /why, stats, export or erase read)."""
        await self._turns.wait_recorded(user_id)

    async def wait_idle(self, user_id: OwnerKey) -> None:
        """Wait for the user's reflection, then embed what it wrote (a piped chat is repeatable)."""
        await self._reflections.wait(user_id)
        if self._indexer is not None:
            await self._indexer.run_once()

    # --- the answers a user may still choose among --------------------------------------------

    async def reply_sent(self, user_id: OwnerKey, exchange_id: int, message_id: str) -> None:
        """The front end's id of the message holding the reply: where its buttons and receipt go."""
        await self._exchanges.reply_sent(user_id, exchange_id, message_id)

    async def shown(self, user_id: OwnerKey, exchange_id: int) -> Shown | None:
        """What an open exchange shows now; None once it is settled (or not the user's)."""
        return await self._exchanges.shown(user_id, exchange_id)

    async def regenerate(self, user_id: OwnerKey, exchange_id: int, *, max_chars: int | None = None) -> Shown | None:
        """Ask the model again, with the very prompt of the turn (same memories, same history);
        None when the exchange is settled. LLMError when the model fails: nothing is stored."""
        return await self._exchanges.regenerate(user_id, exchange_id, max_chars=max_chars)

    async def swipe(self, user_id: OwnerKey, exchange_id: int, step: int) -> Shown | None:
        """Show the previous (-1) or next (+1) answer; it becomes the one kept. None when settled."""
        return await self._exchanges.swipe(user_id, exchange_id, step)

    async def settle(
        self, user_id: OwnerKey, *, exchange_id: int | None = None, story_id: StoryId | None = None
    ) -> list[SettledExchange]:
        """Keep the answers shown: the exchanges leave the open state and are reflected."""
        return await self._exchanges.settle(user_id, exchange_id=exchange_id, story_id=story_id)

    # --- the user's message edited or deleted ---------------------------------------------------

    async def message_edited(self, message_id: str, text: str, *, author: PersonId | None = None) -> EditOutcome:
        """The user edited a message the character answered. Returns what happens:
        "unknown" (no exchange), "unchanged", "reflected as edited" (not reflected yet), or
        "correction" (already reflected: reflected again as a correction of its memories)."""
        return await self._exchanges.message_edited(message_id, text, author=author)

    async def message_deleted(self, message_id: str) -> DeleteOutcome:
        """The user deleted a message: the memories it alone produced are archived (pinned ones
        stay), and its text leaves the exchanges. A reflection of it in flight rolls back."""
        return await self._exchanges.message_deleted(message_id)

    # --- what a reply's reflection changed ------------------------------------------------------

    async def receipt_size(self, user_id: OwnerKey, exchange_id: int) -> int:
        """How many changes the receipt of this exchange lists (0: no receipt)."""
        return len(await changes_of(self._ctx.db, user_id, exchange_id))

    async def notice(self, person: PersonId) -> str | None:
        """What the person's next reply is followed by, once: a key of the front ends'
        catalogue ("checkins_blocked": a check-in found their DMs closed), or None."""
        return await self._turns.followups.take_notice(person)

    # --- what the character says first: check-ins -----------------------------------------------

    async def due_checkins(self, off_places: frozenset[str] = frozenset()) -> list[Checkin]:
        """Every check-in that may go now, read from the database (one per person at most);
        none for people who last wrote in `off_places`."""
        return await self._turns.followups.due_checkins(off_places)

    async def claim_checkin(self, checkin: Checkin) -> bool:
        """This process takes the check-in; False when another one did (or its room is gone)."""
        return await self._turns.followups.claim(checkin)

    async def write_checkin(self, checkin: Checkin, *, story_id: StoryId, user_name: str) -> tuple[int, str] | None:
        """The check-in written by the model and stored as an exchange of `story_id` (the DM):
        (exchange id, text); None when the claim is gone or the model failed (released)."""
        return await self._turns.followups.write_checkin(checkin, story_id=story_id, user_name=user_name)

    async def checkin_still_claimed(self, checkin: Checkin) -> bool:
        """Asked right before sending: an erase since (in any process) removed the claim."""
        return await self._turns.followups.still_claimed(checkin)

    async def checkin_sent(self, checkin: Checkin, *, story_id: StoryId, exchange_id: int, message_id: str) -> None:
        """Delivered: the person's next message in that story answers it."""
        await self._turns.followups.sent(checkin, story_id=story_id, exchange_id=exchange_id, message_id=message_id)

    async def checkin_left(self, checkin: Checkin) -> None:
        """The person left the server where they last wrote: this event is never asked about."""
        await self._turns.followups.left(checkin)

    async def checkin_unsent(self, checkin: Checkin, exchange_id: int | None, *, blocked: bool) -> None:
        """Not delivered: its exchange goes, the claim is released; `blocked` (DMs refused)
        turns the person's check-ins off, and their next turn says so."""
        await self._turns.followups.unsent(checkin, exchange_id, blocked=blocked)

    async def receipt(self, user_id: OwnerKey, exchange_id: int) -> list[ReceiptLine]:
        """What the reflection of this exchange changed in the user's memories, each with the
        memory as it is now."""
        return [
            ReceiptLine(change, await self._ctx.store.get(user_id, change.memory_id))
            for change in await changes_of(self._ctx.db, user_id, exchange_id)
        ]
