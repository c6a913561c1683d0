"""The burst bound: one person's quick messages are joined into one answer, at most
BURST_MAX_MESSAGES of them; the next message starts another burst, counted as another answer.
The cog over a real engine, real SQLite and the scripted LLM server."""

from __future__ import annotations

import asyncio

import pytest

from bot.app import Services
from cogs.utils.bursts import BURST_MAX_MESSAGES
from tests.cogs import ALICE, BOT_ID, fake_channel, fake_message, fake_user
from tests.cogs.test_conversation import make_cog, me, reply_requests
from tests.fakes.llm_server import FakeLLMServer


@pytest.mark.parametrize(
    "settings_overrides", [{"burst_seconds": 0.3, "user_rate_limit_messages": 2, "user_rate_limit_seconds": 30.0}]
)
async def test_a_burst_holds_at_most_its_bound_and_the_next_message_is_another_answer(
    services_with: Services, llm_server: FakeLLMServer
) -> None:
    cog = make_cog(services_with)
    channel = fake_channel()
    alice = fake_user(ALICE, "Alice")
    count = BURST_MAX_MESSAGES + 5
    messages = [
        fake_message(f"<@{BOT_ID}> mot {n}", author=alice, channel=channel, mentions=[me()]) for n in range(count)
    ]
    for message in messages:
        await cog.on_message(message)
    for _ in range(200):
        if len(channel.sent) == 2:
            break
        await asyncio.sleep(0.05)
    asked = sorted((r.last_user for r in reply_requests(llm_server)), key=len, reverse=True)
    assert asked == [
        "Alice: " + "\n".join(f"mot {n}" for n in range(BURST_MAX_MESSAGES)),
        "Alice: " + "\n".join(f"mot {n}" for n in range(BURST_MAX_MESSAGES, count)),
    ]
    assert not any(m.add_reaction.await_count for m in messages), "two answers: within the limit of 2"
    assert len(channel.sent) == 2
