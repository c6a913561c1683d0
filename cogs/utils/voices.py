"""Which character speaks in a Discord place, and the channel webhooks it speaks through.

A character read from CHARACTERS_DIR speaks in servers through one webhook per channel (found
among the channel's webhooks the bot made, or created once, then cached), under its own name
and avatar. Where the bot may not manage webhooks, it speaks as the bot itself, and says why in
the log once per channel. DMs have no webhooks: the bot's own messages there.

A webhook message is traced back to its character by the webhook's id, one of the bot's own
(made by the bot, found by listing the channel's webhooks after a restart, then cached), and the
name it was sent under: character names are unique in a cast, so nothing needs storing, and
replies to messages sent before a restart still reach the right character. A name alone proves
nothing: another app's webhook (a PluralKit proxy, another bot) may take a character's name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import discord

from bot.characters.cast import Cast
from bot.characters.character import Character
from cogs.bot import NO_MENTIONS

log = logging.getLogger(__name__)

WEBHOOK_NAME = "Écho characters"


def character_at(cast: Cast, channel: object, guild_id: int | None) -> Character:
    """The character mapped to a channel (a thread takes its parent's), its category, its server."""
    if guild_id is None or channel is None:
        return cast.default
    parent_id = getattr(channel, "parent_id", None) if isinstance(channel, discord.Thread) else None
    parent = getattr(channel, "parent", None) if isinstance(channel, discord.Thread) else channel
    return cast.for_place(
        channel_id=getattr(channel, "id", None),
        parent_id=parent_id,
        category_id=getattr(parent, "category_id", None),
        guild_id=guild_id,
    )


@dataclass(slots=True)
class Voice:
    """How one reply is posted: through a webhook as `character`, or as the bot (webhook None)."""

    character: Character | None = None
    webhook: discord.Webhook | None = None
    thread: discord.Thread | None = None

    def posted(self, message: discord.Message) -> bool:
        """Whether `message` came through this voice's webhook (a character of the cast spoke)."""
        return self.webhook is not None and message.webhook_id == self.webhook.id

    def wrote(self, message: discord.Message) -> bool:
        """Whether `message` is this voice's character speaking through this voice's webhook."""
        return self.posted(message) and self.character is not None and message.author.name == self.character.name

    async def send(
        self, channel: discord.abc.Messageable, text: str, *, reference: discord.Message | None
    ) -> discord.Message:
        if self.webhook is None or self.character is None:
            if reference is not None:
                return await channel.send(
                    text,
                    reference=reference.to_reference(fail_if_not_exists=False),
                    mention_author=False,
                    allowed_mentions=NO_MENTIONS,
                )
            return await channel.send(text, allowed_mentions=NO_MENTIONS)
        # A webhook message cannot be a Discord reply: it is posted after the message it answers.
        return await self.webhook.send(
            text,
            username=self.character.name,
            avatar_url=self.character.avatar_url or discord.utils.MISSING,
            allowed_mentions=NO_MENTIONS,
            wait=True,
            thread=self.thread if self.thread is not None else discord.utils.MISSING,
        )


class Voices:
    """One webhook per channel, found or created on first use and cached."""

    def __init__(self, cast: Cast) -> None:
        self.cast = cast
        # None: the bot may not manage webhooks there (logged once per channel, then cached).
        self._hooks: dict[int, discord.Webhook | None] = {}

    async def voice_for(self, channel: discord.abc.Messageable, character: Character, me: discord.abc.User) -> Voice:
        if not self.cast.from_folder or not isinstance(channel, (discord.TextChannel, discord.Thread)):
            return Voice(character)
        thread = channel if isinstance(channel, discord.Thread) else None
        parent = thread.parent if thread is not None else channel
        if not isinstance(parent, discord.TextChannel):
            return Voice(character)
        return Voice(character, await self._webhook(parent, me), thread)

    async def _webhook(self, channel: discord.TextChannel, me: discord.abc.User) -> discord.Webhook | None:
        if channel.id in self._hooks:
            return self._hooks[channel.id]
        try:
            hooks = await channel.webhooks()
            found = next((h for h in hooks if h.user is not None and h.user.id == me.id and h.token), None)
            if found is None:
                found = await channel.create_webhook(name=WEBHOOK_NAME, reason="characters speak with their own names")
        except discord.Forbidden:
            log.warning(
                "no Manage Webhooks permission in channel %s (%s): characters speak there as the bot "
                "itself, with its name and avatar. Give the bot the Manage Webhooks permission in that "
                "channel so that each character speaks with its own.",
                channel.id,
                getattr(channel, "name", "?"),
            )
            self._hooks[channel.id] = None
            return None
        except discord.HTTPException as exc:
            # Not cached: a passing failure is retried at the next reply.
            log.warning("could not get a webhook in channel %s (%s); this reply is the bot's own", channel.id, exc)
            return None
        self._hooks[channel.id] = found
        return found

    async def edit(self, message: discord.PartialMessage | discord.Message, **changes: Any) -> None:
        """Edit a reply of the bot's: through its channel's webhook when a character spoke there
        through it (Discord lets no one else edit a webhook's message), else as the bot's own."""
        channel = message.channel
        if self.cast.from_folder and isinstance(channel, (discord.TextChannel, discord.Thread)):
            thread = channel if isinstance(channel, discord.Thread) else None
            parent = thread.parent if thread is not None else channel
            me = parent.guild.me if isinstance(parent, discord.TextChannel) else None
            hook = (
                await self._webhook(parent, me) if isinstance(parent, discord.TextChannel) and me is not None else None
            )
            if hook is not None:
                try:
                    await hook.edit_message(message.id, thread=thread or discord.utils.MISSING, **changes)
                    return
                except discord.NotFound:
                    pass  # posted as the bot itself, when the webhook was out of reach
        await message.edit(**changes)

    @property
    def channels_without_webhooks(self) -> int:
        return sum(1 for hook in self._hooks.values() if hook is None)

    async def owns(self, message: discord.Message) -> Character | None:
        """The character who wrote `message`, when it is one of ours sent through a webhook."""
        if message.webhook_id is None or not self.cast.from_folder:
            return None  # one character speaks as the bot itself: no webhook is ours
        channel = message.channel
        parent = channel.parent if isinstance(channel, discord.Thread) else channel
        if not isinstance(parent, discord.TextChannel):
            return None
        hook = self._hooks.get(parent.id)
        if hook is None and parent.id not in self._hooks:
            me = parent.guild.me
            hook = await self._webhook(parent, me) if me is not None else None
        if hook is None or hook.id != message.webhook_id:
            return None
        return next((c for c in self.cast.characters.values() if c.name == message.author.name), None)
