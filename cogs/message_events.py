"""What happens to messages after they are sent: the user's edits and deletes reach the engine,
and the bot's replies follow their exchange (swipe buttons go when it settles, the memory receipt
comes when its reflection changed something).

The raw events are used, so an edit or a delete of a message the cache never saw (sent before a
restart, or pushed out of the cache) is still seen; a raw delete carries no author, so the engine
finds the exchange by the message id.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager

import discord
from discord.ext import commands

from bot.clients.locks import KeyedLocks
from bot.engine import Engine, Receipt, SettledExchange
from bot.presenting import RECEIPT_ICON
from cogs.bot import EchoBot
from cogs.utils.answering import clean_incoming, person_of
from cogs.utils.views import DYNAMIC_ITEMS, receipt_view, refuse_foreign, submit_edit
from cogs.utils.voices import Voices

log = logging.getLogger(__name__)


def edited_text(payload: discord.RawMessageUpdateEvent, me: discord.ClientUser | None) -> tuple[int, str] | None:
    """(author id, the text as the character reads it) of a person's edited message; None for a
    bot's, or an edit that says nothing about the text."""
    data = payload.data
    author = data.get("author") or {}
    # An edit without content (an embed unfurled, or content hidden without the Message
    # Content intent) says nothing about the text: it must not empty the memory's source.
    content = data.get("content")
    if me is None or not content or author.get("bot") or not author.get("id"):
        return None
    names = {int(u["id"]): u.get("global_name") or u.get("username", "") for u in data.get("mentions", [])}
    return int(author["id"]), clean_incoming(content, me.id, names)


class MessageEvents(commands.Cog):
    def __init__(self, bot: EchoBot, engine: Engine) -> None:
        self.bot = bot
        self.engine = engine
        # One update at a time per reply: a settle and a receipt may race to edit the same one.
        self._updating: KeyedLocks[str] = KeyedLocks()

    async def cog_load(self) -> None:
        self.bot.add_dynamic_items(*DYNAMIC_ITEMS)
        self.engine.listen(settled=self.settled, receipt=self.receipt)

    async def cog_unload(self) -> None:
        self.bot.remove_dynamic_items(*DYNAMIC_ITEMS)
        self.engine.unlisten(settled=self.settled, receipt=self.receipt)

    @commands.Cog.listener()
    async def on_interaction(self, interaction: discord.Interaction) -> None:
        # The components' own gates let nothing foreign through; this answers it, privately.
        await refuse_foreign(interaction)
        await submit_edit(interaction)

    # --- the user's message -------------------------------------------------------------------

    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        edit = edited_text(payload, self.bot.user)
        if edit is None:
            return
        author_id, text = edit
        try:
            outcome = await self.engine.conversation.message_edited(
                str(payload.message_id), text, author=person_of(author_id)
            )
        except Exception:
            log.exception("could not take the edit of message %s into account", payload.message_id)
            return
        if outcome != "unknown":
            log.debug("message %s edited: %s", payload.message_id, outcome)

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self._deleted(payload.message_id)

    @commands.Cog.listener()
    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        for message_id in sorted(payload.message_ids):
            await self._deleted(message_id)

    async def _deleted(self, message_id: int) -> None:
        try:
            outcome = await self.engine.conversation.message_deleted(str(message_id))
        except Exception:
            log.exception("could not take the deletion of message %s into account", message_id)
            return
        if outcome.archived or outcome.kept_pinned:
            log.info(
                "a deleted message took %d memory(ies) with it; %d pinned one(s) kept",
                len(outcome.archived),
                len(outcome.kept_pinned),
            )

    # --- the bot's reply ------------------------------------------------------------------------

    def _lock(self, message_id: str) -> AbstractAsyncContextManager[None]:
        return self._updating.hold(message_id)

    def _reply_message(self, story_id: str, message_id: str | None) -> discord.PartialMessage | None:
        if message_id is None or not story_id.isdigit():
            return None
        # The channel itself when known (a character's reply is edited through its webhook).
        channel = self.bot.get_channel(int(story_id))
        if not isinstance(channel, (discord.TextChannel, discord.Thread)):
            return self.bot.get_partial_messageable(int(story_id)).get_partial_message(int(message_id))
        return channel.get_partial_message(int(message_id))

    async def _edit(self, message: discord.PartialMessage, view: discord.ui.View | None) -> None:
        """A reply's new buttons, through the webhook the Conversation cog spoke with when it did."""
        conversation = self.bot.get_cog("Conversation")
        voices: Voices | None = getattr(conversation, "voices", None)
        if voices is None:
            await message.edit(view=view)
        else:
            await voices.edit(message, view=view)

    async def settled(self, event: SettledExchange) -> None:
        """The answer is kept: its swipe buttons go (a receipt already there stays)."""
        message = self._reply_message(event.story_id, event.reply_message_id)
        if message is None or event.reply_message_id is None:
            return
        async with self._lock(event.reply_message_id):
            changes = await self.engine.conversation.receipt_size(event.user_id, event.id)
            person = self.engine.cast.user_of_key(event.user_id)
            button = changes and self.bot.settings.memory_receipts == "button" and person.isdigit()
            view = receipt_view(event.user_id, event.id, changes) if button else None
            try:
                async with self.bot.pacer.slot(message.channel.id):
                    await self._edit(message, view)
            except discord.HTTPException as exc:
                log.debug("could not remove the buttons of a settled reply: %s", exc)

    async def receipt(self, event: Receipt) -> None:
        mode = self.bot.settings.memory_receipts
        message = self._reply_message(event.story_id, event.reply_message_id)
        person = self.engine.cast.user_of_key(event.user_id)
        if message is None or event.reply_message_id is None or mode == "off" or not person.isdigit():
            return
        async with self._lock(event.reply_message_id), self.bot.pacer.slot(message.channel.id):
            try:
                if mode == "reaction":
                    await message.add_reaction(RECEIPT_ICON)
                else:
                    await self._edit(message, receipt_view(event.user_id, event.exchange_id, event.changes))
            except discord.HTTPException as exc:
                log.debug("could not show a memory receipt: %s", exc)


async def setup(bot: EchoBot) -> None:
    await bot.add_cog(MessageEvents(bot, bot.services.engine))
