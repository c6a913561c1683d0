"""Answers the messages addressed to the character: mentions, DMs, replies, allowed channels.

Who is answered is decided by `cogs.utils.answering.decide` on plain facts read from the message;
this cog only translates between discord objects and `Engine.conversation.turn`. A user's messages that
follow each other within BURST_SECONDS are answered once, together (a burst: one answer for the
rate limit, one exchange that knows each of its messages). The reply is streamed into
one message edited as it grows (`LiveReply`), or posted whole (`send_reply`); both return the
messages of the final reply. The reflection is scheduled after the reply is sent, never
awaited by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import discord
from discord.ext import commands

from bot.characters.character import Character
from bot.clients.tasks import BackgroundTasks
from bot.engine import Engine, Incoming, Shown, TurnResult, join_parts
from bot.i18n import set_locale
from bot.presenting import notice_text, turn_text
from cogs.bot import NO_MENTIONS, EchoBot
from cogs.message_events import edited_text
from cogs.utils.answering import (
    AnswerPolicy,
    ChannelPacer,
    MessageFacts,
    clean_incoming,
    decide,
    person_of,
    place_of,
    split_message,
    story_of,
)
from cogs.utils.bursts import Burst, Bursts, Dropped
from cogs.utils.history import channel_lines
from cogs.utils.images import image_attachments, read_images
from cogs.utils.ratelimit import RateLimiter, Verdict
from cogs.utils.views import swipe_view
from cogs.utils.voices import Voice, Voices, character_at

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


async def send_reply(
    message: discord.Message, text: str, pacer: ChannelPacer, voice: Voice | None = None, *, first: int = 0
) -> list[discord.Message]:
    """`text` as a reply to `message`, split under Discord's limit, each part in its turn of the
    channel's pace; the messages sent (from part `first` on: the ones before are shown already).
    With a webhook `voice`, posted under the character's name and avatar."""
    voice = voice or Voice()
    sent: list[discord.Message] = []
    for n, chunk in enumerate(split_message(text) or ["…"]):
        if n < first:
            continue
        async with pacer.slot(message.channel.id):
            sent.append(await voice.send(message.channel, chunk, reference=message if n == 0 else None))
    return sent


class LiveReply:
    """One reply shown while it is written: typing until the first text, then one message
    posted and edited as the text grows, at the channel's pace; `finish` puts the final text
    in, split as `send_reply` splits it."""

    def __init__(self, message: discord.Message, pacer: ChannelPacer, voice: Voice | None = None) -> None:
        self.message = message
        self.pacer = pacer
        self.voice = voice or Voice()
        self.sent: discord.Message | None = None
        self._shown = ""
        self._latest = ""
        self._changed = asyncio.Event()
        self._closing = False
        self._typing: Any = message.channel.typing()
        self._writer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveReply:
        await self._typing.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop()

    async def update(self, text: str) -> None:
        """The text so far (called by the stream; returns at once)."""
        self._latest = text
        self._changed.set()
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_while_streaming())

    async def finish(self, text: str) -> list[discord.Message]:
        """Show the final text; the messages that hold it."""
        await self._stop()
        if self.sent is None:
            return await send_reply(self.message, text, self.pacer, self.voice)
        chunks = split_message(text) or ["…"]
        if chunks[0] != self._shown:
            async with self.pacer.slot(self.message.channel.id):
                await self._edit(chunks[0])
        return [self.sent, *await send_reply(self.message, text, self.pacer, self.voice, first=1)]

    async def _stop(self) -> None:
        self._closing = True
        self._changed.set()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer
            self._writer = None
        await self._stop_typing()

    async def _stop_typing(self) -> None:
        if self._typing is not None:
            typing, self._typing = self._typing, None
            await typing.__aexit__(None, None, None)

    async def _write_while_streaming(self) -> None:
        channel_id = self.message.channel.id
        while not self._closing:
            await self._changed.wait()
            self._changed.clear()
            if self._closing:
                return
            async with self.pacer.slot(channel_id) as slot:
                if self._closing or not await self._show_preview(channel_id):
                    slot.skip()
                    if self._closing:
                        return

    async def _show_preview(self, channel_id: int) -> bool:
        """Show the text so far; False when there was nothing new to show."""
        # Past the first chunk, the rest is posted by `finish`.
        preview = (split_message(self._latest) or [""])[0]
        if not preview or preview == self._shown:
            return False
        try:
            if self.sent is None:
                # Through the character's webhook when it has one, like a reply sent whole.
                self.sent = await self.voice.send(self.message.channel, preview, reference=self.message)
                self._shown = preview
                await self._stop_typing()
            else:
                await self._edit(preview)
        except discord.HTTPException as exc:
            log.warning("could not show a streamed reply in channel %s: %s", channel_id, exc)
        return True

    async def _edit(self, text: str) -> None:
        assert self.sent is not None
        await self.sent.edit(content=text, allowed_mentions=NO_MENTIONS)
        self._shown = text


