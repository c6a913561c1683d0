"""Runs the real `python -m bot chat` in a subprocess, against the scripted LLM of the test.

The LLM server lives in the test's event loop on 127.0.0.1, so it outlives the processes it
serves; embeddings are the real local model. Every run is bounded by a timeout: a start-up that
hangs (a FIFO for a character file) fails the test instead of blocking the suite.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROCESS_TIMEOUT = 60.0
# A runaway read (/dev/zero) ends in MemoryError instead of taking the machine's memory.
MEMORY_LIMIT = 3 * 1024**3


@dataclass(frozen=True)
class Run:
    code: int | None  # None: killed at the timeout
    stdout: str
    stderr: str


def chat_env(llm_url: str, database: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLM_", "EMBEDDINGS", "DATABASE_", "CHARACTER_", "LC_", "LANG"))
    }
    env.update(
        # The chat's own texts in English, whatever the machine's language (--language says another).
        LANG="C.UTF-8",
        LLM_BASE_URL=llm_url,
        LLM_MODEL="fake-llm",
        DATABASE_PATH=str(database),
        EMBEDDINGS="local",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


async def run_chat(
    env: dict[str, str], cwd: Path, stdin: bytes, *, user: str | bytes = "alice", timeout: float = PROCESS_TIMEOUT
) -> Run:
    """`python -m bot chat --user USER` fed `stdin`, then end of input."""
    return await run_module(env, cwd, ["bot", "chat", "--user", user], stdin, timeout=timeout)


async def run_module(
    env: dict[str, str], cwd: Path, args: list[str | bytes], stdin: bytes = b"", *, timeout: float = PROCESS_TIMEOUT
) -> Run:
    """`python -m ARGS…` fed `stdin`, then end of input."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        preexec_fn=_limit_memory,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        return Run(None, out.decode(errors="replace"), err.decode(errors="replace"))
    return Run(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
