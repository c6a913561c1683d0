"""A runaway hidden reasoning streamed to the bot: how long the event loop is held, and how the
cost of a piece grows with the stream, against an idle loop measured in the same run.

Run from the repository root: `python bench/stream_reasoning.py`.

The scripted LLM server (tests/fakes/llm_server.py) streams `<think>` and then PIECES pieces of
PIECE_CHARS characters, never closing the block (a model looping in its reasoning), over real
HTTP on 127.0.0.1 to the real `LLMClient`, as fast as it reads them. Meanwhile a ticker asks the
event loop for a turn every TICK seconds: its longest wait is what another user's command waits
for (Discord gives 3 s). Printed: that longest wait idle (the baseline) and during the stream,
their ratio, and the CPU time per piece over the first and the last quarter of a stream, with
their ratio (1 when a piece costs the same however long the stream already is).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.clients.llm import LLMClient
from bot.errors import LLMError
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, Reply

PIECES = 4_000
PIECE_CHARS = 50
TICK = 0.005
CONVERSATION = [{"role": "user", "content": "Raconte."}]


async def longest_wait(stop: asyncio.Event) -> float:
    worst = 0.0
    while not stop.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(TICK)
        worst = max(worst, time.perf_counter() - asked - TICK)
    return worst


async def main() -> None:
    async with FakeLLMServer() as server, httpx.AsyncClient(trust_env=False) as http:
        llm = LLMClient(http, api="ollama", base_url=server.url)

        stop = asyncio.Event()
        ticker = asyncio.ensure_future(longest_wait(stop))
        await asyncio.sleep(1.0)
        stop.set()
        idle = await ticker

        piece_seen: list[float] = []

        async def shown(text: str) -> None:
            pass

        original = llm._stream_event

        def timed(event, path):  # type: ignore[no-untyped-def]
            piece_seen.append(time.process_time())
            return original(event, path)

        llm._stream_event = timed  # type: ignore[method-assign]
        server.replies.append(Reply("<think>" + f" {'r' * (PIECE_CHARS - 1)}" * PIECES))
        stop = asyncio.Event()
        ticker = asyncio.ensure_future(longest_wait(stop))
        started = time.perf_counter()
        outcome = "read to its end"
        try:
            await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=shown)
        except LLMError as exc:
            outcome = f"{type(exc).__name__}"
        elapsed = time.perf_counter() - started
        stop.set()
        busy = await ticker

    quarter = len(piece_seen) // 4
    first = (piece_seen[quarter] - piece_seen[0]) / quarter
    last = (piece_seen[-1] - piece_seen[-1 - quarter]) / quarter
    print(
        f"hidden stream: {PIECES:,} pieces of {PIECE_CHARS} characters ({PIECES * PIECE_CHARS:,} characters), "
        f"{elapsed:.2f} s, {outcome}"
    )
    print(
        f"longest wait of the event loop: idle {idle * 1000:.1f} ms (baseline), during the stream "
        f"{busy * 1000:.1f} ms, {busy / max(idle, 1e-4):.1f}x"
    )
    print(
        f"CPU per piece: first quarter {first * 1e6:.0f} µs, last quarter {last * 1e6:.0f} µs, "
        f"ratio last/first {last / first:.2f} (1.00: a piece costs the same however long the stream)"
    )


if __name__ == "__main__":
    asyncio.run(main())
