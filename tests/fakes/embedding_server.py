"""A scripted embedding server on 127.0.0.1: Ollama's /api/embed and OpenAI's /v1/embeddings.

Real HTTP (aiohttp.web), deterministic vectors derived from a hash of each text, and a `mode`
a test sets to script failures. Every request is recorded.

Its fixtures, `embedding_server` and `embedding_http`, reach every test through tests.conftest,
which imports them; a server with other settings is `running_embedding_server(dim=...)`. A refused
port is the `refused_url` fixture of tests.fakes.llm_server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import numpy as np
import pytest
from aiohttp import web

from tests.builders import http_client

DEFAULT_DIM = 16
# Shorter than a real outage, longer than any bound the code under test should apply.
CLIENT_TIMEOUT = 30.0

Mode = Literal[
    "normal",  # one vector per input, in order
    "reversed",  # OpenAI only: data listed in reverse order, each with its correct index
    "hang",  # never answers (until the server stops)
    "error",  # HTTP 500
    "malformed",  # 200 with a body that is not JSON
    "wrong_count",  # one vector fewer than inputs
    "wrong_dim",  # vectors of dim + 3 dimensions
]


def fake_vector(text: str, dim: int = DEFAULT_DIM) -> np.ndarray:
    """The server's vector for `text`: deterministic, deliberately not unit length."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(seed).normal(size=dim).astype(np.float32) * 3.0


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: Any
    # When it arrived (time.monotonic), for tests about when the bot asks.
    at: float = 0.0


class EmbeddingServer:
    def __init__(self, *, dim: int = DEFAULT_DIM):
        self.dim = dim
        self.mode: Mode = "normal"
        # Modes for the next requests, one each, before falling back to `mode`.
        self.script: list[Mode] = []
        self.requests: list[RecordedRequest] = []
        self._arrived = asyncio.Condition()
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/embed", self._ollama)
        app.router.add_post("/v1/embeddings", self._openai)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        self._release.set()  # let hanging handlers finish, so shutdown does not wait on them
        if self._runner is not None:
            await self._runner.cleanup()

    async def wait_for_requests(self, count: int) -> None:
        """Until at least `count` requests have arrived (bound it with asyncio.wait_for)."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)

    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.requests.append(RecordedRequest(request.path, dict(request.headers), body, time.monotonic()))
        async with self._arrived:
            self._arrived.notify_all()
        return body

    def _inputs(self, body: Any) -> list[str] | None:
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return None
        inputs = body.get("input")
        if isinstance(inputs, str):
            return [inputs]
        if isinstance(inputs, list) and all(isinstance(x, str) for x in inputs):
            return inputs
        return None

    async def _scripted(self, request: web.Request) -> tuple[Mode, list[list[float]] | web.Response]:
        """This request's mode, and the vectors to send or the scripted failure instead."""
        inputs = self._inputs(await self._record(request))
        mode = self.script.pop(0) if self.script else self.mode
        if inputs is None:
            return mode, web.json_response({"error": "model and input are required"}, status=400)
        if mode == "hang":
            await self._release.wait()
            return mode, web.json_response({"error": "server stopping"}, status=503)
        if mode == "error":
            return mode, web.json_response({"error": "scripted failure"}, status=500)
        if mode == "malformed":
            return mode, web.Response(text='{"embeddings": [[0.1, ', content_type="application/json")
        dim = self.dim + 3 if mode == "wrong_dim" else self.dim
        vectors = [fake_vector(text, dim).tolist() for text in inputs]
        if mode == "wrong_count":
            vectors = vectors[:-1]
        return mode, vectors

    async def _ollama(self, request: web.Request) -> web.Response:
        _, outcome = await self._scripted(request)
        if isinstance(outcome, web.Response):
            return outcome
        return web.json_response({"model": "fake", "embeddings": outcome})

    async def _openai(self, request: web.Request) -> web.Response:
        mode, outcome = await self._scripted(request)
        if isinstance(outcome, web.Response):
            return outcome
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(outcome)]
        if mode == "reversed":
            data.reverse()
        return web.json_response({"object": "list", "model": "fake", "data": data})


@asynccontextmanager
async def running_embedding_server(*, dim: int = DEFAULT_DIM) -> AsyncIterator[EmbeddingServer]:
    server = EmbeddingServer(dim=dim)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def embedding_server() -> AsyncIterator[EmbeddingServer]:
    async with running_embedding_server() as server:
        yield server


@pytest.fixture
async def embedding_http() -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(timeout=CLIENT_TIMEOUT) as client:
        yield client
