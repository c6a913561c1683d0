"""Every write of the bot to a channel takes its turn of the channel's one pace, as Discord sees
it: the real bot process against the fake Discord, which records when each post and edit
arrived."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from cogs.utils.answering import EDIT_INTERVAL, split_message
from tests.discord_e2e.conftest import StartEcho
from tests.discord_e2e.test_characters import write_cast
from tests.discord_e2e.test_swipes_and_memory import CAT, buttons, until
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.discord.rest import EPHEMERAL
from tests.fakes.discord.state import Call
from tests.fakes.llm_server import FakeLLMServer, LLMRequest, Reply

# Over 2,000 characters: the reply ends in two messages.
LONG = " ".join(f"mot{n}" for n in range(450))


def bots_hooks(discord: FakeDiscord) -> list[str]:
    return [str(w.id) for w in discord.webhooks.values() if w.creator.id == discord.bot_user.id]


def channel_writes(discord: FakeDiscord, channel_id: int) -> list[Call]:
    """The bot's posts and edits of messages in the channel, as they arrived: as the bot, and
    through its webhooks (interaction responses are not channel writes)."""
    prefixes = (f"/channels/{channel_id}/messages", *(f"/webhooks/{hook}/" for hook in bots_hooks(discord)))
    return [c for c in discord.calls if c.path.startswith(prefixes) and c.method in ("POST", "PATCH")]


def speakers_messages(discord: FakeDiscord) -> list[dict[str, Any]]:
    """What the bot or its characters posted in #general, for everyone to see."""
    return [
        m
        for m in discord.messages_in(discord.general)
        if (m["author"]["id"] == str(discord.bot_user.id) or m.get("webhook_id") in bots_hooks(discord))
        and not int(m.get("flags") or 0) & EPHEMERAL
    ]


@pytest.mark.parametrize("voice", ["bot", "character"])
async def test_settle_receipt_overflow_and_stream_writes_share_the_channels_pace(
    voice: str, start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    """Alice writes again while her first reply still has its buttons: that reply settles (its
    buttons go), its reflection adds a memory (its receipt comes), and the new reply streams for
    a few seconds and ends in two messages. Every one of these writes is at least the pace
    apart from the one before, in the order they were asked for; as the bot, or as a character
    speaking through the channel's webhook."""
    fake_discord.enforce_channel_write_limit = True  # Discord's 5 writes per 5 s, 429 past them
    if voice == "bot":
        await start_echo(BURST_SECONDS="0")
    else:
        port, quay = (fake_discord.add_text_channel(fake_discord.guild, name) for name in ("port", "quai"))
        await start_echo(
            BURST_SECONDS="0", CHARACTERS_DIR=str(write_cast(tmp_path / "cast", fake_discord, port.id, quay.id))
        )

    def handler(request: LLMRequest) -> str | Reply:
        if request.json_schema is not None:
            learned = "Pixel" in request.last_user.split("The exchange:")[-1]
            return json.dumps({"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]} if learned else {})
        return "Pixel !" if "Pixel" in request.last_user else Reply(LONG, pace=0.008)  # ~3.6 s of stream

    llm_server.handler = handler
    general = fake_discord.general
    await fake_discord.user_says(ALICE, general, "j'ai un chat qui s'appelle Pixel", mention_bot=True)
    first = (await until(lambda: [m for m in speakers_messages(fake_discord) if buttons(m)]))[0]
    await fake_discord.user_says(ALICE, general, "raconte-moi une longue histoire", mention_bot=True)
    chunks = split_message(LONG)
    assert len(chunks) == 2
    await until(lambda: [b["label"] for b in buttons(first)] == ["🧠 1"], timeout=30)
    await until(lambda: [m["content"] for m in speakers_messages(fake_discord)][-2:] == chunks, timeout=30)

    writes = channel_writes(fake_discord, general.id)
    assert all(w.status == 200 for w in writes), [(w.method, w.path, w.status) for w in writes]
    gaps = [round(b.at - a.at, 3) for a, b in itertools.pairwise(writes)]
    assert min(gaps) >= EDIT_INTERVAL, list(zip([f"{w.method} {w.path}" for w in writes[1:]], gaps))

    # In order: the first reply's edits, the settle before the receipt; the new reply posted,
    # then edited as it streams, then its overflow.
    def on(message: dict[str, Any]) -> list[Call]:
        return [w for w in writes if w.path.endswith(f"/messages/{message['id']}")]

    settle_and_receipt = [w.json.get("components") for w in on(first)][-2:]
    assert settle_and_receipt[0] == [] and "🧠 1" in json.dumps(settle_and_receipt[1], ensure_ascii=False)
    second, overflow = [m for m in speakers_messages(fake_discord) if m["content"] in chunks]
    posts = [w for w in writes if w.method == "POST"]
    assert [p.json["content"] for p in posts[-1:]] == [chunks[1]] and overflow["content"] == chunks[1]
    streamed = on(second)
    assert streamed and all(w.at < posts[-1].at for w in streamed), "the overflow comes after the reply's last edit"
    assert posts[-2].json["content"] == LONG[: len(posts[-2].json["content"])], "the new reply is posted first"
    assert any(w.at > posts[-2].at for w in on(first)), "the settle or the receipt came while the new reply streamed"
