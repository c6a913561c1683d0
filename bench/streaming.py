"""Streaming replies as the user sees them: time to the first visible text and edits per second,
next to the time to a whole reply with streaming off, in the same run.

Run from the repository root: `python bench/streaming.py`.

The real bot (`python -m bot`) runs against the tests' fake Discord (tests/fakes/discord) and
the scripted LLM server: PROMPT_SECONDS before the first word, then WORDS words, one every PACE
seconds (a local 7B model on a modest GPU writes about 25 words a second); asked without
streaming, it answers the whole text after the same total time. Timings are taken from the fake
Discord's record of the bot's REST calls: from the user's message being dispatched to the first
POST of the reply (first visible text), to the edit that completes it, and the edits between.
Figures are medians over ROUNDS messages, each from a different user.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools

from cogs.utils.answering import EDIT_INTERVAL
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord.echo_process import start_echo_process
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest, Reply

WORDS = 120
PACE = 0.04
PROMPT_SECONDS = 0.5  # the model reads the prompt before its first word
ROUNDS = 3
REPLY = " ".join(f"mot{n}" for n in range(WORDS))


def answer(request: LLMRequest) -> str | Reply:
    if request.json_schema is not None:
        return "{}"
    if (request.body or {}).get("stream"):
        return Reply(REPLY, pace=PACE, delay=PROMPT_SECONDS)
    return Reply(REPLY, delay=PROMPT_SECONDS + (WORDS - 1) * PACE)


async def one_round(discord: FakeDiscord, llm: FakeLLMServer, n: int) -> dict[str, float]:
    user = discord.add_user(f"user{n}-{time.monotonic_ns()}", guild=discord.guild)
    channel = discord.add_text_channel(discord.guild, f"bench-{n}-{time.monotonic_ns()}")
    llm.handler = answer
    sent = time.monotonic()
    await discord.user_says(user, channel, "raconte", mention_bot=True)
    prefix = f"/channels/{channel.id}/messages"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # Writes of the text only: the swipe buttons are added by an edit of their own afterwards.
        writes = [
            c
            for c in discord.calls
            if c.path.startswith(prefix)
            and c.method in ("POST", "PATCH")
            and c.status == 200
            and (c.json or {}).get("content") is not None
        ]
        done = [i for i, w in enumerate(writes) if w.json["content"] == REPLY]
        if done:
            writes = writes[: done[0] + 1]
            break
        await asyncio.sleep(0.02)
    else:
        raise TimeoutError("the reply was never completed")
    first, last = writes[0], writes[-1]
    edits = [w for w in writes if w.method == "PATCH"]
    gaps = [b.at - a.at for a, b in itertools.pairwise(writes)]
    return {
        "first": first.at - sent,
        "complete": last.at - sent,
        "edits": len(edits),
        "edits_per_s": len(edits) / (last.at - first.at) if last.at > first.at else 0.0,
        "min_gap": min(gaps) if gaps else float("nan"),
    }


async def run(stream: bool, discord: FakeDiscord, llm: FakeLLMServer, folder: Path) -> list[dict[str, float]]:
    echo = await start_echo_process(
        discord,
        llm.url,
        FAKE_MODEL,
        folder,
        name=f"stream-{stream}",
        STREAM_REPLIES=str(stream).lower(),
        BURST_SECONDS="0",
        USER_RATE_LIMIT_MESSAGES="0",
    )
    try:
        return [await one_round(discord, llm, n) for n in range(ROUNDS)]
    finally:
        await echo.stop()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeLLMServer() as llm:
            async with FakeDiscord() as discord:
                streamed = await run(True, discord, llm, Path(tmp))
            async with FakeDiscord() as discord:
                whole = await run(False, discord, llm, Path(tmp))

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    generation = PROMPT_SECONDS + (WORDS - 1) * PACE
    print(
        f"streaming: {PROMPT_SECONDS:g} s to the first word, then {WORDS} words one every {PACE * 1000:.0f} ms "
        f"({generation:.1f} s in all); median of {ROUNDS} messages, real bot against the fake Discord"
    )
    print(f"  {'':32} {'streamed':>10} {'whole':>10}")
    print(f"  {'time to first visible text (s)':32} {med(streamed, 'first'):>10.2f} {med(whole, 'first'):>10.2f}")
    print(f"  {'time to complete reply (s)':32} {med(streamed, 'complete'):>10.2f} {med(whole, 'complete'):>10.2f}")
    print(f"  {'edits per reply':32} {med(streamed, 'edits'):>10.0f} {med(whole, 'edits'):>10.0f}")
    print(f"  {'edits per second':32} {med(streamed, 'edits_per_s'):>10.2f} {med(whole, 'edits_per_s'):>10.2f}")
    print(f"  {'shortest gap between writes (s)':32} {min(r['min_gap'] for r in streamed):>10.2f} {'—':>10}")
    print(f"  edit interval per channel: {EDIT_INTERVAL} s (at most {1 / EDIT_INTERVAL:.2f} edits per second)")


if __name__ == "__main__":
    asyncio.run(main())
