"""Fixtures for the tests that see what Discord sees.

`fake_discord` is a started `FakeDiscord`; `start_echo(**settings)` runs the real bot,
`python -m bot`, as a subprocess against it and the scripted LLM server (`llm_server`), with a
temporary database and the local embedder, and waits until it has identified on the gateway;
`echo` is one started with the defaults but BURST_SECONDS=0 (no test waits for a burst to
close unless it is about bursts). Settings are given as environment variables
(`start_echo(STREAM_REPLIES="false")`). The process is stopped with SIGTERM at teardown, and
its log is printed when a test fails.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.discord import FakeDiscord
from tests.fakes.discord.echo_process import EchoProcess, start_echo_process
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer

StartEcho = Callable[..., Awaitable[EchoProcess]]


@pytest_asyncio.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    # A short heartbeat, so that a test's few seconds see heartbeats and their ACKs.
    async with FakeDiscord(heartbeat_interval_ms=1000) as server:
        yield server


@pytest_asyncio.fixture
async def start_echo(
    fake_discord: FakeDiscord, llm_server: FakeLLMServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[StartEcho]:
    started: list[EchoProcess] = []

    async def start(**settings: str) -> EchoProcess:
        echo = await start_echo_process(
            fake_discord, llm_server.url, FAKE_MODEL, tmp_path, name=f"echo-{len(started)}", **settings
        )
        started.append(echo)
        return echo

    yield start

    for echo in started:
        await echo.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for echo in started:
            print(f"----- log of the bot ({echo.log_path}) -----\n{echo.log()}")


@pytest_asyncio.fixture
async def echo(start_echo: StartEcho) -> EchoProcess:
    return await start_echo(BURST_SECONDS="0")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report
