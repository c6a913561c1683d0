"""The gateway websocket: Hello, Identify, Ready, heartbeats, dispatches, zlib-stream.

As discord.py uses it: it connects with `?v=10&encoding=json&compress=zlib-stream`, so every
frame is one zlib stream compressed with a single context and ended by a sync flush (the
`00 00 ff ff` suffix discord.py waits for). Without `compress` frames are plain JSON text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import zlib
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from tests.fakes.discord.rest import FAKE_DISCORD
from tests.fakes.discord.state import MESSAGE_CONTENT_INTENT, new_token

if TYPE_CHECKING:
    from tests.fakes.discord.server import FakeDiscord

log = logging.getLogger(__name__)

OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_RESUME = 0, 1, 2, 6
OP_RECONNECT, OP_INVALID_SESSION, OP_HELLO, OP_HEARTBEAT_ACK = 7, 9, 10, 11
CLOSE_AUTHENTICATION_FAILED = 4004
CLOSE_DISALLOWED_INTENTS = 4014


class GatewaySession:
    """One connected client."""

    def __init__(self, server: FakeDiscord, ws: web.WebSocketResponse, compress: bool) -> None:
        self.server = server
        self.ws = ws
        self._deflate = zlib.compressobj() if compress else None
        self.sequence = 0
        self.session_id = new_token()
        self.identified = asyncio.Event()
        self.intents = 0
        self.heartbeats = 0
        self._send_lock = asyncio.Lock()

    async def send(self, op: int, data: Any, event: str | None = None) -> None:
        async with self._send_lock:
            frame: dict[str, Any] = {"op": op, "d": data, "s": None, "t": None}
            if op == OP_DISPATCH:
                self.sequence += 1
                frame["s"], frame["t"] = self.sequence, event
            text = json.dumps(frame)
            if self.ws.closed:
                return
            if self._deflate is None:
                await self.ws.send_str(text)
            else:
                raw = self._deflate.compress(text.encode()) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
                await self.ws.send_bytes(raw)

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        await self.send(OP_DISPATCH, data, event)

    async def run(self) -> None:
        await self.send(OP_HELLO, {"heartbeat_interval": self.server.heartbeat_interval_ms})
        async for message in self.ws:
            if message.type != WSMsgType.TEXT:
                # discord.py sends JSON text; anything else ends the session.
                if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.ERROR):
                    break
                continue
            frame = json.loads(message.data)
            op = frame.get("op")
            if op == OP_HEARTBEAT:
                self.heartbeats += 1
                await self.send(OP_HEARTBEAT_ACK, None)
            elif op == OP_IDENTIFY:
                await self._identify(frame["d"])
            elif op == OP_RESUME:
                # Sessions are not kept: the client identifies again, as after a real expiry.
                await self.send(OP_INVALID_SESSION, False)
            else:
                self.server.gateway_log.append(frame)

    async def _identify(self, data: dict[str, Any]) -> None:
        self.server.gateway_log.append({"op": OP_IDENTIFY, "d": {**data, "token": "***"}})
        if data.get("token") != self.server.token:
            await self.ws.close(code=CLOSE_AUTHENTICATION_FAILED, message=b"Authentication failed.")
            return
        self.intents = int(data.get("intents", 0))
        if self.intents & MESSAGE_CONTENT_INTENT and not self.server.message_content_enabled:
            await self.ws.close(code=CLOSE_DISALLOWED_INTENTS, message=b"Disallowed intent(s).")
            return
        server = self.server
        ready: dict[str, Any] = {
            "v": 10,
            "user": server.bot_user.payload() | {"verified": True, "mfa_enabled": False},
            "guilds": [{"id": str(g.id), "unavailable": True} for g in server.guilds.values()],
            "session_id": self.session_id,
            "resume_gateway_url": server.gateway_url,
            "session_type": "normal",
            "private_channels": [],
            "relationships": [],
            "user_settings": {},
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "auth_session_id_hash": "",
            "application": {"id": str(server.application_id), "flags": server.application_flags},
            "_trace": ["fake-discord"],
        }
        if "shard" in data:
            ready["shard"] = data["shard"]
        await self.dispatch("READY", ready)
        for guild in server.guilds.values():
            await self.dispatch("GUILD_CREATE", server.guild_create_payload(guild))
        self.identified.set()


async def gateway_handler(request: web.Request) -> web.WebSocketResponse:
    server: FakeDiscord = request.app[FAKE_DISCORD]
    ws = web.WebSocketResponse(max_msg_size=0)
    await ws.prepare(request)
    compress = request.query.get("compress")
    if compress not in (None, "zlib-stream"):
        # discord.py picks zstd-stream when the zstandard package is installed.
        await ws.close(code=4000, message=f"the fake gateway speaks zlib-stream, not {compress}".encode())
        return ws
    session = GatewaySession(server, ws, compress == "zlib-stream")
    server.sessions.append(session)
    try:
        await session.run()
    finally:
        server.sessions.remove(session)
    return ws
