"""Streaming, bursts and images, seen from Discord: the REST calls the real bot makes."""

from __future__ import annotations

import base64
import sqlite3

import pytest

from bot.engine import MAX_REPLY_CHARS
from bot.i18n import use_locale
from bot.presenting import cut_note

# In the character's language (Écho's): a message tells no Discord language.
with use_locale("fr"):
    CUT_NOTE = cut_note()
import itertools

from bot.memory.quoting import quote_block
from cogs.utils.answering import EDIT_INTERVAL, split_message
from tests.discord_e2e.conftest import Scene, StartEcho
from tests.fakes.discord import ALICE, BOB, FakeDiscord
from tests.fakes.discord.state import Call
from tests.fakes.llm_server import FakeLLMServer, Reply

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 200


def _writes(discord: FakeDiscord, channel_id: int) -> list[Call]:
    """The bot's posts and edits of messages in a channel, in order."""
    prefix = f"/channels/{channel_id}/messages"
    return [c for c in discord.calls if c.path.startswith(prefix) and c.method in ("POST", "PATCH") and c.status == 200]


def _reply_calls(server: FakeLLMServer) -> list:
    return [r for r in server.chats if r.json_schema is None]


def _answer_only(reply: Reply):  # type: ignore[no-untyped-def]
    return lambda request: "{}" if request.json_schema is not None else reply


async def test_a_streamed_reply_is_posted_early_then_edited_at_most_once_per_interval(scene: Scene) -> None:
    fake_discord, llm_server, channel = scene.fake_discord, scene.llm_server, scene.channel
    words = " ".join(f"mot{n}" for n in range(40))
    llm_server.handler = _answer_only(Reply(words, pace=0.1))  # ~4 s of streaming
    await fake_discord.user_says(scene.alice, channel, "raconte", mention_bot=True)
    await fake_discord.wait_for_call(
        "PATCH", f"/channels/{channel.id}/messages/", where=lambda c: c.json.get("content") == words, timeout=20
    )
    writes = _writes(fake_discord, channel.id)
    typing = fake_discord.calls_to("POST", f"/channels/{channel.id}/typing")
    assert typing and typing[0].at < writes[0].at, "typing is shown before the first text"
    last_word_at = llm_server.streamed[-1][0]
    assert writes[0].method == "POST" and writes[0].at < last_word_at - 1.0, "the text shows while it is written"
    assert len([w for w in writes if w.method == "PATCH"]) >= 2
    gaps = [b.at - a.at for a, b in itertools.pairwise(writes)]
    assert min(gaps) >= EDIT_INTERVAL, gaps
    shown = [w.json["content"] for w in writes]
    assert all(words.startswith(text) for text in shown), "each edit shows a prefix of the answer"
    assert len({w.path for w in writes if w.method == "PATCH"}) == 1, "one message is edited"


async def test_a_stream_that_dies_keeps_what_arrived_says_so_and_saves_it(scene: Scene) -> None:
    fake_discord, channel = scene.fake_discord, scene.channel
    scene.llm_server.handler = _answer_only(Reply("Il était une fois un dragon très gentil", pace=0.05, die_after=4))
    await fake_discord.user_says(scene.alice, channel, "une histoire ?", mention_bot=True)
    calls = await fake_discord.wait_for_call(
        "PATCH",
        f"/channels/{channel.id}/messages/",
        where=lambda c: CUT_NOTE in (c.json.get("content") or ""),
        timeout=20,
    )
    assert calls[-1].json["content"] == f"Il était une fois\n\n{CUT_NOTE}"
    rows = (
        sqlite3.connect(scene.echo.database_path)
        .execute("SELECT user_message, reply FROM exchanges WHERE user_id = ?", (str(scene.alice.id),))
        .fetchall()
    )
    assert rows == [("une histoire ?", "Il était une fois")]


async def test_a_stream_that_dies_before_any_text_gets_the_apology(scene: Scene) -> None:
    fake_discord, channel = scene.fake_discord, scene.channel
    scene.llm_server.handler = _answer_only(Reply("jamais dit", die_after=0))
    await fake_discord.user_says(scene.alice, channel, "allô ?", mention_bot=True)
    calls = await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages")
    # In the character's language (Écho's French): Alice told no Discord language by a command.
    assert "Je n'arrive pas à joindre mon modèle de langue" in calls[0].json["content"]
    assert not fake_discord.calls_to("PATCH", f"/channels/{channel.id}/messages/")


