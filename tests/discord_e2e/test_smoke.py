"""The real bot process answers through the fake Discord: REST calls out, gateway events in."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import discord
import pytest

from tests.discord_e2e.conftest import Scene
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.discord.echo_process import EchoProcess
from tests.fakes.discord.rest import EPHEMERAL


def _replies(discord: FakeDiscord, channel_id: int) -> list:
    return [c for c in discord.calls_to("POST", f"/channels/{channel_id}/messages") if c.status == 200]


async def test_the_bot_identifies_with_its_token_syncs_commands_and_heartbeats(
    echo: EchoProcess, fake_discord: FakeDiscord
) -> None:
    identify = [f for f in fake_discord.gateway_log if f["op"] == 2]
    assert len(identify) == 1
    assert not identify[0]["d"]["intents"] & (1 << 15), "no Message Content intent without ALLOWED_CHANNEL_IDS"
    synced = fake_discord.calls_to(
        "PUT", f"/applications/{fake_discord.application_id}/guilds/{fake_discord.guild.id}/commands"
    )
    assert synced and synced[0].status == 200
    assert "memories" in {c["name"] for c in synced[0].json}
    assert fake_discord.calls_to("GET", "/gateway/bot"), "the gateway address is asked of DISCORD_API_URL"
    session = await fake_discord.wait_identified()
    for _ in range(50):
        if session.heartbeats >= 2:
            break
        await asyncio.sleep(0.1)
    assert session.heartbeats >= 2, "discord.py keeps heartbeating: each beat was ACKed"


async def test_a_channel_webhook_posts_under_its_own_name_and_avatar(
    fake_discord: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the characters will use: discord.py's own webhook client against the fake."""
    monkeypatch.setattr(discord.http.Route, "BASE", fake_discord.api_url)
    http = discord.http.HTTPClient(asyncio.get_running_loop())
    await http.static_login(fake_discord.token)
    try:
        created = await http.create_webhook(fake_discord.general.id, name="Écho")
        listed = await http.channel_webhooks(fake_discord.general.id)
    finally:
        await http.close()
    assert [w["id"] for w in listed] == [created["id"]]
    async with aiohttp.ClientSession() as session:
        webhook = discord.Webhook.partial(int(created["id"]), created["token"], session=session)
        sent = await webhook.send("Je suis Lune.", username="Lune", avatar_url="http://127.0.0.1/lune.png", wait=True)
    assert sent.author.name == "Lune" and sent.webhook_id == int(created["id"])
    executed = fake_discord.calls_to("POST", f"/webhooks/{created['id']}/")[0]
    assert executed.json["username"] == "Lune" and executed.json["avatar_url"] == "http://127.0.0.1/lune.png"
    assert fake_discord.messages_in(fake_discord.general)[-1]["content"] == "Je suis Lune."


async def test_a_mention_in_a_guild_channel_gets_a_reply_posted_as_a_reply(scene: Scene) -> None:
    fake_discord, channel = scene.fake_discord, scene.channel
    scene.llm_server.replies.append("Bonjour Alice, ravie de te voir.")
    said = await fake_discord.user_says(scene.alice, channel, "bonjour !", mention_bot=True)
    calls = await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages")
    body = calls[0].json
    await fake_discord.wait_for_text(channel, "Bonjour Alice, ravie de te voir.")
    assert str(body["message_reference"]["message_id"]) == said["id"]
    assert body["allowed_mentions"]["parse"] == []
    assert scene.llm_server.chats[0].last_user.endswith("bonjour !")


async def test_a_direct_message_gets_an_answer_in_the_dm(scene: Scene) -> None:
    fake_discord = scene.fake_discord
    scene.llm_server.replies.append("Un secret ? Je t'écoute.")
    dm = fake_discord.dm_channel(scene.alice)
    await fake_discord.user_says(scene.alice, dm, "je peux te dire un secret ?")
    await fake_discord.wait_for_call("POST", f"/channels/{dm.id}/messages")
    await fake_discord.wait_for_text(dm, "Un secret ? Je t'écoute.")
    assert not _replies(fake_discord, scene.channel.id)


async def test_a_reply_to_the_bots_message_is_answered(scene: Scene) -> None:
    fake_discord, channel, alice = scene.fake_discord, scene.channel, scene.alice
    answers = iter(["Première réponse.", "Deuxième réponse."])
    scene.llm_server.handler = lambda request: "{}" if request.json_schema is not None else next(answers)
    await fake_discord.user_says(alice, channel, "salut", mention_bot=True)
    await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages")
    bots = [m for m in fake_discord.messages_in(channel) if m["author"]["id"] == str(fake_discord.bot_user.id)]
    # A reply pings its author by default, which is how its text reaches a bot without the
    # Message Content intent.
    await fake_discord.user_says(alice, channel, "et ensuite ?", reply_to=bots[-1])
    await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages", count=2)
    await fake_discord.wait_for_text(channel, "Deuxième réponse.")
    assert any(r.last_user.endswith("et ensuite ?") for r in scene.llm_server.chats if r.json_schema is None)


async def test_memories_answers_ephemerally_within_the_interaction_deadline(scene: Scene) -> None:
    interaction = await scene.fake_discord.run_command(scene.alice, scene.channel, "memories")
    path = f"/interactions/{interaction.id}/{interaction.token}/callback"
    calls = await scene.fake_discord.wait_for_call("POST", path)
    assert calls[0].status == 200
    assert calls[0].at - interaction.created < 3.0
    assert calls[0].json["type"] == 4
    assert calls[0].json["data"]["flags"] & EPHEMERAL
    assert interaction.responded


async def test_a_callback_after_three_seconds_gets_unknown_interaction(fake_discord: FakeDiscord) -> None:
    """The fake enforces Discord's deadline (checked here without the bot, by a direct call)."""
    import httpx

    fake_discord.commands[None] = [fake_discord.command_payload({"name": "ping", "description": "ping"}, None)]
    interaction = await fake_discord.run_command(ALICE, fake_discord.general, "ping")
    interaction.created = time.monotonic() - 3.5
    async with httpx.AsyncClient() as client:
        late = await client.post(
            f"{fake_discord.api_url}/interactions/{interaction.id}/{interaction.token}/callback",
            json={"type": 4, "data": {"content": "late"}},
            headers={"Authorization": f"Bot {fake_discord.token}"},
        )
    assert late.status_code == 404
    assert late.json() == {"message": "Unknown interaction", "code": 10062}
