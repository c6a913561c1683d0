"""The channel's earlier messages as the engine reads them (`ChannelLine`)."""

from __future__ import annotations

from collections.abc import Sequence

import discord

from bot.engine.prompting import ChannelLine
from cogs.utils.voices import Voice


def channel_lines(earlier: Sequence[discord.Message], bot_id: int, voice: Voice, person: int) -> list[ChannelLine]:
    """The history as the character reads it. Its own lines are its turns: the bot's messages,
    and those of the webhook it speaks through here under its name. Every other line is named
    by its speaker: another character's, and another app's webhook (a PluralKit proxy, another
    bot) whatever name it takes. `person`: the id of the author the turn answers, whose own
    lines recall reads the message with."""
    return [
        ChannelLine(
            m.author.display_name,
            m.clean_content,
            from_bot=m.author.id == bot_id or voice.wrote(m),
            from_cast=voice.posted(m),
            from_person=m.author.id == person,
        )
        for m in earlier
    ]
