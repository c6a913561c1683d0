"""A scripted chat-LLM server for tests: real HTTP on 127.0.0.1, Ollama and OpenAI APIs at once.

Endpoints (one server, one port, both APIs):
    POST /api/chat             Ollama chat; structured calls put the JSON schema in `format`
    GET  /api/tags             Ollama model list: `models`, an untagged name listed as `name:latest`
    POST /v1/chat/completions  OpenAI chat; schema in `response_format.json_schema.schema`
    GET  /v1/models            OpenAI model list (404 when `models_endpoint` is False)
    POST /api/show             Ollama model details: `model_info.<arch>.context_length`
    GET  /props                llama.cpp's server properties, `default_generation_settings.n_ctx`,
                               when `props_context` is set (404 otherwise, as other servers answer)

Fixtures (import them into a conftest or a test module; names are stable):
    llm_server  -> a started `FakeLLMServer`, stopped at teardown
    refused_url -> "http://127.0.0.1:<port>" where nothing listens (connection refused)
Outside pytest: `async with FakeLLMServer() as server:` or `with refusing_port() as port:`.

How a chat request is answered, first rule that applies:
    1. its model is not in `server.models` -> 404 in that API's real format (Ollama
       `{"error": "model 'x' not found"}`, OpenAI `{"error": {..., "code": "model_not_found"}}`);
    2. the next item of `server.replies` (FIFO), if any;
    3. `server.handler(request)`, if set (may be sync or async);
    4. default: prose `echo: <last user message>`, or `{}` for a structured request.
An answer is a `str` (the assistant's text) or a `Reply` for anything else:
    Reply("text", thinking="...")      Ollama `message.thinking` / OpenAI `reasoning_content`
                                       (streamed: one word per event, before the text)
    Reply("text", delay=2.0)           slow: answers after 2 s
    Reply("text", finish="length")     generation cut at the token limit
    Reply(hang=True)                   accepts the request, never answers (until the server stops)
    Reply(status=500, error="boom")    HTTP error, body in that API's error format
    Reply(body="<html>oops", status=200, content_type="text/html")   raw body, sent as is
    Reply("text", truncated=True)      announces the full body length, sends half, closes
    Reply("text", trickle=0.1)         sends the body in 10 pieces, 0.1 s apart (each read is quick,
                                       the whole answer is not)
    Reply("text", gzip=True)           the body gzip-compressed (Content-Encoding: gzip), as a
                                       proxy in front of the server may send it
    Reply("text", prompt_tokens=8192)  the prompt's token count the server reports (Ollama
                                       `prompt_eval_count`, OpenAI `usage.prompt_tokens`); by
                                       default the words of every message sent
    Reply("text", cached_tokens=900, prompt_ms=12.5)   of those, the ones the server took from
                                       its cache and how long it read the rest, in each API's
                                       words (Ollama `prompt_eval_cached_count` and
                                       `prompt_eval_duration` in ns; OpenAI
                                       `usage.prompt_tokens_details.cached_tokens` and llama.cpp's
                                       `timings`)
Completion tokens are the words of the answer.
A prompt longer than `server.context_tokens` (when set, counted in words as above) is refused
before any script is read, with the HTTP 400 llama.cpp answers ("request (N tokens) exceeds the
available context size (M tokens)", type exceed_context_size_error).
A request with `"stream": true` is answered as the real servers stream (Ollama NDJSON with
`prompt_eval_count`/`eval_count` on the last line; OpenAI SSE with a finish chunk, a usage
chunk when `stream_options.include_usage`, then `data: [DONE]`), one word per event:
    Reply("a b c", pace=0.05)          one word every 0.05 s
    Reply("a b c", die_after=2)        two words, then the connection is dropped mid-stream
    Reply("a b c", stream_error="oom") the words, then an error event in that API's shape
    Reply(endless_line=50_000_000)     the start of an event, then that many bytes of one line
                                       that never ends, sent as fast as they are read, then closes
Streamed JSON is not ASCII-escaped, as llama.cpp, vLLM and LM Studio send it: a U+2028 in the
text arrives as those bytes, not as `\\u2028`.

Every request (chat and model lists) is recorded in `server.requests` as an `LLMRequest`
(api, method, path, model, messages, json_schema, headers, body); `server.chats` keeps the chat
ones. The handler recognises the reflection call by `request.json_schema is not None` or by a
marker in `request.system`.
A server kept for several tests (one bot process shared by a module): `await
server.wait_quiet(0.5)` once a test is done, then `server.reset()` forgets its requests and script.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Literal

import pytest
import pytest_asyncio
from aiohttp import web

FAKE_MODEL = "fake-llm"

Api = Literal["ollama", "openai"]


@dataclass(frozen=True)
class LLMRequest:
    api: Api
    method: str
    path: str
    model: str | None
    messages: list[dict[str, Any]]
    json_schema: dict[str, Any] | None
    headers: dict[str, str]  # keys lower-cased
    body: dict[str, Any] | None

    @property
    def system(self) -> str:
        return "\n".join(m.get("content", "") for m in self.messages if m.get("role") == "system")

    @property
    def last_user(self) -> str:
        users = [m.get("content", "") for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""

    @property
    def text(self) -> str:
        """Every message's content, in order."""
        return "\n".join(m.get("content", "") for m in self.messages)

    @property
    def context(self) -> str:
        """What the bot wrote into a reply prompt itself: its system messages and its notes (the
        memories, the story, the lore), not the people's lines. A note is a user message that
        starts with "<" or "[": a person's line starts with their name, quoted, which has
        neither."""
        return "\n".join(
            m.get("content", "")
            for m in self.messages
            if m.get("role") == "system" or (m.get("role") == "user" and m.get("content", "").startswith(("<", "[")))
        )


