"""Fixtures for the tests that see what Discord sees.

`fake_discord` is a started `FakeDiscord`; `start_echo(**settings)` runs the real bot,
`python -m bot`, as a subprocess against it and the scripted LLM server (`llm_server`), with a
temporary database and the local embedder, and waits until it has identified on the gateway;
`echo` is one started with the defaults. Settings are given as environment variables
(`start_echo(STREAM_REPLIES="false")`). The process is stopped with SIGTERM at teardown, and
its log is printed when a test fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from bot.config import Settings, env_var
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0


@dataclass
class EchoProcess:
    process: asyncio.subprocess.Process
    log_path: Path
    database_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


StartEcho = Callable[..., Awaitable[EchoProcess]]


@pytest_asyncio.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        yield server


def _base_environment() -> dict[str, str]:
    """This process's environment without any of the bot's settings (a developer's shell may
    have some), so a test runs with exactly the settings it gives."""
    settings = {env_var(name) for name in Settings.model_fields}
    return {k: v for k, v in os.environ.items() if k.upper() not in settings}


@pytest_asyncio.fixture
async def start_echo(
    fake_discord: FakeDiscord, llm_server: FakeLLMServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[StartEcho]:
    started: list[EchoProcess] = []

    async def start(**settings: str) -> EchoProcess:
        database = tmp_path / f"echo-{len(started)}.sqlite3"
        env = _base_environment() | {
            "PYTHONPATH": str(REPO),
            "DISCORD_TOKEN": fake_discord.token,
            "DISCORD_API_URL": fake_discord.api_url,
            "DEV_GUILD_ID": str(fake_discord.guild.id),
            "LLM_API": "ollama",
            "LLM_BASE_URL": llm_server.url,
            "LLM_MODEL": FAKE_MODEL,
            "EMBEDDINGS": "local",
            "DATABASE_PATH": str(database),
            "LOG_LEVEL": "INFO",
        } | settings
        log_path = tmp_path / f"echo-{len(started)}.log"
        with log_path.open("wb") as log_file:
            # cwd is the temporary folder: no developer's .env is read.
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", cwd=tmp_path, env=env, stdout=log_file, stderr=asyncio.subprocess.STDOUT
            )
        echo = EchoProcess(process, log_path, database)
        started.append(echo)
        identified = asyncio.ensure_future(fake_discord.wait_identified(START_TIMEOUT))
        exited = asyncio.ensure_future(process.wait())
        await asyncio.wait([identified, exited], return_when=asyncio.FIRST_COMPLETED)
        if not identified.done():
            identified.cancel()
            raise RuntimeError(f"the bot exited with {process.returncode} before connecting:\n{echo.log()}")
        exited.cancel()
        identified.result()
        return echo

    yield start

    for echo in started:
        if echo.process.returncode is None:
            echo.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(echo.process.wait(), 15)
            except TimeoutError:
                echo.process.kill()
                await echo.process.wait()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for echo in started:
            print(f"----- log of the bot ({echo.log_path}) -----\n{echo.log()}")


@pytest_asyncio.fixture
async def echo(start_echo: StartEcho) -> EchoProcess:
    return await start_echo()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report