async def test_a_long_streamed_reply_ends_split_exactly_as_a_whole_one(scene: Scene) -> None:
    fake_discord, channel = scene.fake_discord, scene.channel
    long_reply = "\n\n".join(f"Paragraphe {n} : " + "bla " * 150 for n in range(5))  # ~3,100 chars
    scene.llm_server.handler = _answer_only(Reply(long_reply, pace=0.002))
    await fake_discord.user_says(scene.alice, channel, "parle longtemps", mention_bot=True)
    chunks = split_message(long_reply)
    assert len(chunks) == 2
    await fake_discord.wait_for_call(
        "POST", f"/channels/{channel.id}/messages", where=lambda c: c.json.get("content") == chunks[1], timeout=20
    )
    bots = [m for m in fake_discord.messages_in(channel) if m["author"]["id"] == str(fake_discord.bot_user.id)]
    assert [m["content"] for m in bots] == chunks
    assert "message_reference" in bots[0] and "message_reference" not in bots[1]


async def test_with_streaming_off_the_reply_is_posted_once_whole(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(STREAM_REPLIES="false", BURST_SECONDS="0")
    llm_server.handler = _answer_only(Reply("un deux trois quatre", pace=0.05))
    channel = fake_discord.general
    await fake_discord.user_says(ALICE, channel, "compte", mention_bot=True)
    calls = await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages")
    assert calls[0].json["content"] == "un deux trois quatre"
    assert llm_server.chats[0].body["stream"] is False  # type: ignore[index]
    assert not fake_discord.calls_to("PATCH", f"/channels/{channel.id}/messages/")


async def test_a_burst_of_messages_is_answered_once_as_one_turn(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(BURST_SECONDS="1.5")
    channel = fake_discord.general
    for text in ("attends", "je réfléchis", "voilà : j'aime les chats"):
        await fake_discord.user_says(ALICE, channel, text, mention_bot=True)
    await fake_discord.user_says(BOB, channel, "moi aussi", mention_bot=True)
    calls = await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages", count=2, timeout=20)
    asked = [r.last_user for r in _reply_calls(llm_server)]
    assert sorted(asked) == ["Alice: attends\nje réfléchis\nvoilà : j'aime les chats", "Bob: moi aussi"]
    last_alice = [m for m in fake_discord.messages_in(channel) if m["author"]["id"] == str(ALICE.id)][-1]
    references = {str(c.json["message_reference"]["message_id"]) for c in calls}
    assert last_alice["id"] in references, "the answer replies to the last message of the burst"


async def test_an_image_reaches_a_vision_model_and_the_reflection_sees_only_its_mark(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(LLM_VISION="true", BURST_SECONDS="0", SETTLE_SECONDS="0")
    channel = fake_discord.general
    image = fake_discord.add_attachment(channel, "chat.png", PNG, "image/png")
    await fake_discord.user_says(ALICE, channel, "mon chat", mention_bot=True, attachments=[image])
    await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages")
    sent = _reply_calls(llm_server)[0].messages[-1]
    assert sent["images"] == [base64.b64encode(PNG).decode()]
    assert sent["content"].endswith("mon chat\n[image: chat.png]")
    reflection = await _reflection_request(llm_server)
    assert all("images" not in m for m in reflection.messages)
    # Quoted like every message in the reflection prompt: brackets cannot open a marker there.
    assert quote_block("[image: chat.png]") in reflection.messages[-1]["content"]
    rows = sqlite3.connect(echo.database_path).execute("SELECT user_message FROM exchanges").fetchall()
    assert rows == [("mon chat\n[image: chat.png]",)]


async def test_an_image_too_large_is_named_not_sent_nor_downloaded(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(LLM_VISION="true", LLM_MAX_IMAGE_BYTES="100", BURST_SECONDS="0")
    channel = fake_discord.general
    image = fake_discord.add_attachment(channel, "grand.png", PNG, "image/png")
    await fake_discord.user_says(ALICE, channel, "", mention_bot=True, attachments=[image])
    calls = await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages")
    assert calls[0].status == 200
    sent = _reply_calls(llm_server)[0].messages[-1]
    assert "images" not in sent
    assert sent["content"] == "Alice: [image: grand.png — too large]"
    assert fake_discord.downloads == []


async def test_without_vision_an_image_is_only_named(scene: Scene) -> None:
    fake_discord, channel = scene.fake_discord, scene.channel
    image = fake_discord.add_attachment(channel, "chat.png", PNG, "image/png")
    await fake_discord.user_says(scene.alice, channel, "regarde", mention_bot=True, attachments=[image])
    await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages")
    sent = _reply_calls(scene.llm_server)[0].messages[-1]
    assert "images" not in sent and sent["content"] == "Alice: regarde\n[image: chat.png]"
    assert fake_discord.downloads == []


async def _reflection_request(server: FakeLLMServer):  # type: ignore[no-untyped-def]
    import asyncio

    for _ in range(100):
        found = [r for r in server.chats if r.json_schema is not None]
        if found:
            return found[0]
        await asyncio.sleep(0.1)
    raise AssertionError("no reflection call")


async def test_a_runaway_stream_is_stopped_at_the_reply_bound_not_read_to_the_end(scene: Scene) -> None:
    fake_discord, llm_server, channel = scene.fake_discord, scene.llm_server, scene.channel
    words = 1500  # 6,000 characters, past MAX_REPLY_CHARS
    llm_server.handler = _answer_only(Reply("bla " * words, pace=0.004))
    await fake_discord.user_says(scene.alice, channel, "encore", mention_bot=True)
    await fake_discord.wait_for_call(
        "POST",
        f"/channels/{channel.id}/messages",
        where=lambda c: (c.json.get("content") or "").endswith("…"),
        timeout=30,
    )
    bots = [m for m in fake_discord.messages_in(channel) if m["author"]["id"] == str(fake_discord.bot_user.id)]
    assert 2 <= len(bots) <= 3
    assert sum(len(m["content"]) for m in bots) <= MAX_REPLY_CHARS
    assert len(llm_server.streamed) < words, "the stream was closed once the reply was long enough"


async def test_an_openai_compatible_server_streams_through_server_sent_events(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(LLM_API="openai", BURST_SECONDS="0")
    answer = "Salut ! Je t'écoute, raconte-moi tout."
    llm_server.handler = _answer_only(Reply(answer, pace=0.3))
    channel = fake_discord.general
    await fake_discord.user_says(ALICE, channel, "coucou", mention_bot=True)
    await fake_discord.wait_for_call(
        "PATCH", f"/channels/{channel.id}/messages/", where=lambda c: c.json.get("content") == answer
    )
    request = _reply_calls(llm_server)[0]
    assert request.path == "/v1/chat/completions"
    assert request.body is not None and request.body["stream_options"] == {"include_usage": True}
    first = _writes(fake_discord, channel.id)[0]
    assert first.method == "POST" and first.json["content"] != answer, "the text showed before it was complete"


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_every_call_of_a_turn_tells_ollama_the_same_context_and_to_keep_the_model_loaded(scene: Scene) -> None:
    """A num_ctx that changes between two calls makes Ollama reload the model; without
    keep_alive, it unloads after 5 idle minutes and the next person waits for the reload."""
    fake_discord, llm_server, channel = scene.fake_discord, scene.llm_server, scene.channel
    llm_server.handler = lambda request: '{"memories": []}' if request.json_schema is not None else "Noté."
    await fake_discord.user_says(scene.alice, channel, "Je suis infirmière de nuit.", mention_bot=True)
    await fake_discord.wait_for_text(channel, "Noté.")
    await llm_server.wait_quiet(0.5)
    calls = llm_server.chats
    assert {r.json_schema is None for r in calls} == {True, False}, "the reply and its reflection"
    assert {(r.body or {}).get("options", {}).get("num_ctx") for r in calls} == {8192}
    assert {(r.body or {}).get("keep_alive") for r in calls} == {"30m"}