@dataclass(frozen=True)
class Reply:
    content: str = ""
    thinking: str | None = None
    delay: float = 0.0
    finish: str = "stop"
    hang: bool = False
    status: int = 200
    error: str | None = None
    body: str | bytes | None = None
    content_type: str = "application/json"
    truncated: bool = False
    trickle: float = 0.0
    gzip: bool = False
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    prompt_ms: float | None = None
    pace: float = 0.0
    die_after: int | None = None
    stream_error: str | None = None
    endless_line: int = 0


Answer = str | Reply
Handler = Callable[[LLMRequest], Answer | Awaitable[Answer]]


def _ollama_name(model: str) -> str:
    return model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"


class FakeLLMServer:
    def __init__(self, models: tuple[str, ...] | list[str] = (FAKE_MODEL,)) -> None:
        self.models: list[str] = list(models)
        self.models_endpoint = True
        # What /api/show and /v1/models say of each model's context (None: they do not say).
        self.context_length: int | None = 32_768
        # What /props says (llama.cpp); None: /props is not found, as on other servers.
        self.props_context: int | None = None
        # A prompt longer than this (in words) is refused as llama.cpp refuses it; None: never.
        self.context_tokens: int | None = None
        self.replies: deque[Answer] = deque()
        self.handler: Handler | None = None
        self.requests: list[LLMRequest] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.endless_sent = 0  # bytes of the last endless line written before the reader hung up
        self._served = 0
        # (time.monotonic(), word) of every streamed word, in order.
        self.streamed: list[tuple[float, str]] = []
        # Chat requests being answered, and when the last one arrived or ended (time.monotonic()).
        self._answering = 0
        self._last_chat = 0.0

    @property
    def chats(self) -> list[LLMRequest]:
        return [r for r in self.requests if r.path in ("/api/chat", "/v1/chat/completions")]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/chat", self._ollama_chat)
        app.router.add_get("/api/tags", self._ollama_tags)
        app.router.add_post("/api/show", self._ollama_show)
        app.router.add_post("/v1/chat/completions", self._openai_chat)
        app.router.add_get("/v1/models", self._openai_models)
        app.router.add_get("/props", self._props)
        # Hung handlers are released by `_stopping`, so shutdown never waits for them.
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def reset(self) -> None:
        """Forget the requests recorded and the script (replies, handler), for the next test of
        a bot that keeps this server; its models and what it says of them stay."""
        self.requests.clear()
        self.streamed.clear()
        self.replies.clear()
        self.handler = None
        self.endless_sent = 0

    async def wait_quiet(self, quiet: float, timeout: float = 30.0) -> None:
        """Wait until no chat request is being answered and none arrived or ended for `quiet`
        seconds: what a test set going (a reflection after its last reply) has reached the
        model, and been answered, before the next test reads the requests."""
        deadline = time.monotonic() + timeout
        while self._answering or time.monotonic() - self._last_chat < quiet:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the LLM server was still asked or answering after {timeout} s")
            await asyncio.sleep(0.05)

    async def __aenter__(self) -> FakeLLMServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- recording -------------------------------------------------------------------------

    async def _record(self, request: web.Request, api: Api) -> LLMRequest:
        body: dict[str, Any] | None = None
        if request.can_read_body:
            raw = await request.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            body = parsed if isinstance(parsed, dict) else None
        schema: dict[str, Any] | None = None
        if body is not None:
            if api == "ollama" and isinstance(body.get("format"), dict):
                schema = body["format"]
            elif api == "openai":
                fmt = body.get("response_format") or {}
                if fmt.get("type") == "json_schema":
                    schema = (fmt.get("json_schema") or {}).get("schema")
        recorded = LLMRequest(
            api=api,
            method=request.method,
            path=request.path,
            model=body.get("model") if body else None,
            messages=list(body.get("messages") or []) if body else [],
            json_schema=schema,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        self.requests.append(recorded)
        return recorded

    # -- model lists -----------------------------------------------------------------------

    async def _ollama_tags(self, request: web.Request) -> web.Response:
        await self._record(request, "ollama")
        listed = [
            {
                "name": _ollama_name(m),
                "model": _ollama_name(m),
                "modified_at": "2025-01-01T00:00:00Z",
                "size": 1,
                "digest": "0" * 64,
                "details": {"format": "gguf", "family": "fake"},
            }
            for m in self.models
        ]
        return web.json_response({"models": listed})

    async def _ollama_show(self, request: web.Request) -> web.Response:
        recorded = await self._record(request, "ollama")
        model = str((recorded.body or {}).get("model") or "")
        if not self._knows(model, "ollama"):
            return web.json_response({"error": f"model '{model}' not found"}, status=404)
        info = {"general.architecture": "fake"}
        if self.context_length is not None:
            info["fake.context_length"] = self.context_length
        return web.json_response({"details": {"format": "gguf", "family": "fake"}, "model_info": info})

    async def _openai_models(self, request: web.Request) -> web.Response:
        await self._record(request, "openai")
        if not self.models_endpoint:
            return web.Response(status=404, text="404 page not found")
        context = {} if self.context_length is None else {"max_model_len": self.context_length}
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake", **context} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _props(self, request: web.Request) -> web.Response:
        await self._record(request, "openai")
        if self.props_context is None:
            return web.Response(status=404, text='{"error":{"code":404,"message":"File Not Found"}}')
        return web.json_response({"default_generation_settings": {"n_ctx": self.props_context}, "total_slots": 1})

    # -- chat ------------------------------------------------------------------------------

    async def _ollama_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._chat(request, "ollama")

    async def _openai_chat(self, request: web.Request) -> web.StreamResponse:
        return await self._chat(request, "openai")

    def _knows(self, model: str | None, api: Api) -> bool:
        if model is None:
            return False
        if api == "ollama":
            return any(_ollama_name(model) == _ollama_name(m) for m in self.models)
        return model in self.models

    async def _answer(self, recorded: LLMRequest) -> Reply:
        if self.replies:
            answer: Answer = self.replies.popleft()
        elif self.handler is not None:
            result = self.handler(recorded)
            answer = await result if inspect.isawaitable(result) else result
        elif recorded.json_schema is not None:
            answer = "{}"
        else:
            answer = f"echo: {recorded.last_user}"
        return Reply(answer) if isinstance(answer, str) else answer

    async def _chat(self, request: web.Request, api: Api) -> web.StreamResponse:
        self._answering += 1
        self._last_chat = time.monotonic()
        try:
            return await self._answer_chat(request, api)
        finally:
            self._answering -= 1
            self._last_chat = time.monotonic()

    async def _answer_chat(self, request: web.Request, api: Api) -> web.StreamResponse:
        recorded = await self._record(request, api)
        model = recorded.model or ""
        if not self._knows(recorded.model, api):
            return web.json_response(_model_not_found(api, model), status=404)
        words = _words(recorded)
        if self.context_tokens is not None and words > self.context_tokens:
            return web.json_response(_context_exceeded(words, self.context_tokens), status=400)
        reply = await self._answer(recorded)
        if reply.hang:
            await self._stopping.wait()
            return web.Response(status=503, text="server stopped")
        if reply.delay:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), reply.delay)
        if (
            recorded.body is not None
            and recorded.body.get("stream") is True
            and reply.body is None
            and reply.error is None
            and reply.status < 400
        ):
            return await self._stream(request, api, model, reply, recorded)
        if reply.body is not None:
            raw = reply.body.encode() if isinstance(reply.body, str) else reply.body
        elif reply.error is not None:
            raw = json.dumps(_error_body(api, reply.error)).encode()
        else:
            self._served += 1
            prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else words
            raw = json.dumps(_chat_body(api, model, reply, self._served, prompt_tokens)).encode()
        if reply.truncated or reply.trickle:
            return await self._send_in_pieces(request, reply, raw)
        response = web.Response(status=reply.status, body=raw, content_type=_mime(reply.content_type))
        if reply.gzip:
            response.enable_compression(web.ContentCoding.gzip)
        return response

    async def _stream(
        self, request: web.Request, api: Api, model: str, reply: Reply, recorded: LLMRequest
    ) -> web.StreamResponse:
        self._served += 1
        serial = self._served
        words = re.findall(r"\s*\S+", reply.content) or [""]
        mime = "application/x-ndjson" if api == "ollama" else "text/event-stream"
        response = web.StreamResponse(status=200, headers={"Content-Type": mime})
        await response.prepare(request)
        include_usage = bool(((recorded.body or {}).get("stream_options") or {}).get("include_usage"))
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else _words(recorded)

        async def send(event: dict[str, Any]) -> None:
            line = json.dumps(event, ensure_ascii=False)
            await response.write((line + "\n").encode() if api == "ollama" else f"data: {line}\n\n".encode())

        if reply.endless_line:
            await self._send_endless_line(request, response, api, reply.endless_line)
            return response
        for thought in re.findall(r"\s*\S+", reply.thinking or ""):
            await send(_stream_thought(api, model, thought, serial))
        for n, word in enumerate(words):
            if reply.die_after is not None and n >= reply.die_after:
                if request.transport is not None:
                    request.transport.close()
                return response
            if reply.pace and n:
                try:
                    await asyncio.wait_for(self._stopping.wait(), reply.pace)
                    return response
                except TimeoutError:
                    pass
            await send(_stream_piece(api, model, word, serial))
            self.streamed.append((time.monotonic(), word))
        if reply.stream_error is not None:
            await send(_error_body(api, reply.stream_error))
            await response.write_eof()
            return response
        if api == "ollama":
            await send(
                {
                    "model": model,
                    "created_at": "2025-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": ""},
                    "done": True,
                    "done_reason": reply.finish,
                    "prompt_eval_count": prompt_tokens,
                    "eval_count": len(words),
                    **_ollama_cache(reply),
                }
            )
        else:
            await send(
                {
                    "id": f"chatcmpl-fake-{serial}",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish}],
                }
            )
            if include_usage:
                await send(
                    {
                        "id": f"chatcmpl-fake-{serial}",
                        "object": "chat.completion.chunk",
                        "created": int(time.time()),
                        "model": model,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": len(words),
                            "total_tokens": prompt_tokens + len(words),
                            **_openai_cache(reply),
                        },
                        **_llama_timings(reply),
                    }
                )
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _send_endless_line(self, request: web.Request, response: web.StreamResponse, api: Api, size: int) -> None:
        start = (
            '{"message": {"role": "assistant", "content": "'
            if api == "ollama"
            else 'data: {"choices": [{"delta": {"content": "'
        )
        await response.write(start.encode())
        chunk = b"a" * 65536
        self.endless_sent = 0
        try:
            while self.endless_sent < size and not self._stopping.is_set():
                await response.write(chunk)
                self.endless_sent += len(chunk)
        except (ConnectionError, RuntimeError):
            return  # the reader hung up
        if request.transport is not None:
            request.transport.close()

    async def _send_in_pieces(self, request: web.Request, reply: Reply, raw: bytes) -> web.StreamResponse:
        response = web.StreamResponse(
            status=reply.status,
            headers={"Content-Type": reply.content_type, "Content-Length": str(len(raw))},
        )
        await response.prepare(request)
        if reply.truncated:
            await response.write(raw[: len(raw) // 2])
            if request.transport is not None:
                request.transport.close()
            return response
        pieces = 10
        step = -(-len(raw) // pieces)
        for start in range(0, len(raw), step):
            await response.write(raw[start : start + step])
            try:
                await asyncio.wait_for(self._stopping.wait(), reply.trickle)
                return response
            except TimeoutError:
                pass
        await response.write_eof()
        return response


def _mime(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip()


def _stream_piece(api: Api, model: str, word: str, serial: int) -> dict[str, Any]:
    if api == "ollama":
        return {
            "model": model,
            "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": word},
            "done": False,
        }
    return {
        "id": f"chatcmpl-fake-{serial}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
    }


def _stream_thought(api: Api, model: str, word: str, serial: int) -> dict[str, Any]:
    if api == "ollama":
        return {
            "model": model,
            "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "", "thinking": word},
            "done": False,
        }
    return {
        "id": f"chatcmpl-fake-{serial}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": {"reasoning_content": word}, "finish_reason": None}],
    }


def _chat_body(api: Api, model: str, reply: Reply, serial: int, prompt_tokens: int) -> dict[str, Any]:
    completion_tokens = len(reply.content.split())
    if api == "ollama":
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.thinking is not None:
            message["thinking"] = reply.thinking
        return {
            "model": model,
            "created_at": "2025-01-01T00:00:00Z",
            "message": message,
            "done": True,
            "done_reason": reply.finish,
            "prompt_eval_count": prompt_tokens,
            "eval_count": completion_tokens,
            **_ollama_cache(reply),
        }
    message = {"role": "assistant", "content": reply.content}
    if reply.thinking is not None:
        message["reasoning_content"] = reply.thinking
    return {
        "id": f"chatcmpl-fake-{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            **_openai_cache(reply),
        },
        **_llama_timings(reply),
    }


