"""The bot offline: extensions loaded into the real EchoBot, the command-tree payload Discord
would receive, when commands are synced, intents, owner sync, start-up errors, shutdown."""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import discord
import pytest
from discord.ext import commands
from pydantic import SecretStr

from bot.app import Services
from bot.engine import Incoming
from bot.errors import StartupError
from cogs.bot import EXTENSIONS, EchoBot, ShardedEchoBot, make_intents, run_discord
from tests.cogs import ALICE, BOT_ID, GUILD_ID, fake_channel, fake_message, fake_user, offline_bot, started
from tests.fakes.llm_server import FakeLLMServer, LLMRequest, Reply

CHAT_INPUT, MESSAGE_MENU = 1, 3
# Option name, required, autocomplete, per slash command.
CHARACTER = ("character", False, True)  # every command on one character's memory can pick another
EXPECTED_OPTIONS: dict[str, list[tuple[str, bool, bool]]] = {
    "memories": [("type", False, False), CHARACTER],
    "remember": [("text", True, False), CHARACTER],
    "pin": [("id", True, True), CHARACTER],
    "unpin": [("id", True, True), CHARACTER],
    "forget": [("id", True, True), CHARACTER],
    "history": [CHARACTER],
    "restore": [("history_id", True, True), CHARACTER],
    "why": [CHARACTER],
    "memory-stats": [CHARACTER],
    "export": [],
    "erase-me": [],
    "share": [("state", False, False)],
    "followups": [("state", False, False), ("timezone", False, False)],
}
SLASH_NAME = re.compile(r"^[-_a-z0-9]{1,32}$")


