"""The per-channel pacer of streamed edits: one write per interval per channel, counted from
the end of the previous write; channels do not wait for each other."""

from __future__ import annotations

import asyncio
import time

from cogs.utils.answering import ChannelPacer


async def test_writes_in_one_channel_are_an_interval_apart_from_the_previous_end() -> None:
    pacer = ChannelPacer(0.2)
    starts: list[float] = []
    ends: list[float] = []

    async def write(channel: int, duration: float) -> None:
        async with pacer.slot(channel):
            starts.append(time.monotonic())
            await asyncio.sleep(duration)
            ends.append(time.monotonic())

    await asyncio.gather(write(1, 0.1), write(1, 0.0), write(1, 0.0))
    assert starts[1] - ends[0] >= 0.2 - 0.005
    assert starts[2] - ends[1] >= 0.2 - 0.005


async def test_channels_are_paced_separately_and_a_skipped_slot_costs_nothing() -> None:
    pacer = ChannelPacer(0.5)
    async with pacer.slot(1):
        pass
    began = time.monotonic()
    async with pacer.slot(2):
        pass
    assert time.monotonic() - began < 0.1, "another channel does not wait"
    async with pacer.slot(3) as slot:
        slot.skip()
    began = time.monotonic()
    async with pacer.slot(3):
        pass
    assert time.monotonic() - began < 0.1, "nothing was written in channel 3 before"
    began = time.monotonic()
    async with pacer.slot(1):
        pass
    assert time.monotonic() - began >= 0.3