def _words(recorded: LLMRequest) -> int:
    """The prompt's size as this server counts tokens: the words of every message sent."""
    return sum(len(str(m.get("content", "")).split()) for m in recorded.messages)


def _ollama_cache(reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if reply.cached_tokens is not None:
        out["prompt_eval_cached_count"] = reply.cached_tokens
    if reply.prompt_ms is not None:
        out["prompt_eval_duration"] = int(reply.prompt_ms * 1e6)
    return out


def _openai_cache(reply: Reply) -> dict[str, Any]:
    return {} if reply.cached_tokens is None else {"prompt_tokens_details": {"cached_tokens": reply.cached_tokens}}


def _llama_timings(reply: Reply) -> dict[str, Any]:
    if reply.prompt_ms is None:
        return {}
    return {"timings": {"cache_n": reply.cached_tokens or 0, "prompt_ms": reply.prompt_ms}}


def _context_exceeded(prompt_tokens: int, context: int) -> dict[str, Any]:
    """llama.cpp's refusal, word for word (llama-server b1-0c1e570)."""
    return {
        "error": {
            "code": 400,
            "message": f"request ({prompt_tokens} tokens) exceeds the available context size ({context} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": prompt_tokens,
            "n_ctx": context,
        }
    }


def _error_body(api: Api, message: str) -> dict[str, Any]:
    if api == "ollama":
        return {"error": message}
    return {"error": {"message": message, "type": "server_error", "param": None, "code": None}}


def _model_not_found(api: Api, model: str) -> dict[str, Any]:
    if api == "ollama":
        return {"error": f"model '{model}' not found"}
    return {
        "error": {
            "message": f"The model `{model}` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }


@contextmanager
def refusing_port() -> Iterator[int]:
    """A 127.0.0.1 port that refuses connections while the context is open.

    The socket is bound but never listens: connecting gets a reset, and no other process can
    start listening on the port meanwhile.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest_asyncio.fixture
async def llm_server() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
def refused_url() -> Iterator[str]:
    with refusing_port() as port:
        yield f"http://127.0.0.1:{port}"
