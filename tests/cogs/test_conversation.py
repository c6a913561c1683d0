"""The conversation cog over a real engine, real SQLite and the scripted LLM server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord
import pytest

from bot.app import Services
from bot.i18n import text, use_locale
from cogs.bot import OwnerCommands
from cogs.conversation import RATE_LIMITED_REACTION, Conversation
from cogs.utils.answering import DISCORD_LIMIT
from tests.cogs import (
    ALICE,
    BOB,
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    fake_channel,
    fake_message,
    fake_user,
    offline_bot,
)
from tests.fakes.llm_server import FakeLLMServer, LLMRequest, Reply

OPEN_CHANNEL = 600


class FrozenClock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def make_cog(services: Services) -> Conversation:
    bot = offline_bot(services)
    return Conversation(bot, services.engine, clock=FrozenClock())


def me() -> Any:
    return fake_user(BOT_ID, "Écho", bot=True)


def reply_requests(server: FakeLLMServer) -> list[LLMRequest]:
    return [r for r in server.chats if r.json_schema is None]


def reflection_requests(server: FakeLLMServer) -> list[LLMRequest]:
    return [r for r in server.chats if r.json_schema is not None]


async def test_reply_is_split_sent_as_a_reply_then_reflection_runs_after_it(
    services: Services, llm_server: FakeLLMServer
) -> None:
    channel = fake_channel()
    gate = asyncio.Event()
    long_reply = "\n\n".join(f"Paragraphe {n} : " + "bla " * 200 for n in range(3))  # ~2,500 chars

    async def handler(request: LLMRequest) -> str:
        if request.json_schema is not None:
            channel.events.append("reflection request")
            await asyncio.wait_for(gate.wait(), 10)
            return "{}"
        return long_reply

    llm_server.handler = handler
    cog = make_cog(services)
    message = fake_message(
        f"<@{BOT_ID}> Salut, je m'appelle Alice", author=fake_user(ALICE, "Alice"), channel=channel, mentions=[me()]
    )

    # Returns while the reflection is held at the server: the reply never waits for it.
    await asyncio.wait_for(cog.on_message(message), 10)
    assert not gate.is_set()
    assert channel.events == ["typing", "typing done", "send", "send"]

    (first, first_kwargs), (second, second_kwargs) = channel.sent
    assert len(first) <= DISCORD_LIMIT and len(second) <= DISCORD_LIMIT
    assert (first + "\n\n" + second).split() == long_reply.split()
    assert first_kwargs["reference"] is message.reference_to_send
    assert first_kwargs["mention_author"] is False
    assert "reference" not in second_kwargs
    for _, kwargs in channel.sent:
        mentions: discord.AllowedMentions = kwargs["allowed_mentions"]
        assert (mentions.everyone, mentions.users, mentions.roles, mentions.replied_user) == (False,) * 4

    # The model saw the message without the bot's mention.
    (request,) = reply_requests(llm_server)
    assert request.last_user == "Alice: Salut, je m'appelle Alice"

    gate.set()
    await services.engine.operator.wait_reflections(str(ALICE))
    assert channel.events[-1] == "reflection request"
    assert len(reflection_requests(llm_server)) == 1
    # The turn is recorded under this channel's story, for /why.
    assert await services.engine.memories.why(str(ALICE), str(CHANNEL_ID)) is not None


async def test_history_before_the_message_is_given_oldest_first(services: Services, llm_server: FakeLLMServer) -> None:
    channel = fake_channel()
    alice, bob = fake_user(ALICE, "Alice"), fake_user(BOB, "Bob")
    channel.earlier = [
        fake_message("on parle de vélo", author=bob, channel=channel),
        fake_message("j'adore le vélo", author=me(), channel=channel),
        fake_message("", author=bob, channel=channel),  # no content (no intent): left out
        fake_message("moi aussi", author=alice, channel=channel),
    ]
    cog = make_cog(services)
    await cog.on_message(fake_message(f"<@{BOT_ID}> et toi ?", author=alice, channel=channel, mentions=[me()]))

    (request,) = reply_requests(llm_server)
    # The channel's lines, as the bot's notes (memories, story: they start with "<") leave them.
    turns = [(m["role"], m["content"]) for m in request.messages[1:] if not m["content"].startswith("<")]
    assert turns == [
        ("user", "Bob: on parle de vélo"),
        ("assistant", "j'adore le vélo"),
        ("user", "Alice: moi aussi"),
        ("user", "Alice: et toi ?"),
    ]
    channel.history.assert_called_once()
    assert channel.history.call_args.kwargs["limit"] == services.settings.engine.history_messages


@pytest.mark.parametrize("settings_overrides", [{"allowed_channel_ids": [OPEN_CHANNEL]}])
async def test_who_is_answered(services_with: Services, llm_server: FakeLLMServer) -> None:
    cog = make_cog(services_with)
    alice = fake_user(ALICE, "Alice")
    bot_message = fake_message("earlier answer", author=me(), channel=fake_channel())

    answered = {
        "dm": fake_message(
            "salut",
            author=fake_user(ALICE, "Alice", member=False),
            channel=fake_channel(31, kind=discord.DMChannel),
            guild_id=None,
        ),
        "reply to the bot": fake_message("et alors ?", author=alice, channel=fake_channel(), replied_to=bot_message),
        "allowed channel": fake_message("hello", author=alice, channel=fake_channel(OPEN_CHANNEL)),
        "thread of an allowed channel": fake_message(
            "hello", author=alice, channel=fake_channel(32, kind=discord.Thread, parent_id=OPEN_CHANNEL)
        ),
    }
    ignored = {
        "other channel": fake_message("hello", author=alice, channel=fake_channel()),
        "reply to someone else": fake_message(
            "et alors ?",
            author=alice,
            channel=fake_channel(),
            replied_to=fake_message("x", author=fake_user(BOB, "Bob"), channel=fake_channel()),
        ),
        "another bot": fake_message(
            f"<@{BOT_ID}> hi", author=fake_user(5, "Bot", bot=True), channel=fake_channel(), mentions=[me()]
        ),
        "itself": fake_message("hello", author=me(), channel=fake_channel(OPEN_CHANNEL)),
        "bare mention": fake_message(f"<@{BOT_ID}>", author=alice, channel=fake_channel(), mentions=[me()]),
        "system message": fake_message(
            "pinned", author=alice, channel=fake_channel(OPEN_CHANNEL), type_=discord.MessageType.pins_add
        ),
        "owner command": fake_message(f"<@{BOT_ID}> sync", author=alice, channel=fake_channel(), mentions=[me()]),
    }
    await cog.bot.add_cog(OwnerCommands(cog.bot))
    for name, message in {**answered, **ignored}.items():
        before = len(llm_server.chats)
        await cog.on_message(message)
        was_answered = bool(message.channel.sent)
        assert was_answered == (name in answered), name
        assert (len(llm_server.chats) > before) == (name in answered), name


@pytest.mark.parametrize(
    "settings_overrides",
    [{"blocked_user_ids": [ALICE]}, {"allowed_user_ids": [BOB]}, {"allowed_role_ids": [42]}],
)
async def test_users_not_allowed_are_ignored(services_with: Services, llm_server: FakeLLMServer) -> None:
    cog = make_cog(services_with)
    channel = fake_channel()
    await cog.on_message(
        fake_message(f"<@{BOT_ID}> hi", author=fake_user(ALICE, "Alice", roles=[7]), channel=channel, mentions=[me()])
    )
    assert channel.sent == [] and llm_server.chats == []


@pytest.mark.parametrize("settings_overrides", [{"allowed_role_ids": [42]}])
async def test_member_with_an_allowed_role_is_answered(services_with: Services, llm_server: FakeLLMServer) -> None:
    cog = make_cog(services_with)
    channel = fake_channel()
    await cog.on_message(
        fake_message(
            f"<@{BOT_ID}> hi", author=fake_user(ALICE, "Alice", roles=[7, 42]), channel=channel, mentions=[me()]
        )
    )
    assert len(channel.sent) == 1


@pytest.mark.parametrize("settings_overrides", [{"user_rate_limit_messages": 2, "user_rate_limit_seconds": 30.0}])
async def test_a_burst_over_the_rate_limit_gets_no_llm_call_and_one_hourglass(
    services_with: Services, llm_server: FakeLLMServer
) -> None:
    cog = make_cog(services_with)  # its clock is frozen: the whole burst is in one window
    channel = fake_channel()
    alice = fake_user(ALICE, "Alice")
    messages = [
        fake_message(f"<@{BOT_ID}> message {n}", author=alice, channel=channel, mentions=[me()]) for n in range(30)
    ]
    await asyncio.gather(*(cog.on_message(m) for m in messages))

    assert len(reply_requests(llm_server)) == 2
    assert len(channel.sent) == 2
    reacted = [m for m in messages if m.add_reaction.await_count]
    assert len(reacted) == 1
    reacted[0].add_reaction.assert_awaited_once_with(RATE_LIMITED_REACTION)
    # Bob is not limited by Alice's burst.
    await cog.on_message(
        fake_message(f"<@{BOT_ID}> hi", author=fake_user(BOB, "Bob"), channel=channel, mentions=[me()])
    )
    assert len(channel.sent) == 3


async def test_llm_down_gives_the_short_message_and_keeps_the_exchange(
    services: Services, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append(Reply(status=500, error="model crashed"))
    cog = make_cog(services)
    channel = fake_channel()
    await cog.on_message(
        fake_message(f"<@{BOT_ID}> tu es là ?", author=fake_user(ALICE, "Alice"), channel=channel, mentions=[me()])
    )
    # In the character's language (Écho's, French): Alice's Discord language is not known yet.
    with use_locale("fr"):
        assert [content for content, _ in channel.sent] == [text("turn_model_down")]
    async with services.db.reader.execute(
        "SELECT user_message, reply FROM exchanges WHERE user_id = ?", (str(ALICE),)
    ) as cur:
        assert [tuple(r) for r in await cur.fetchall()] == [("tu es là ?", None)]
    assert reflection_requests(llm_server) == []


async def test_an_unexpected_error_is_logged_and_the_next_message_is_answered(
    services: Services, llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    cog = make_cog(services)
    broken = fake_channel()
    broken.send.side_effect = RuntimeError("network gone")
    alice = fake_user(ALICE, "Alice")
    with caplog.at_level(logging.ERROR, logger="cogs.conversation"):
        await cog.on_message(fake_message(f"<@{BOT_ID}> un", author=alice, channel=broken, mentions=[me()]))
    assert "could not answer message" in caplog.text

    channel = fake_channel()
    await cog.on_message(fake_message(f"<@{BOT_ID}> deux", author=alice, channel=channel, mentions=[me()]))
    assert [content for content, _ in channel.sent] == ["echo: Alice: deux"]


async def test_a_dm_and_a_server_message_are_recorded_in_their_place(
    services: Services, llm_server: FakeLLMServer
) -> None:
    cog = make_cog(services)
    await cog.on_message(
        fake_message(
            f"<@{BOT_ID}> en serveur", author=fake_user(ALICE, "Alice"), channel=fake_channel(), mentions=[me()]
        )
    )
    await cog.on_message(
        fake_message(
            "en privé",
            author=fake_user(ALICE, "Alice", member=False),
            channel=fake_channel(31, kind=discord.DMChannel),
            guild_id=None,
        )
    )
    async with services.db.reader.execute(
        "SELECT user_message, place FROM exchanges WHERE user_id = ? ORDER BY id", (str(ALICE),)
    ) as cur:
        assert [tuple(r) for r in await cur.fetchall()] == [("en serveur", str(GUILD_ID)), ("en privé", "dm")]


def empty_reply(channel: Any) -> Any:
    """A reply to the bot with the ping off, as Discord sends it without the Message Content intent."""
    bot_message = fake_message("earlier answer", author=me(), channel=channel)
    return fake_message("", author=fake_user(ALICE, "Alice"), channel=channel, replied_to=bot_message)


async def test_a_reply_without_its_text_is_ignored_and_explained_once(
    services: Services, llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    cog = make_cog(services)
    assert not cog.bot.intents.message_content
    channel = fake_channel()
    with caplog.at_level(logging.WARNING, logger="cogs.conversation"):
        for _ in range(3):
            await cog.on_message(empty_reply(channel))
        # A bare mention is empty too, but it is not a reply: no warning for it.
        await cog.on_message(
            fake_message(f"<@{BOT_ID}>", author=fake_user(ALICE, "Alice"), channel=channel, mentions=[me()])
        )
    assert channel.sent == [] and llm_server.chats == []
    (record,) = [r for r in caplog.records if r.name == "cogs.conversation"]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "ping" in message and "ALLOWED_CHANNEL_IDS" in message and "Message Content intent" in message


@pytest.mark.parametrize("settings_overrides", [{"allowed_channel_ids": [OPEN_CHANNEL]}])
async def test_an_empty_reply_with_the_message_content_intent_is_not_warned_about(
    services_with: Services, llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    cog = make_cog(services_with)
    assert cog.bot.intents.message_content
    channel = fake_channel()
    with caplog.at_level(logging.WARNING, logger="cogs.conversation"):
        await cog.on_message(empty_reply(channel))  # truly empty (an attachment): nothing to say
    # Only the cog's own records: discord.py warns once per process (no PyNaCl) when a test
    # builds the worker's first client.
    assert channel.sent == [] and [r for r in caplog.records if r.name == "cogs.conversation"] == []


async def test_a_full_disk_gets_the_storage_message_not_a_reply(services: Services, llm_server: FakeLLMServer) -> None:
    async with services.db.reader.execute("PRAGMA page_count") as cur:
        (pages,) = await cur.fetchone()
    async with services.db.write() as conn:
        # SQLite's own "database or disk is full", at the size the file has now.
        await conn.execute("PRAGMA max_page_count = " + str(int(pages)))
    cog = make_cog(services)
    channel = fake_channel()
    said = "Je te raconte ma journée. " * 150
    await cog.on_message(
        fake_message(f"<@{BOT_ID}> {said}", author=fake_user(ALICE, "Alice"), channel=channel, mentions=[me()])
    )
    with use_locale("fr"):
        assert [content for content, _ in channel.sent] == [text("turn_storage_down")]
    assert reply_requests(llm_server) == [] and services.db.storage.failures == 1


@pytest.mark.parametrize("settings_overrides", [{"burst_seconds": 30.0}])
async def test_unloading_the_cog_ends_its_open_bursts_before_it_returns(
    services_with: Services, llm_server: FakeLLMServer
) -> None:
    cog = make_cog(services_with)
    channel = fake_channel()
    await cog.on_message(
        fake_message(f"<@{BOT_ID}> hello", author=fake_user(ALICE, "Alice"), channel=channel, mentions=[me()])
    )
    bursts = [t for t in asyncio.all_tasks() if t.get_name().startswith("burst:")]
    assert len(bursts) == 1 and not bursts[0].done()
    await cog.cog_unload()
    assert bursts[0].done() and bursts[0].cancelled()
    assert reply_requests(llm_server) == [] and channel.sent == []
