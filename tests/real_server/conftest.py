"""The real-server lane's servers: llama.cpp's llama-server and SmolLM2-135M-Instruct, built once
by tests/real_server/build_llama_server.sh (`make test` builds them and names them in
LLAMA_SERVER and LLAMA_MODEL). Run by hand without them, the lane is skipped and says why; named
but missing, it fails.

`llama(context)` starts one server per context size for the module (one slot, the model served
as `smollm2`, answers bounded to GENERATED_TOKENS so a tiny model's rambling costs seconds, not
minutes), behind a `Recorder` that keeps every request and answer; both stop at the module's end.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from tests.real_server.recorder import Recorder

MODEL_ALIAS = "smollm2"
# One thread: ggml's threads wait for each other at every step, and on a machine busier than its
# cores (the other test worker, other work) two threads are much slower than one.
THREADS = "1"
# Tokens a request may generate when it does not say (llama-server -n): a reply of two or three
# sentences, a reflection's JSON of a few memories.
GENERATED_TOKENS = 160
START_TIMEOUT = 60.0


@dataclass
class Llama:
    process: asyncio.subprocess.Process
    url: str  # the server itself
    recorder: Recorder  # in front of it: what the bot is pointed at
    context: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _binaries() -> tuple[Path, Path]:
    server, model = os.environ.get("LLAMA_SERVER"), os.environ.get("LLAMA_MODEL")
    if not server or not model:
        pytest.skip("the real-server lane needs LLAMA_SERVER and LLAMA_MODEL: `make test` builds and names them")
    missing = [p for p in (server, model) if not Path(p).is_file()]
    if missing:
        pytest.fail(f"LLAMA_SERVER / LLAMA_MODEL name files that do not exist: {missing} (make llama-server)")
    return Path(server), Path(model)


def _die_with_the_tests() -> None:
    """The server is stopped at the module's end; if the tests are killed first, so is it."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_llama(folder: Path, context: int, generated: int = GENERATED_TOKENS) -> Llama:
    """llama-server on 127.0.0.1, one slot of `context` tokens, ready to answer."""
    server, model = _binaries()
    port = free_port()
    log_path = folder / f"llama-{context}.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(server),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--alias",
            MODEL_ALIAS,
            "-c",
            str(context),
            "-np",
            "1",
            "-n",
            str(generated),
            "--seed",
            "7",
            "-t",
            THREADS,
            "-tb",
            THREADS,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_die_with_the_tests,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    async with httpx.AsyncClient(trust_env=False) as http:
        while True:
            if process.returncode is not None:
                raise RuntimeError(f"llama-server exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                if (await http.get(url + "/health", timeout=2)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"llama-server did not start within {START_TIMEOUT} s:\n{log_path.read_text()}")
            await asyncio.sleep(0.2)
    recorder = await Recorder(url).__aenter__()
    return Llama(process, url, recorder, context, log_path)


async def stop_llama(llama: Llama) -> None:
    await llama.recorder.__aexit__(None, None, None)
    if llama.process.returncode is None:
        llama.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(llama.process.wait(), 10)
        except TimeoutError:
            llama.process.kill()
            await llama.process.wait()


StartLlama = Callable[..., Awaitable[Llama]]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def llama(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[StartLlama]:
    """`await llama(context, generated=…)`: the module's server of that context, started on
    first use."""
    folder = tmp_path_factory.mktemp("llama")
    started: dict[tuple[int, int], Llama] = {}

    async def get(context: int, generated: int = GENERATED_TOKENS) -> Llama:
        if (context, generated) not in started:
            started[context, generated] = await start_llama(folder, context, generated)
        return started[context, generated]

    try:
        yield get
    finally:
        for server in started.values():
            await stop_llama(server)
