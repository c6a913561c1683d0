"""Runs the real bot, `python -m bot`, as a subprocess against a `FakeDiscord` and the scripted
LLM server: a temporary database, the local embedder, and exactly the settings given (none is
inherited from the caller's environment, and no .env is read)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from bot.config import setting_names
from tests.fakes.discord.server import FakeDiscord

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 60.0


@dataclass
class EchoProcess:
    process: asyncio.subprocess.Process
    log_path: Path
    database_path: Path

    def log(self, start: int = 0) -> str:
        """The log from byte `start` on (`log_size()` before a test: what the bot wrote during it)."""
        with self.log_path.open("rb") as log:
            log.seek(start)
            return log.read().decode(errors="replace")

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    async def stop(self) -> None:
        """SIGTERM, as `docker stop` sends it; killed if it does not stop within 15 s."""
        if self.process.returncode is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 15)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


def _base_environment() -> dict[str, str]:
    """This process's environment without any of the bot's settings (a developer's shell may
    have some), so the bot runs with exactly the settings given."""
    settings = set(setting_names())
    return {k: v for k, v in os.environ.items() if k.upper() not in settings}


async def start_echo_process(
    discord: FakeDiscord,
    llm_url: str,
    model: str,
    folder: Path,
    name: str = "echo",
    *,
    clock_file: Path | None = None,
    sessions: int = 1,
    **settings: str,
) -> EchoProcess:
    """Start the bot and wait until it has identified on the fake gateway (until `sessions`
    bots have, when others are connected). With `clock_file`, the bot's clock is moved by the
    seconds written in it (tests/fakes/discord/clocked_echo.py)."""
    database = folder / f"{name}.sqlite3"
    env = (
        _base_environment()
        | {
            "PYTHONPATH": str(REPO),
            "DISCORD_TOKEN": discord.token,
            "DISCORD_API_URL": discord.api_url,
            "DEV_GUILD_ID": str(discord.guild.id),
            "LLM_API": "ollama",
            "LLM_BASE_URL": llm_url,
            "LLM_MODEL": model,
            "EMBEDDINGS": "local",
            "DATABASE_PATH": str(database),
            "LOG_LEVEL": "INFO",
        }
        | settings
    )
    module = "bot"
    if clock_file is not None:
        env["ECHO_TEST_CLOCK_FILE"] = str(clock_file)
        module = "tests.fakes.discord.clocked_echo"
    log_path = folder / f"{name}.log"
    with log_path.open("wb") as log_file:
        # cwd is the given folder: no developer's .env is read.
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, cwd=folder, env=env, stdout=log_file, stderr=asyncio.subprocess.STDOUT
        )
    echo = EchoProcess(process, log_path, database)
    identified = asyncio.ensure_future(discord.wait_identified(START_TIMEOUT, sessions=sessions))
    exited = asyncio.ensure_future(process.wait())
    await asyncio.wait([identified, exited], return_when=asyncio.FIRST_COMPLETED)
    exited.cancel()
    if not identified.done():
        identified.cancel()
        raise RuntimeError(f"the bot exited with {process.returncode} before connecting:\n{echo.log()}")
    try:
        identified.result()
    except BaseException:
        await echo.stop()
        raise
    return echo
