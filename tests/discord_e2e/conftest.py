"""Fixtures for the tests that see what Discord sees.

A test with its own bot: `fake_discord` is a started `FakeDiscord`; `start_echo(**settings)`
runs the real bot, `python -m bot`, as a subprocess against it and the scripted LLM server
(`llm_server`), with a temporary database and the local embedder, and waits until it has
identified on the gateway; `echo` is one started with the defaults but BURST_SECONDS=0 (no test
waits for a burst to close unless it is about bursts). Settings are given as environment
variables (`start_echo(STREAM_REPLIES="false")`). The process is stopped with SIGTERM at
teardown, and its log is printed when a test fails.

A test on the bot its module shares: `scene` is that bot (started on first use with `echo`'s
settings, answers kept open longer: SHARED_SETTINGS; stopped after the last test on it), its
fake Discord and LLM server, a channel created for the test and two fresh people in it, Alice
and Bob, whose ids the bot's database has never seen. The fakes' records (REST calls, LLM
requests) and the LLM's script start empty; the next test starts once the LLM server has been
quiet for QUIET_SECONDS. A test reads its own channel's calls and messages: the bot may still
edit an earlier test's message in its channel. A test that needs a restart, a fresh database or
counts over the whole process, or that stops or kills the bot, keeps its own (`start_echo`,
`echo`); so does one whose settings no other test of its module shares.

Other settings for some of a module's tests: marked `shared_settings(**settings)` (each test, or
the whole module through `pytestmark`), they share a bot of theirs with those settings over
SHARED_SETTINGS, e.g. `@pytest.mark.shared_settings(SETTLE_SECONDS="0")` for the tests that read
an answer's reflection at once (no swipe buttons; the receipt comes right after the reply). A
module's tests of one setting run one after the other, and the bot of the group before is
stopped, with its fakes, when the next group starts: one shared bot at a time, each one start,
so a setting that only one test of a module has saves nothing. With SETTLE_SECONDS=0 a test's
reflection asks the model right after its reply, so within the quiet wait: the next test neither
sees it among its requests nor answers it with its script, and what it writes is the test's own
people's.

A test on a shared bot runs in its module's event loop, where that bot's fakes live, and a
test with its own bot in a loop of its own. A module's tests on its shared bots run first, one
after the other: the shared fakes answer only while their loop runs, and discord.py reconnects
after a minute without an answer from the gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
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
# parts, or at once with SETTLE_SECONDS=0) reaches the model within this time.
QUIET_SECONDS = 0.5


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "shared_settings(**settings): these tests' shared bot (`scene`) has these settings over SHARED_SETTINGS",
    )


def shares_the_bot(item: pytest.Item) -> bool:
    return item.path.is_relative_to(HERE) and "scene" in getattr(item, "fixturenames", ())


def shared_settings(node: pytest.Item) -> dict[str, str]:
    marker = node.get_closest_marker("shared_settings")
    return SHARED_SETTINGS | (marker.kwargs if marker is not None else {})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if shares_the_bot(item) and pytest_asyncio.is_async_test(item):
            # First, before the plain mark that asyncio_mode = "auto" gave it.
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)
    first: dict[Path, int] = {}
    group: dict[pytest.Item, int] = {}
    groups: dict[tuple[Path, tuple[tuple[str, str], ...]], int] = {}
    for n, item in enumerate(items):
        first.setdefault(item.path, n)
        if shares_the_bot(item):
            group[item] = groups.setdefault((item.path, tuple(sorted(shared_settings(item).items()))), n)
        else:
            group[item] = len(items)
    # Stable: the modules keep their order, a module's groups on a shared bot the order of their
    # first tests, and the tests of a group (or with a bot of their own) theirs.
    items.sort(key=lambda item: (first[item.path], group[item]))


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

    async def start(*, clock_file: Path | None = None, sessions: int = 1, **settings: str) -> EchoProcess:
        echo = await start_echo_process(
            fake_discord,
            llm_server.url,
            FAKE_MODEL,
            tmp_path,
            name=f"echo-{len(started)}",
            clock_file=clock_file,
            sessions=sessions,
            **settings,
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
    settings: dict[str, str]
    echo: EchoProcess
    fake_discord: FakeDiscord
    llm_server: FakeLLMServer
    # Stops the bot, then its fakes.
    stack: AsyncExitStack


class SharedEchoes:
    """A module's shared bots, one at a time: a test that asks for other settings than the
    running bot's stops it (its tests are over: the tests of one setting run together)."""

    def __init__(self, folders: pytest.TempPathFactory) -> None:
        self.folders = folders
        self.running: SharedEcho | None = None

    async def get(self, settings: dict[str, str]) -> SharedEcho:
        if self.running is not None and self.running.settings == settings:
            return self.running
        await self.stop()
        async with AsyncExitStack() as stack:
            discord = await stack.enter_async_context(FakeDiscord(heartbeat_interval_ms=HEARTBEAT_MS))
            llm_server = await stack.enter_async_context(FakeLLMServer())
            folder = self.folders.mktemp("shared-echo")
            echo = await start_echo_process(discord, llm_server.url, FAKE_MODEL, folder, **settings)
            stack.push_async_callback(echo.stop)
            self.running = SharedEcho(settings, echo, discord, llm_server, stack.pop_all())
        return self.running

    async def stop(self) -> None:
        running, self.running = self.running, None
        if running is not None:
            await running.stack.aclose()


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
async def shared_echoes(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SharedEchoes]:
    echoes = SharedEchoes(tmp_path_factory)
    try:
        yield echoes
    finally:
        await echoes.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def scene(shared_echoes: SharedEchoes, request: pytest.FixtureRequest) -> AsyncIterator[Scene]:
    shared = await shared_echoes.get(shared_settings(request.node))
    echo, discord, llm_server = shared.echo, shared.fake_discord, shared.llm_server
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
