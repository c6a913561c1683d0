"""A pass-through in front of the real llama-server: every request the bot sends goes on to the
server as it is, every answer comes back as the server sent it, streamed piece by piece, and
both are recorded. The lane reads what the bot asked (streaming, the JSON schema, the
conversation key, cache_prompt) and what the server said of it (status, pieces, usage and
timings), without trusting the bot's own account of either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

_HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "content-encoding"})


@dataclass
class Exchange:
    method: str
    path: str
    body: dict[str, Any] | None
    status: int = 0
    pieces: int = 0  # body chunks as they arrived from the server
    # What the server's answer said of the prompt: `usage` and llama.cpp's `timings`.
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    text: str = ""  # the answer's body (for a stream, its events)

    @property
    def is_chat(self) -> bool:
        return self.path == "/v1/chat/completions"

    @property
    def structured(self) -> bool:
        return bool(self.body and (self.body.get("response_format") or {}).get("type") == "json_schema")


class Recorder:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.exchanges: list[Exchange] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def chats(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.is_chat]

    async def __aenter__(self) -> Recorder:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        exchange = Exchange(request.method, request.path, body if isinstance(body, dict) else None)
        self.exchanges.append(exchange)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        assert self._session is not None
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=raw or None, headers=headers
        ) as upstream:
            exchange.status = upstream.status
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS},
            )
            await response.prepare(request)
            received = bytearray()
            try:
                async for chunk in upstream.content.iter_any():
                    exchange.pieces += 1
                    received += chunk
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:
                # A client that has read `data: [DONE]` may hang up before the stream's last
                # chunk: what the server said is recorded all the same.
                pass
            finally:
                exchange.text = received.decode(errors="replace")
                self._read_figures(exchange)
        return response

    @staticmethod
    def _read_figures(exchange: Exchange) -> None:
        """The last `usage` and `timings` of the answer, whole or streamed (SSE `data:` lines)."""
        candidates = [exchange.text] + [
            line[len("data:") :].strip() for line in exchange.text.splitlines() if line.startswith("data:")
        ]
        for candidate in candidates:
            try:
                data = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(data, dict):
                if isinstance(data.get("usage"), dict):
                    exchange.usage = data["usage"]
                if isinstance(data.get("timings"), dict):
                    exchange.timings = data["timings"]