class Conversation(commands.Cog):
    def __init__(self, bot: EchoBot, engine: Engine, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.bot = bot
        self.engine = engine
        self.settings = settings = bot.settings
        self.policy = AnswerPolicy.from_settings(settings)
        self.limiter = RateLimiter(settings.user_rate_limit_messages, settings.user_rate_limit_seconds, clock=clock)
        self.pacer = bot.pacer
        self._history_refused: set[int] = set()
        self._warned_empty_reply = False
        self.bursts = Bursts()
        self._burst_tasks = BackgroundTasks()
        self.cast = engine.cast
        self.voices = Voices(engine.cast)

    async def cog_load(self) -> None:
        self.engine.listen(erasing=self.bursts.erasing)

    async def cog_unload(self) -> None:
        self.engine.unlisten(erasing=self.bursts.erasing)
        self.bursts.cancel_all()
        await self._burst_tasks.cancel_all()

    # Edits and deletes of messages not answered yet; those of answered ones are MessageEvents'.
    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        edit = edited_text(payload, self.bot.user)
        if edit is not None:
            self.bursts.edited(payload.message_id, *edit)

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.bursts.deleted(payload.message_id)

    @commands.Cog.listener()
    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        for message_id in payload.message_ids:
            self.bursts.deleted(message_id)

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
        facts = message_facts(message, me.id)
        replied = message.reference.resolved if message.reference is not None else None
        if isinstance(replied, discord.Message) and await self.voices.owns(replied) is not None:
            facts = dataclasses.replace(facts, replies_to_bot=True)
        decision = decide(facts, self.policy)
        if not decision.answer:
            log.debug("not answering message %s: %s", message.id, decision.why)
            return
        text = clean_incoming(message.content, me.id, {u.id: u.display_name for u in message.mentions})
        if not text and not image_attachments(message):
            if decision.why == "reply" and not message.content and not self.bot.intents.message_content:
                self._warn_empty_reply()
            return  # a bare mention or a file: nothing to answer
        if text and (await self.bot.get_context(message)).command is not None:
            return  # an owner command such as "@Écho sync"
        key = (message.channel.id, message.author.id)
        wait = self.settings.burst_seconds
        # A burst is one answer: a message that joins one is not counted again.
        if wait > 0 and (joined := self.bursts.join(key, message, text, time.monotonic() + wait)) is not None:
            # Its turn reads the burst's texts together: read again.
            self._burst_tasks.spawn(self._read_again(joined), name=f"ahead:{key}")
            return
        user_id = str(message.author.id)
        verdict = self.limiter.hit(user_id)
        if verdict is not Verdict.ALLOWED:
            if verdict is Verdict.LIMITED:
                log.info("user %s is over the rate limit; their messages are ignored for a while", user_id)
                await self._react(message, RATE_LIMITED_REACTION)
            return
        if wait <= 0:
            await self._answer(self.bursts.start(None, message, text, 0.0))
            return
        burst = self.bursts.start(key, message, text, time.monotonic() + wait)
        burst.earlier = self._burst_tasks.spawn(self._read_ahead(message, text), name=f"earlier:{key}")
        burst.task = self._burst_tasks.spawn(self._answer_burst(key, burst), name=f"burst:{key}")

    async def _read_ahead(self, first: discord.Message, text: str) -> list[discord.Message]:
        """The history of a burst's turn, read while its person may still be typing, and the
        message read in it by the engine meanwhile: the turn, if nothing joins, embeds nothing."""
        earlier = await self._earlier(first)
        await self._prepare(first, text, earlier)
        return earlier

    async def _read_again(self, burst: Burst) -> None:
        """A message joined the burst: its turn reads the burst's texts together."""
        if burst.earlier is not None and (kept := burst.kept()):
            await self._prepare(kept[0], burst.text(), await burst.earlier)

    async def _prepare(self, first: discord.Message, text: str, earlier: Sequence[discord.Message]) -> None:
        me = self.bot.user
        if me is not None and text:
            character = await self.character_for(first)
            voice = await self.voices.voice_for(first.channel, character, me)
            lines = channel_lines(earlier, me.id, voice, first.author.id)
            user_id = self.cast.memory_key(person_of(first.author.id), character)
            self.engine.conversation.read_ahead(user_id, story_of(first.channel.id), text, lines)

    async def _answer_burst(self, key: tuple[int, int], burst: Burst) -> None:
        """Once the user has been quiet for BURST_SECONDS (or the burst is full), answer all
        their messages at once."""
        try:
            # The deadline moves as messages join the burst: a sleep to it, looked at again.
            while (left := burst.deadline - time.monotonic()) > 0 and not burst.closed:  # noqa: ASYNC110
                await asyncio.sleep(left)
        except asyncio.CancelledError:
            self.bursts.forget(burst)  # erased, or the cog unloaded
            raise
        self.bursts.close(key, burst)
        try:
            await self._answer(burst)
        except Exception:
            log.exception("could not answer the messages of user %s in channel %s", key[1], key[0])

    async def _answer(self, burst: Burst) -> None:
        try:
            kept = burst.kept()
            await self.respond(kept, [burst.texts[m.id] for m in kept], burst=burst)
        finally:
            self.bursts.forget(burst)

    async def respond(
        self, messages: Sequence[discord.Message], texts: Sequence[str], *, burst: Burst | None = None
    ) -> list[discord.Message]:
        """One turn for these messages of one user (oldest first); the reply's messages. With
        `burst`, its edits, deletes and erase are followed until the turn is over."""
        me = self.bot.user
        assert me is not None
        if not messages:
            return []
        if burst is None:
            burst = Burst(messages[-1].author.id, list(messages), {m.id: t for m, t in zip(messages, texts)}, 0.0)
        first, last = messages[0], messages[-1]
        seen = await read_images(messages, self.settings)
        character = await self.character_for(last)
        # What the turn says besides the reply (the model is down, the reply was cut) is said in
        # the person's language, as known from their interactions, else the character's.
        set_locale(
            self.bot.languages.for_turn(
                last.author.id, character.language, getattr(last.guild, "preferred_locale", None)
            )
        )
        user_id = self.cast.memory_key(person_of(last.author.id), character)
        voice = await self.voices.voice_for(last.channel, character, me)
        incoming = Incoming(
            user_id=user_id,
            character=character.key,
            user_name=last.author.display_name,
            text="",
            story_id=story_of(last.channel.id),  # a thread is its own story
            story_name=f"#{name}" if isinstance(name := getattr(last.channel, "name", None), str) else "DM",
            place=place_of(last.guild.id if last.guild is not None else None),
            message_id=str(last.id),
            history=channel_lines(await (burst.earlier or self._earlier(first)), me.id, voice, last.author.id),
            images=seen.images,
            swipes=self.engine.settings.settle_seconds > 0,
        )
        voice = await self.voices.voice_for(last.channel, character, me)

        async def turn(on_text: Any = None) -> TurnResult:
            parts = burst.begin_turn(messages, seen.marks_of)
            return await self.engine.conversation.turn(
                dataclasses.replace(incoming, text=join_parts(parts), parts=parts), on_text=on_text
            )

        try:
            if self.settings.stream_replies:
                result, sent = await self.streamed_turn(last, turn, voice)
            else:
                async with last.channel.typing():
                    result = await turn()
                sent = await send_reply(last, turn_text(result), self.pacer, voice)
        except Dropped:
            log.debug("the messages of user %s were deleted or erased before their answer", last.author.id)
            return []
        if result.reply is not None and result.exchange_id is not None:
            await self.engine.conversation.reply_sent(user_id, result.exchange_id, str(sent[-1].id))
            await self._add_swipe_controls(incoming, result, sent)
            # Said once, after the reply: what happened to the person's check-ins meanwhile.
            notice = await self.engine.conversation.notice(person_of(last.author.id))
            if notice is not None:
                sent += await send_reply(last, notice_text(notice), self.pacer, voice)
        if result.exchange_id is not None:
            await burst.catch_up(self.engine)
        return sent

    async def character_for(self, message: discord.Message) -> Character:
        """Who answers: the character a reply answers, else the one of the place."""
        replied = message.reference.resolved if message.reference is not None else None
        if isinstance(replied, discord.Message):
            owner = await self.voices.owns(replied)
            if owner is not None:
                return owner
        return character_at(self.cast, message.channel, message.guild.id if message.guild is not None else None)

    async def streamed_turn(
        self, message: discord.Message, turn: Callable[[Any], Awaitable[TurnResult]], voice: Voice | None = None
    ) -> tuple[TurnResult, list[discord.Message]]:
        async with LiveReply(message, self.pacer, voice) as live:
            result = await turn(live.update)
            return result, await live.finish(turn_text(result))

    async def _add_swipe_controls(self, incoming: Incoming, result: TurnResult, sent: list[discord.Message]) -> None:
        """◀ 1/1 ▶ 🔄 under a reply that fits in one message; a longer one is kept as it is."""
        if not incoming.swipes or result.reply is None or result.exchange_id is None:
            return
        if len(sent) > 1:
            await self.engine.conversation.settle(incoming.user_id, exchange_id=result.exchange_id)
            return
        view = swipe_view(incoming.user_id, Shown(result.exchange_id, 1, 1, result.reply))
        # An edit like the streamed ones: it takes its turn in the channel's pace.
        try:
            async with self.pacer.slot(sent[-1].channel.id):
                await sent[-1].edit(view=view)
            if await self.engine.conversation.shown(incoming.user_id, result.exchange_id) is None:
                async with self.pacer.slot(sent[-1].channel.id):
                    await sent[-1].edit(view=None)  # settled while the buttons were on their way
        except discord.HTTPException as exc:
            log.debug("could not add the swipe buttons to a reply: %s", exc)

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

    async def _earlier(self, message: discord.Message) -> list[discord.Message]:
        """The channel's messages before this one that have text, oldest first (none when the
        history is unreadable or off)."""
        limit = self.engine.settings.history_messages
        if limit == 0:
            return []
        try:
            # Without the Message Content intent others' messages arrive empty.
            earlier = [m async for m in message.channel.history(limit=limit, before=message) if m.clean_content.strip()]
        except discord.HTTPException as exc:
            if message.channel.id not in self._history_refused:
                self._history_refused.add(message.channel.id)
                log.warning("cannot read the history of channel %s (%s): answering without it", message.channel.id, exc)
            return []
        earlier.reverse()
        return earlier

    async def _react(self, message: discord.Message, emoji: str) -> None:
        try:
            async with self.pacer.slot(message.channel.id):
                await message.add_reaction(emoji)
        except discord.HTTPException as exc:
            log.debug("could not react to message %s: %s", message.id, exc)


async def setup(bot: EchoBot) -> None:
    await bot.add_cog(Conversation(bot, bot.services.engine))