async def test_tree_payload_has_every_command_and_nothing_syncs_without_dev_guild(
    services: Services, llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert services.settings.discord.dev_guild_id is None
    bot = offline_bot(services)
    sync = await started(bot, monkeypatch)
    sync.assert_not_awaited()
    assert set(EXTENSIONS) <= set(bot.extensions)

    payload = [c.to_dict(bot.tree) for c in bot.tree.get_commands()]
    json.dumps(payload)  # what Discord receives is plain JSON
    slash = {c["name"]: c for c in payload if c["type"] == CHAT_INPUT}
    menus = [c for c in payload if c["type"] == MESSAGE_MENU]
    assert set(slash) == set(EXPECTED_OPTIONS)
    assert [m["name"] for m in menus] == ["Remember this"]
    for name, command in slash.items():
        assert SLASH_NAME.match(name), name
        assert 0 < len(command["description"]) <= 100, name
        options = [(o["name"], o.get("required", False), o.get("autocomplete", False)) for o in command["options"]]
        assert options == EXPECTED_OPTIONS[name], name
        for option in command["options"]:
            assert 0 < len(option["description"]) <= 100, (name, option["name"])
    memory_types = [c["value"] for c in slash["memories"]["options"][0]["choices"]]
    assert memory_types == ["fact", "preference", "promise", "episode"]  # never "rule"
    assert slash["remember"]["options"][0]["max_length"] == 500


@pytest.mark.parametrize("settings_overrides", [{"dev_guild_id": 4242}])
async def test_dev_guild_gets_the_commands_at_start(
    services_with: Services, llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = offline_bot(services_with)
    sync = await started(bot, monkeypatch)
    sync.assert_awaited_once()
    assert sync.await_args.kwargs["guild"].id == 4242
    guild_names = {c.name for c in bot.tree.get_commands(guild=discord.Object(4242))}
    assert set(EXPECTED_OPTIONS) | {"Remember this"} <= guild_names


def http_error(kind: type[discord.HTTPException], status: int, code: int, message: str) -> discord.HTTPException:
    return kind(MagicMock(status=status, reason=message), {"code": code, "message": message})


@pytest.mark.parametrize("settings_overrides", [{"dev_guild_id": 4242}])
@pytest.mark.parametrize(
    "failure",
    [
        http_error(discord.Forbidden, 403, 50001, "Missing Access"),  # not a member, or no applications.commands
        http_error(discord.HTTPException, 400, 50035, "Invalid Form Body"),
    ],
)
async def test_a_dev_guild_sync_refused_by_discord_is_explained_and_the_bot_keeps_running(
    services_with: Services,
    llm_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: discord.HTTPException,
) -> None:
    bot = offline_bot(services_with)
    sync = AsyncMock(side_effect=failure)
    monkeypatch.setattr(bot.tree, "sync", sync)
    with caplog.at_level(logging.WARNING, logger="cogs.bot"):
        await bot.setup_hook()  # does not raise
    sync.assert_awaited_once()
    assert set(EXTENSIONS) <= set(bot.extensions)
    (record,) = [r for r in caplog.records if r.name == "cogs.bot"]
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "DEV_GUILD_ID=4242" in text and "member" in text and "`applications.commands` scope" in text


async def test_message_content_intent_only_for_allowed_channels(services: Services, llm_server: FakeLLMServer) -> None:
    assert not make_intents([]).message_content
    assert make_intents([123]).message_content
    assert not make_intents([123]).members
    assert not offline_bot(services).intents.message_content
    services.settings = services.settings.replace(allowed_channel_ids=[123])
    assert offline_bot(services).intents.message_content


@pytest.mark.parametrize(
    ("allowed_channel_ids", "expected"),
    [
        ([], {"guilds", "guild_messages", "dm_messages"}),
        ([123], {"guilds", "guild_messages", "dm_messages", "message_content"}),
    ],
)
def test_intents_are_only_those_the_bot_uses(allowed_channel_ids: list[int], expected: set[str]) -> None:
    """Servers, messages in servers and DMs (the one event listened to is on_message), and
    Message Content only for whole channels: no voice states, typing, reactions, presences."""
    intents = make_intents(allowed_channel_ids)
    assert {name for name, on in intents if on} == expected
    assert intents.value == discord.Intents(**dict.fromkeys(expected, True)).value


async def test_starting_without_message_content_warns_of_nothing(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    """Écho answers mentions, replies and slash commands: without the Message Content intent its
    owner commands are read on a mention, and discord.py has nothing to warn about."""
    assert not services.settings.discord.allowed_channel_ids
    bot = offline_bot(services)
    assert not bot.intents.message_content
    with caplog.at_level(logging.WARNING, logger="discord"):
        await bot._async_setup_hook()
    assert "message content intent is missing" not in caplog.text.lower()


@pytest.mark.parametrize("settings_overrides", [{"owner_ids": [ALICE]}])
async def test_only_owners_sync_and_sync_guild_targets_this_server(
    services_with: Services, llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = AsyncMock()
    monkeypatch.setattr(commands.Context, "send", sent)
    me = fake_user(BOT_ID, "Écho", bot=True)
    async with offline_bot(services_with) as bot:  # entering sets the bot's loop, no login
        sync = await started(bot, monkeypatch)
        bot.owner_id = 55  # the application's owner, as application_info() would report

        async def say(author_id: int, text: str) -> None:
            message = fake_message(text, author=fake_user(author_id, "x"), channel=fake_channel(), mentions=[me])
            await bot.invoke(await bot.get_context(message))

        await say(7, f"<@{BOT_ID}> sync")  # not an owner: refused, quietly
        sync.assert_not_awaited()
        sent.assert_not_awaited()
        await say(ALICE, f"<@{BOT_ID}> sync")  # OWNER_IDS
        assert sync.await_args_list[-1].kwargs == {}
        await say(55, f"<@{BOT_ID}> sync guild")  # the application's owner
        assert sync.await_args_list[-1].kwargs["guild"].id == GUILD_ID
        assert sync.await_count == 2
        assert "to this server" in sent.await_args.args[0]


async def test_run_discord_explains_a_bad_token_and_a_missing_intent(
    services: Services, llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.settings = services.settings.replace(discord_token=SecretStr("not-a-token"))
    failures: list[BaseException] = [discord.LoginFailure("Improper token"), discord.PrivilegedIntentsRequired(None)]
    expected = ["Reset Token", "Bot → Privileged Gateway Intents → Message Content Intent"]
    for failure, words in zip(failures, expected):
        monkeypatch.setattr(EchoBot, "start", AsyncMock(side_effect=failure))
        with pytest.raises(StartupError, match=re.escape(words)) as caught:
            await run_discord(services, services.settings.discord.require_discord_token())
        assert caught.value.__cause__ is failure
    assert "ALLOWED_CHANNEL_IDS" in str(caught.value)


async def test_close_lets_an_in_flight_reflection_finish(services: Services, llm_server: FakeLLMServer) -> None:
    def handler(request: LLMRequest) -> Any:
        return Reply("{}", delay=0.3) if request.json_schema is not None else "bonjour"

    llm_server.handler = handler
    engine = services.engine
    await engine.conversation.turn(
        Incoming(user_id=str(ALICE), user_name="Alice", text="salut", story_id="s", place="p")
    )
    engine.operator.schedule_reflection(str(ALICE))
    # The bot leaves the gateway; the engine is closed once, by whoever opened the services.
    await offline_bot(services).close()
    await engine.close()
    async with services.db.reader.execute(
        "SELECT reflected_at IS NOT NULL FROM exchanges WHERE user_id = ?", (str(ALICE),)
    ) as cur:
        assert [r[0] for r in await cur.fetchall()] == [1]


async def test_every_command_option_and_menu_has_a_french_name_and_description_discord_accepts(
    services: Services, llm_server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = offline_bot(services)
    await started(bot, monkeypatch)
    payload = [await c.get_translated_payload(bot.tree, bot.tree.translator) for c in bot.tree.get_commands()]  # type: ignore[arg-type]
    for command in payload:
        french = command["name_localizations"]["fr"]
        assert french != command["name"] or command["name"] == "type"
        if command["type"] == CHAT_INPUT:
            assert SLASH_NAME.match(french), french
            assert 0 < len(command["description_localizations"]["fr"]) <= 100, command["name"]
            for option in command["options"]:
                assert SLASH_NAME.match(option["name_localizations"]["fr"]), option["name"]
                assert 0 < len(option["description_localizations"]["fr"]) <= 100, option["name"]
        assert "en-US" not in command.get("name_localizations", {}), "English is the default name"


@pytest.mark.parametrize("settings_overrides", [{"shard_count": 4, "shard_ids": [2, 3]}])
def test_shard_settings_give_a_sharded_bot_running_those_shards(services_with: Services) -> None:
    bot = ShardedEchoBot(services_with)
    assert isinstance(bot, commands.AutoShardedBot) and isinstance(bot, EchoBot)
    assert (bot.shard_count, bot.shard_ids) == (4, [2, 3])
    assert not isinstance(EchoBot(services_with), commands.AutoShardedBot)  # no sharding unless asked
