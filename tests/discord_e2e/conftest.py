"""Fixtures for the tests that see what Discord sees.

A test with its own bot: `fake_discord` is a started `FakeDiscord`; `start_echo(**settings)`
runs the real bot, `python -m bot`, as a subprocess against it and the scripted LLM server
(`llm_server`), with a temporary database and the local embedder, and waits until it has
identified on the gateway; `echo` is one started with the defaults but BURST_SECONDS=0 (no test
waits for a burst to close unless it is about bursts). Settings are given as environment
variables (`start_echo(STREAM_REPLIES="false")`). The process is stopped with SIGTERM at
teardown, and its log is printed when a test fails.

A test on the bot its module shares: `scene` is that bot (started on first use with `echo`'s
settings, answers kept open longer: SHARED_SETTINGS; stopped after the module's last test), its
fake Discord and LLM server, a channel created for the test and two fresh people in it, Alice
and Bob, whose ids the bot's database has never seen. The fakes' records (REST calls, LLM
requests) and the LLM's script start empty; the next test starts once the LLM server has been
quiet for QUIET_SECONDS. A test reads its own channel's calls and messages: the bot may still
edit an earlier test's message in its channel. A test that needs other settings, a restart, a
fresh database or counts over the whole process, or that stops or kills the bot, keeps its own
(`start_echo`, `echo`).

A test on the shared bot runs in its module's event loop, where that bot's fakes live, and a
test with its own bot in a loop of its own. A module's tests on its shared bot run first, one
after the other: the shared fakes answer only while their loop runs, and discord.py reconnects
after a minute without an answer from the gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from tests.fakes.discord import FakeDiscord
from tests.fakes.discord.echo_process import EchoProcess, start_echo_process
from tests.fakes.discord.state import Channel, User
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer

StartEcho = Callable[..., Awaitable[EchoProcess]]

HERE = Path(__file__).parent
# A short heartbeat, so that a test's few seconds see heartbeats and their ACKs.
HEARTBEAT_MS = 1000
ECHO_SETTINGS = {"BURST_SECONDS": "0"}
# An answer a test leaves open would settle after SETTLE_SECONDS (180 by default) and ask the
# model for its reflection, in whichever test of the module runs then: the shared bot keeps it
# open for longer than a module runs. No test waits for an answer to settle by itself.
SHARED_SETTINGS = ECHO_SETTINGS | {"SETTLE_SECONDS": "3600"}
# After a test, how long the LLM server must go unasked before the next test starts: a
# reflection the test set going (its answer settled by a later message, or posted in two
# parts) reaches the model within this time.
QUIET_SECONDS = 0.5


def shares_the_bot(item: pytest.Item) -> bool:
    return item.path.is_relative_to(HERE) and "scene" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if shares_the_bot(item) and pytest_asyncio.is_async_test(item):
            # First, before the plain mark that asyncio_mode = "auto" gave it.
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)
    first = {}
    for n, item in enumerate(items):
        first.setdefault(item.path, n)
    # Stable: the modules keep their order, and so do the tests of each kind within a module.
    items.sort(key=lambda item: (first[item.path], not shares_the_bot(item)))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report


def failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "rep_call", None)
    return report is not None and report.failed


# --- a bot of the test's own ---------------------------------------------------------------


@pytest_asyncio.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(heartbeat_interval_ms=HEARTBEAT_MS) as server:
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
    if failed(request):
        for echo in started:
            print(f"----- log of the bot ({echo.log_path}) -----\n{echo.log()}")


@pytest_asyncio.fixture
async def echo(start_echo: StartEcho) -> EchoProcess:
    return await start_echo(**ECHO_SETTINGS)


# --- the bot a module shares ---------------------------------------------------------------


@dataclass(frozen=True)
class SharedEcho:
    echo: EchoProcess
    fake_discord: FakeDiscord
    llm_server: FakeLLMServer


@dataclass(frozen=True)
class Scene:
    """One test's part of the shared bot: the bot, the fakes, and the test's channel and people."""

    echo: EchoProcess
    fake_discord: FakeDiscord
    llm_server: FakeLLMServer
    channel: Channel
    alice: User
    bob: User


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_echo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SharedEcho]:
    async with FakeDiscord(heartbeat_interval_ms=HEARTBEAT_MS) as discord, FakeLLMServer() as llm_server:
        folder = tmp_path_factory.mktemp("shared-echo")
        echo = await start_echo_process(discord, llm_server.url, FAKE_MODEL, folder, **SHARED_SETTINGS)
        try:
            yield SharedEcho(echo, discord, llm_server)
        finally:
            await echo.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def scene(shared_echo: SharedEcho, request: pytest.FixtureRequest) -> AsyncIterator[Scene]:
    echo, discord, llm_server = shared_echo.echo, shared_echo.fake_discord, shared_echo.llm_server
    if echo.process.returncode is not None:
        raise RuntimeError(f"the module's bot exited with {echo.process.returncode}:\n{echo.log()}")
    discord.forget_records()
    llm_server.reset()
    guild = discord.guild
    alice, bob = (
        discord.add_user(name.lower(), guild=guild, global_name=name, roles=[discord.member_role])
        for name in ("Alice", "Bob")
    )
    channel = await discord.create_text_channel(guild, "general")
    log_start = echo.log_size()
    yield Scene(echo, discord, llm_server, channel, alice, bob)
    try:
        await llm_server.wait_quiet(QUIET_SECONDS)
    finally:
        if failed(request):
            print(f"----- log of the module's bot during the test ({echo.log_path}) -----\n{echo.log(log_start)}")
