"""Answers the messages addressed to the character: mentions, DMs, replies, allowed channels.

Who is answered is decided by `bot.discord_text.decide` on plain facts read from the message;
this cog only translates between discord objects and `Engine.turn`. The reflection is scheduled
after the reply is sent, never awaited by it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import discord
from discord.ext import commands

from bot.discord_bot import NO_MENTIONS, EchoBot
from bot.discord_text import AnswerPolicy, MessageFacts, clean_incoming, decide, place_of, split_message
from bot.engine import Engine, Incoming, Shown, TurnResult
from bot.prompting import ChannelLine
from bot.ratelimit import RateLimiter, Verdict
from cogs.views import swipe_view

log = logging.getLogger(__name__)

RATE_LIMITED_REACTION = "⏳"


def message_facts(message: discord.Message, bot_id: int) -> MessageFacts:
    channel = message.channel
    reference = message.reference
    replied = reference.resolved if reference is not None else None
    return MessageFacts(
        author_id=message.author.id,
        author_is_bot=message.author.bot,
        is_dm=message.guild is None,
        channel_id=channel.id,
        mentions_bot=any(user.id == bot_id for user in message.mentions),
        replies_to_bot=isinstance(replied, discord.Message) and replied.author.id == bot_id,
        parent_id=channel.parent_id if isinstance(channel, discord.Thread) else None,
        # A DM author is a User, without roles.
        role_ids=frozenset(role.id for role in getattr(message.author, "roles", ())),
        system=message.type not in (discord.MessageType.default, discord.MessageType.reply),
    )


class Conversation(commands.Cog):
    def __init__(
        self, bot: commands.Bot, engine: Engine, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.bot = bot
        self.engine = engine
        settings = engine.settings
        self.policy = AnswerPolicy.from_settings(settings)
        self.limiter = RateLimiter(
            settings.user_rate_limit_messages, settings.user_rate_limit_seconds, clock=clock
        )
        self._history_refused: set[int] = set()
        self._warned_empty_reply = False

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        try:
            await self.answer(message)
        except Exception:
            log.exception("could not answer message %s in channel %s", message.id, message.channel.id)

    async def answer(self, message: discord.Message) -> None:
        me = self.bot.user
        if me is None:
            return
        decision = decide(message_facts(message, me.id), self.policy)
        if not decision.answer:
            log.debug("not answering message %s: %s", message.id, decision.why)
            return
        text = clean_incoming(message.content, me.id, {u.id: u.display_name for u in message.mentions})
        if not text:
            if decision.why == "reply" and not message.content and not self.bot.intents.message_content:
                self._warn_empty_reply()
            return  # a bare mention or an attachment: nothing to answer
        if (await self.bot.get_context(message)).command is not None:
            return  # an owner command such as "@Écho sync"
        user_id = str(message.author.id)
        verdict = self.limiter.hit(user_id)
        if verdict is not Verdict.ALLOWED:
            if verdict is Verdict.LIMITED:
                log.info("user %s is over the rate limit; their messages are ignored for a while", user_id)
                await self._react(message, RATE_LIMITED_REACTION)
            return
        incoming = Incoming(
            user_id=user_id,
            user_name=message.author.display_name,
            text=text,
            story_id=str(message.channel.id),  # a thread is its own story
            place=place_of(message.guild.id if message.guild is not None else None),
            message_id=str(message.id),
            history=await self._history(message, me.id),
            swipes=self.engine.settings.settle_seconds > 0,
        )
        async with message.channel.typing():
            result = await self.engine.turn(incoming)
        view = await self._swipe_controls(incoming, result)
        sent = await self._reply(message, result.reply if result.reply is not None else result.apology, view=view)
        if result.reply is not None:
            if result.exchange_id is not None:
                await self.engine.reply_sent(user_id, result.exchange_id, str(sent.id))
            self.engine.schedule_reflection(user_id)

    async def _swipe_controls(self, incoming: Incoming, result: TurnResult) -> discord.ui.View | None:
        """◀ 1/1 ▶ 🔄 under a reply that fits in one message; a longer one is kept as it is."""
        if not incoming.swipes or result.reply is None or result.exchange_id is None:
            return None
        if len(split_message(result.reply)) > 1:
            await self.engine.settle(incoming.user_id, exchange_id=result.exchange_id)
            return None
        return swipe_view(int(incoming.user_id), Shown(result.exchange_id, 1, 1, result.reply))

    def _warn_empty_reply(self) -> None:
        """Without the Message Content intent, a reply carries its text only if it pings the bot."""
        if self._warned_empty_reply:
            return
        self._warned_empty_reply = True
        log.warning(
            "a reply to the bot arrived without its text, because the Message Content intent is off "
            "and the reply did not ping the bot: such replies are ignored. Replies are answered only "
            "with the @-ping on (the default when replying), or with ALLOWED_CHANNEL_IDS set and the "
            "Message Content intent enabled in the Discord developer portal (this warning is shown once)."
        )

    async def _history(self, message: discord.Message, bot_id: int) -> list[ChannelLine]:
        """The channel's messages before this one, oldest first (empty when unreadable)."""
        limit = self.engine.settings.history_messages
        if limit == 0:
            return []
        try:
            lines = [
                ChannelLine(m.author.display_name, m.clean_content, from_bot=m.author.id == bot_id)
                async for m in message.channel.history(limit=limit, before=message)
                # Without the Message Content intent others' messages arrive empty.
                if m.clean_content.strip()
            ]
        except discord.HTTPException as exc:
            if message.channel.id not in self._history_refused:
                self._history_refused.add(message.channel.id)
                log.warning("cannot read the history of channel %s (%s): answering without it", message.channel.id, exc)
            return []
        lines.reverse()
        return lines

    async def _reply(
        self, message: discord.Message, text: str, *, view: discord.ui.View | None = None
    ) -> discord.Message:
        """Send the reply; the view goes on its last message, which is returned."""
        # fail_if_not_exists=False: if the message was deleted meanwhile, the answer still lands.
        reference = message.to_reference(fail_if_not_exists=False)
        chunks = split_message(text) or ["…"]
        sent: discord.Message | None = None
        for n, chunk in enumerate(chunks):
            extra = {"view": view} if (view is not None and n == len(chunks) - 1) else {}
            if n == 0:
                sent = await message.channel.send(
                    chunk, reference=reference, mention_author=False, allowed_mentions=NO_MENTIONS, **extra
                )
            else:
                sent = await message.channel.send(chunk, allowed_mentions=NO_MENTIONS, **extra)
        assert sent is not None
        return sent

    async def _react(self, message: discord.Message, emoji: str) -> None:
        try:
            await message.add_reaction(emoji)
        except discord.HTTPException as exc:
            log.debug("could not react to message %s: %s", message.id, exc)


async def setup(bot: EchoBot) -> None:
    await bot.add_cog(Conversation(bot, bot.services.engine))
