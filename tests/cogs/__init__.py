"""Cog tests: a real Engine over a real SQLite file and the scripted LLM server, and small fakes
of the discord objects the cogs touch (no Discord connection, ever).

The services fixtures (`services`, `services_with`, `settings_overrides`) are tests.conftest's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import discord
import pytest

from bot.app import Services
from cogs.bot import EchoBot

BOT_ID = 1000
GUILD_ID = 77
CHANNEL_ID = 500
ALICE = 1
BOB = 2


def offline_bot(services: Services) -> EchoBot:
    """The real bot class, never logged in; `bot.user` set as the gateway would set it."""
    bot = EchoBot(services)
    me = MagicMock(spec=discord.ClientUser)
    me.id = BOT_ID
    me.bot = True
    me.display_name = "Écho"
    bot._connection.user = me
    return bot


# --- messages -------------------------------------------------------------------------------


class FakeTyping:
    """`channel.typing()`: an async context manager that records when it is entered and left."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def __aenter__(self) -> None:
        self.events.append("typing")

    async def __aexit__(self, *exc: object) -> None:
        self.events.append("typing done")


def fake_user(
    user_id: int, name: str, *, member: bool = True, bot: bool = False, roles: Iterable[int] = ()
) -> MagicMock:
    user = MagicMock(spec=discord.Member if member else discord.User)
    user.id = user_id
    user.bot = bot
    user.display_name = name
    if member:
        user.roles = [_role(r) for r in roles]
    return user


def _role(role_id: int) -> MagicMock:
    role = MagicMock(spec=discord.Role)
    role.id = role_id
    return role


def fake_channel(
    channel_id: int = CHANNEL_ID, *, kind: type = discord.TextChannel, parent_id: int | None = None
) -> MagicMock:
    """A channel whose `send` records what was sent in `channel.sent` (and "send" in events)."""
    channel = MagicMock(spec=kind)
    channel.id = channel_id
    if parent_id is not None:
        channel.parent_id = parent_id
    channel.events = []
    channel.sent = []
    channel.earlier = []  # messages before the current one, oldest first

    async def send(content: str | None = None, **kwargs: Any) -> MagicMock:
        channel.events.append("send")
        channel.sent.append((content, kwargs))
        return MagicMock(spec=discord.Message)

    async def history_iter(limit: int, before: Any) -> AsyncIterator[Any]:
        for m in list(reversed(channel.earlier))[:limit]:  # newest first, as Discord gives them
            yield m

    channel.send = AsyncMock(side_effect=send)
    channel.typing = MagicMock(side_effect=lambda: FakeTyping(channel.events))
    channel.history = MagicMock(side_effect=lambda limit, before: history_iter(limit, before))
    return channel


_next_message_id = iter(range(9000, 10**6))


def fake_message(
    content: str,
    *,
    author: MagicMock,
    channel: MagicMock,
    guild_id: int | None = GUILD_ID,
    mentions: Sequence[Any] = (),
    replied_to: Any = None,
    type_: discord.MessageType = discord.MessageType.default,
) -> MagicMock:
    message = MagicMock(spec=discord.Message)
    message.id = next(_next_message_id)
    message.content = content
    message.clean_content = content
    message.author = author
    message.channel = channel
    message.type = type_
    message.mentions = list(mentions)
    if guild_id is None:
        message.guild = None
    else:
        message.guild = MagicMock(spec=discord.Guild)
        message.guild.id = guild_id
    if replied_to is None:
        message.reference = None
    else:
        message.reference = MagicMock(spec=discord.MessageReference)
        message.reference.resolved = replied_to
    message.jump_url = f"https://discord.com/channels/{guild_id or '@me'}/{channel.id}/{message.id}"
    message.reference_to_send = object()
    message.to_reference = MagicMock(return_value=message.reference_to_send)
    message.add_reaction = AsyncMock()
    return message


# --- interactions ---------------------------------------------------------------------------


def fake_interaction(
    user_id: int,
    *,
    guild_id: int | None = GUILD_ID,
    channel_id: int = CHANNEL_ID,
    roles: Iterable[int] = (),
) -> MagicMock:
    """An interaction whose answers are recorded in `interaction.answers` as (text, kwargs),
    and its deferrals' kwargs in `interaction.deferrals` (a deferred answer's visibility is the
    defer's, whatever the followup says)."""
    interaction = MagicMock(spec=discord.Interaction)
    interaction.user = fake_user(user_id, f"user{user_id}", member=guild_id is not None, roles=roles)
    interaction.guild_id = guild_id
    interaction.channel_id = channel_id
    interaction.command = None
    interaction.answers = []
    interaction.deferrals = []
    state = {"done": False}

    async def send_message(content: str | None = None, **kwargs: Any) -> None:
        assert not state["done"], "an interaction is answered once"
        state["done"] = True
        interaction.answers.append((content, kwargs))

    async def defer(**kwargs: Any) -> None:
        assert not state["done"]
        state["done"] = True
        interaction.deferrals.append(kwargs)

    async def edit_message(**kwargs: Any) -> None:
        assert not state["done"], "an interaction is answered once"
        state["done"] = True

    async def followup_send(content: str | None = None, **kwargs: Any) -> None:
        assert state["done"], "a followup needs a response first"
        interaction.answers.append((content, kwargs))

    response = MagicMock(spec=discord.InteractionResponse)
    response.is_done = MagicMock(side_effect=lambda: state["done"])
    response.send_message = AsyncMock(side_effect=send_message)
    response.defer = AsyncMock(side_effect=defer)
    response.edit_message = AsyncMock(side_effect=edit_message)
    interaction.response = response
    followup = MagicMock(spec=discord.Webhook)
    followup.send = AsyncMock(side_effect=followup_send)
    interaction.followup = followup
    interaction.edit_original_response = AsyncMock()
    return interaction


def pressing(interaction: MagicMock, item: discord.ui.Item[Any], client: discord.Client) -> MagicMock:
    """`interaction` as a press of `item` on `client`'s message: the item's custom id in its
    data, as Discord sends it."""
    interaction.type = discord.InteractionType.component
    interaction.data = {"custom_id": item.custom_id}  # type: ignore[attr-defined]
    interaction.client = client
    interaction.locale = discord.Locale.american_english
    return interaction


def texts(interaction: MagicMock) -> list[str]:
    return [content for content, _ in interaction.answers]


def all_ephemeral(interaction: MagicMock) -> bool:
    """Answered, and every answer and every deferral was ephemeral."""
    sent = [kwargs for _, kwargs in interaction.answers] + interaction.deferrals
    return bool(interaction.answers) and all(kwargs.get("ephemeral") is True for kwargs in sent)


async def started(bot: EchoBot, monkeypatch: pytest.MonkeyPatch) -> AsyncMock:
    """Run the real setup_hook with the tree's sync replaced; returns that sync."""
    sync = AsyncMock(return_value=[])
    monkeypatch.setattr(bot.tree, "sync", sync)
    await bot.setup_hook()
    return sync
