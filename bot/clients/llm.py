"""Chat client for Ollama (`/api/chat`) and OpenAI-compatible (`/v1/chat/completions`) servers.

One `LLMClient` per configured server, over the application's single shared `httpx.AsyncClient`.
`chat` returns a whole answer (the reflection, replies when not streamed); `stream` reads Ollama's
NDJSON or OpenAI's server-sent events and shows the text as it grows.
Every failure surfaces as an `LLMError` subclass whose message is written for the person running
the bot: it names the URL and says what to do, and never contains the API key.

The two APIs' wire format (request bodies, images, token counts, thinking) is pure and lives in
bot/clients/llm_wire.py. What stays here is over 450 lines on purpose: transport, streaming and
every error message share one server's name, its credential-free URL and the quoting of its
answers, and read best as the one class that owns them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx

from bot.clients.kinds import Api
from bot.clients.llm_wire import ChatReply, Thinking, TokenUsage, request_body, strip_thinking, token_usage
from bot.clients.values import storable
from bot.errors import (
    LLMBadResponse,
    LLMContextExceeded,
    LLMError,
    LLMStreamCut,
    LLMTimeout,
    LLMTooLarge,
    LLMUnavailable,
    ModelNotFound,
)

log = logging.getLogger(__name__)


# Listing models takes milliseconds on a healthy server: start-up must not wait for a whole
# generation's timeout.
CHECK_TIMEOUT = 10.0
# A proxy's HTML error page quoted whole would bury the one line that matters.
MAX_QUOTED_CHARS = 500
# A chat answer is a few KB (a long reasoning trace, a few hundred): past this, the model is
# looping, and its answer is dropped before it fills the memory.
MAX_RESPONSE_BYTES = 2_000_000
# Reasoning hidden from the user, in characters: about 60,000 tokens, past the longest thinking
# budgets of today's reasoning models (32,000-38,000 tokens). A trace this long is a loop, and
# cutting it early spares the wait up to MAX_RESPONSE_BYTES or the timeout.
MAX_THINKING_CHARS = 250_000
_ENCODING_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
# How servers word a prompt longer than their context: llama.cpp ("request (2031 tokens) exceeds
# the available context size (1024 tokens)", type exceed_context_size_error), vLLM and OpenAI
# ("This model's maximum context length is 2048 tokens. However, you requested 2100 tokens",
# code context_length_exceeded), LM Studio ("… greater than the context length").
_CONTEXT_EXCEEDED = re.compile(
    r"exceeds? the available context size|maximum context length|context[_ ]length[_ ]exceeded|"
    r"greater than the context length|exceed_context_size",
    re.IGNORECASE,
)
_CONTEXT_FIGURES = re.compile(
    r"maximum context length is (?P<context>\d+) tokens.*?(?:requested|resulted in) (?P<prompt>\d+) tokens", re.IGNORECASE | re.DOTALL
)
_LLAMA_FIGURES = re.compile(r"request \((?P<prompt>\d+) tokens\).*?context size \((?P<context>\d+) tokens\)", re.IGNORECASE)

ServerKind = Literal["ollama", "llama.cpp", "vllm", "openai-compatible"]


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the server says of itself: its kind, and the context one request may fill (llama.cpp:
    one slot's, `n_ctx` at /props; Ollama: the model's `context_length`; vLLM: `max_model_len`),
    None when it does not say."""

    kind: ServerKind
    context_tokens: int | None


# Receives the visible text so far, each time it grows; it must return quickly (the stream
# waits for it).
OnText = Callable[[str], Awaitable[None]]




def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _connect_failure(exc: BaseException) -> str:
    """Why a connection failed; httpx words a refusal "All connection attempts failed"."""
    cause: BaseException | None = exc
    visited: set[int] = set()
    while cause is not None and id(cause) not in visited:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        visited.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return str(exc) or "connection failed"




def _length(text: Any) -> int:
    return len(text) if isinstance(text, str) else 0


def _line_end(buffer: bytearray, start: int) -> int:
    """Where the first line of `buffer` at or after `start` ends (at its CR or LF), -1 if none."""
    newline = buffer.find(b"\n", start)
    carriage = buffer.find(b"\r", start, newline if newline >= 0 else len(buffer))
    return carriage if carriage >= 0 else newline


def _same_model(wanted: str, listed: str) -> bool:
    """Ollama names a model `name:tag` and serves `name` as `name:latest`."""

    def tagged(name: str) -> str:
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"

    return tagged(wanted) == tagged(listed)


def _count_of(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _first_size(values: Sequence[Any]) -> int | None:
    sizes = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return sizes[0] if sizes else None


class LLMClient:
    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        api: Api,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        context_tokens: int | None = None,
        keep_alive: str | None = None,
    ) -> None:
        if api not in ("ollama", "openai"):
            raise ValueError(f"api must be 'ollama' or 'openai', not {api!r}")
        self._http = http
        self.api: Api = api
        self._api_key = api_key or None
        self.timeout = timeout
        # Ollama's default context is small and it drops the START of a longer prompt (the
        # persona and the rules) without a word: the context size is asked for explicitly.
        self.context_tokens = context_tokens
        # Ollama unloads an idle model after 5 minutes by default: the next person waits for
        # the reload. Sent with every call, so the server keeps it loaded through the pauses.
        self.keep_alive = keep_alive
        # What `describe` found; llama.cpp is then asked to keep the prompt it read (cache_prompt).
        self.server: ServerInfo | None = None
        root = base_url.strip().rstrip("/")
        # OpenAI SDKs are configured with the /v1 prefix, raw HTTP docs without: accept both.
        if api == "openai" and root.endswith("/v1"):
            root = root[: -len("/v1")]
        self._root = root
        self._server = "Ollama server" if api == "ollama" else "OpenAI-compatible server"

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        json_schema: dict[str, Any] | None = None,
        temperature: float | None = None,
        timeout: float | None = None,
        cache_key: str | None = None,
    ) -> ChatReply:
        """The assistant's text and the tokens counted; with `json_schema`, the server is asked
        for JSON following it. `cache_key`: the conversation's key (`prompt_cache_key`).

        `messages` are `{"role": "system" | "user" | "assistant", "content": str}`, as the prompt
        builders return them.
        """
        path, body = self._body(messages, model, json_schema, temperature, stream=False, cache_key=cache_key)
        started = time.perf_counter()
        if timeout is None:
            timeout = self.timeout
        response = await self._send("POST", path, body, timeout, self._session(cache_key))
        if response.status_code == 404:
            self._raise_if_model_missing(response, model)
        self._raise_for_status(response, path)
        data = self._json(response, path)
        content, stop_reason = self._extract(data, path)
        if stop_reason == "length":
            if json_schema is not None:
                raise LLMBadResponse(
                    f"The {self._server} at {self._url(path)} stopped at its token limit before "
                    f"finishing the JSON answer of model {model!r}; raise the model's output limit "
                    "or shorten the prompt."
                )
            log.warning("model %s hit its token limit: the reply is cut short", model)
        # The model's text enters here: a JSON-escaped lone surrogate must not reach the database.
        text = storable(strip_thinking(content))
        if not text:
            raise LLMBadResponse(
                f"The {self._server} at {self._url(path)} returned an empty reply."
            )
        log.debug(
            "%s chat model=%s structured=%s %.2fs %d chars",
            self.api, model, json_schema is not None, time.perf_counter() - started, len(text),
        )
        return ChatReply(text, token_usage(self.api, data))

    async def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        on_text: OnText,
        temperature: float | None = None,
        timeout: float | None = None,
        cache_key: str | None = None,
    ) -> ChatReply:
        """The assistant's answer, streamed: `on_text` sees the visible text as it grows.

        Bounded like `chat` (the whole exchange by `timeout`, the body by MAX_RESPONSE_BYTES).
        A failure before any text raises the `LLMError` `chat` would; after some text, an
        `LLMStreamCut` holding it.
        """
        path, body = self._body(messages, model, None, temperature, stream=True, cache_key=cache_key)
        if timeout is None:
            timeout = self.timeout
        started = time.perf_counter()
        thinking = Thinking()
        shown = ""
        usage = TokenUsage(None, None)
        stop: str | None = None
        try:
            async with self._exchange("POST", path, body, timeout, self._session(cache_key)) as response:
                if response.status_code >= 400:
                    failed = await self._complete(response, path)
                    if failed.status_code == 404:
                        self._raise_if_model_missing(failed, model)
                    self._raise_for_status(failed, path)
                async for event in self._events(response, path):
                    piece, reasoning, event_stop, event_usage = self._stream_event(event, path)
                    stop = event_stop or stop
                    usage = event_usage or usage
                    thinking.hidden_chars += reasoning
                    if piece and thinking.feed(storable(piece)) and (visible := thinking.answer()) != shown:
                        shown = visible
                        await on_text(visible)
                    if thinking.hidden_chars > MAX_THINKING_CHARS:
                        raise LLMTooLarge(
                            f"The model behind the {self._server} at {self._url(path)} reasoned for "
                            f"more than {MAX_THINKING_CHARS:,} characters without finishing; its "
                            "answer was dropped. A model that does not stop thinking is usually "
                            "missing its stop token or output limit."
                        )
                if stop is None:
                    raise LLMBadResponse(
                        f"The {self._server} at {self._url(path)} ended the stream before the "
                        "model finished its answer."
                    )
        except LLMError as exc:
            partial = thinking.answer(final=True)
            if partial:
                raise LLMStreamCut(exc, partial=partial) from exc
            raise
        if stop == "length":
            log.warning("model %s hit its token limit: the reply is cut short", model)
        text = thinking.answer(final=True)
        if not text:
            raise LLMBadResponse(f"The {self._server} at {self._url(path)} returned an empty reply.")
        log.debug(
            "%s stream model=%s %.2fs %d chars usage=%s",
            self.api, model, time.perf_counter() - started, len(text), usage,
        )
        return ChatReply(text, usage, stop)

    async def check(self, model: str, *, quiet: bool = False) -> None:
        """Start-up check: the server answers and lists `model`. Raises an `LLMError` otherwise.

        `quiet`: a repeated check (the health probe) does not warn again about a server
        without a model list; start-up did.
        """
        path = "/api/tags" if self.api == "ollama" else "/v1/models"
        response = await self._send("GET", path, None, min(self.timeout, CHECK_TIMEOUT))
        if self.api == "openai" and response.status_code == 404:
            if quiet:
                return
            log.warning(
                "%s does not implement /v1/models: cannot verify that model %r exists before the "
                "first chat",
                self._url(path), model,
            )
            return
        self._raise_for_status(response, path)
        data = self._json(response, path)
        try:
            if self.api == "ollama":
                names = [entry.get("name") or entry["model"] for entry in data["models"]]
            else:
                names = [entry["id"] for entry in data["data"]]
        except (KeyError, TypeError, AttributeError):
            raise LLMBadResponse(
                f"The {self._server} at {self._url(path)} answered a model list of an unexpected "
                f"shape: {self._quote(response.text)}"
            ) from None
        if not any(_same_model(model, str(name)) for name in names):
            listed = [str(n) for n in names]
            raise ModelNotFound(self._missing_model_message(model, listed=listed), model=model)

    async def describe(self, model: str) -> ServerInfo:
        """What the server says of itself and of `model`'s context: Ollama's `/api/show`
        (`<architecture>.context_length`); llama.cpp's `/props` (`n_ctx`, one slot's); an
        OpenAI-compatible model list's `max_model_len` (vLLM), `context_length` or `meta.n_ctx`
        (llama.cpp). Remembered in `server`. Raises an `LLMError` when the server fails."""
        if self.api == "ollama":
            info = ServerInfo("ollama", await self._ollama_context(model))
        else:
            info = await self._openai_server(model)
        self.server = info
        return info

    async def context_size(self, model: str) -> int | None:
        """The context, in tokens, one request to `model` may fill; None when the server does
        not say."""
        return (await self.describe(model)).context_tokens

    async def _ollama_context(self, model: str) -> int | None:
        response = await self._send("POST", "/api/show", {"model": model}, min(self.timeout, CHECK_TIMEOUT))
        if response.status_code == 404:
            self._raise_if_model_missing(response, model)
            return None
        self._raise_for_status(response, "/api/show")
        info = self._json(response, "/api/show").get("model_info")
        found = [v for k, v in info.items() if k.endswith(".context_length")] if isinstance(info, dict) else []
        return _first_size(found)

    async def _openai_server(self, model: str) -> ServerInfo:
        timeout = min(self.timeout, CHECK_TIMEOUT)
        props = await self._send("GET", "/props", None, timeout)
        if props.status_code == 200:
            with contextlib.suppress(ValueError):
                data = props.json()
                settings = data.get("default_generation_settings") if isinstance(data, dict) else None
                if isinstance(settings, dict) and "n_ctx" in settings:
                    return ServerInfo("llama.cpp", _first_size([settings.get("n_ctx")]))
        response = await self._send("GET", "/v1/models", None, timeout)
        if response.status_code == 404:
            return ServerInfo("openai-compatible", None)
        self._raise_for_status(response, "/v1/models")
        listed = self._json(response, "/v1/models").get("data")
        entries = [
            entry for entry in (listed if isinstance(listed, list) else [])
            if isinstance(entry, dict) and _same_model(model, str(entry.get("id")))
        ]
        vllm = _first_size([entry.get("max_model_len") for entry in entries])
        if vllm is not None:
            return ServerInfo("vllm", vllm)
        meta = [entry.get("meta") for entry in entries]
        found = [entry.get("context_length") for entry in entries]
        found += [m.get("n_ctx") for m in meta if isinstance(m, dict)]
        return ServerInfo("openai-compatible", _first_size(found))

    async def count_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int | None:
        """The prompt's tokens as the server's own template and tokenizer count them, where it
        can say before a chat (llama.cpp: /apply-template, then /tokenize); None elsewhere."""
        if self.server is None or self.server.kind != "llama.cpp":
            return None
        timeout = min(self.timeout, CHECK_TIMEOUT)
        wire = [{"role": m["role"], "content": m["content"]} for m in messages]
        templated = await self._send("POST", "/apply-template", {"messages": wire}, timeout)
        if templated.status_code != 200:
            return None
        prompt = self._json(templated, "/apply-template").get("prompt")
        if not isinstance(prompt, str):
            return None
        counted = await self._send("POST", "/tokenize", {"content": prompt}, timeout)
        tokens = self._json(counted, "/tokenize").get("tokens") if counted.status_code == 200 else None
        return len(tokens) if isinstance(tokens, list) else None

    def _body(
        self,
        messages: Sequence[Mapping[str, Any]],
        model: str,
        json_schema: dict[str, Any] | None,
        temperature: float | None,
        *,
        stream: bool,
        cache_key: str | None,
    ) -> tuple[str, dict[str, Any]]:
        return request_body(
            self.api,
            messages,
            model=model,
            json_schema=json_schema,
            temperature=temperature,
            stream=stream,
            context_tokens=self.context_tokens,
            keep_alive=self.keep_alive,
            cache_prompt=self.server is not None and self.server.kind == "llama.cpp",
            cache_key=cache_key if self.api == "openai" else None,
        )

    # -- transport -------------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return _without_credentials(self._root + path)

    def _session(self, cache_key: str | None) -> dict[str, str]:
        """The conversation's key as a header too: routers pin a session to one server by it
        (LiteLLM's proxy reads `x-<vendor>-session-id` into its session affinity)."""
        return {"X-Echo-Session-Id": cache_key} if cache_key is not None and self.api == "openai" else {}

    async def _send(
        self, method: str, path: str, body: dict[str, Any] | None, timeout: float, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        async with self._exchange(method, path, body, timeout, headers) as response:
            return await self._complete(response, path)

    @contextlib.asynccontextmanager
    async def _exchange(
        self, method: str, path: str, body: dict[str, Any] | None, timeout: float, extra: dict[str, str] | None = None
    ) -> AsyncIterator[httpx.Response]:
        """The response as it arrives; transport failures become `LLMError`s."""
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        headers |= extra or {}
        request = self._http.build_request(
            method, self._root + path, json=body, headers=headers, timeout=timeout
        )
        try:
            # httpx bounds each phase separately; the outer bound caps the whole exchange.
            async with asyncio.timeout(timeout):
                response = await self._http.send(request, stream=True)
                try:
                    yield response
                finally:
                    await response.aclose()
        except httpx.ConnectTimeout:
            reason = f"no answer to connect within {timeout:g} s"
            raise LLMUnavailable(self._unreachable_message(path, reason)) from None
        except (TimeoutError, httpx.TimeoutException):
            raise LLMTimeout(
                f"The {self._server} at {self._url(path)} did not answer within {timeout:g} s. "
                "The model may still be loading or the machine is overloaded; raise the LLM "
                "timeout if this is normal for it."
            ) from None
        except httpx.ConnectError as exc:
            raise LLMUnavailable(self._unreachable_message(path, _connect_failure(exc))) from None
        except httpx.TransportError as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise LLMBadResponse(
                f"The connection to the {self._server} at {self._url(path)} broke before a "
                f"complete answer arrived ({self._scrub(detail)})."
            ) from None

    async def _complete(self, response: httpx.Response, path: str) -> httpx.Response:
        """The whole (bounded) body, as a response that can be read again."""
        content = await self._read_bounded(response, path)
        # The body is already decoded: the new response must not decode it again.
        headers = [
            (k, v) for k, v in response.headers.multi_items() if k.lower() not in _ENCODING_HEADERS
        ]
        return httpx.Response(
            response.status_code, headers=headers, content=content, request=response.request
        )

    async def _events(self, response: httpx.Response, path: str) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of a stream: Ollama's NDJSON lines or OpenAI's SSE `data:` lines."""
        async for raw in self._lines(response, path):
            line = raw.decode("utf-8", errors="replace").strip()
            if self.api == "openai":
                if not line.startswith("data:"):
                    continue  # SSE comments, event names, blank separators
                line = line[len("data:") :].strip()
                if line == "[DONE]":
                    return
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if not isinstance(event, dict):
                raise LLMBadResponse(
                    f"The {self._server} at {self._url(path)} streamed something that is not a "
                    f"JSON object: {self._quote(line)}"
                )
            yield event

    async def _lines(self, response: httpx.Response, path: str) -> AsyncIterator[bytes]:
        """The body's lines as the protocols end them (LF, CRLF, and CR in SSE), never at a
        Unicode line separator that JSON leaves unescaped (U+2028, U+2029, U+0085), as a general
        line splitter would. Bounded by what arrived, not by what the sender chooses to end: past
        MAX_RESPONSE_BYTES, line or no line, it stops."""
        received = 0
        pending = bytearray()
        async for chunk in response.aiter_bytes():
            received += len(chunk)
            if received > MAX_RESPONSE_BYTES:
                raise LLMTooLarge(
                    f"The {self._server} at {self._url(path)} sent more than "
                    f"{MAX_RESPONSE_BYTES // 1_000_000} MB for one answer; it was dropped. A "
                    "model that does not stop is usually missing its stop token or output limit."
                )
            searched = len(pending)
            pending += chunk
            start = 0
            while (end := _line_end(pending, max(start, searched))) >= 0:
                yield bytes(pending[start:end])
                start = end + 1
            del pending[:start]
        if pending:
            yield bytes(pending)

    def _stream_event(
        self, event: dict[str, Any], path: str
    ) -> tuple[str, int, str | None, TokenUsage | None]:
        """(text piece, characters of reasoning sent beside it, stop reason when finished, usage
        when given) of one stream event. Reasoning in a field of its own (Ollama's `thinking`,
        `reasoning_content` or `reasoning` of OpenAI-compatible servers) is never shown, only
        counted against MAX_THINKING_CHARS."""
        error = event.get("error")
        if error is not None:
            said = error.get("message") if isinstance(error, dict) else error
            raise LLMBadResponse(
                f"The {self._server} at {self._url(path)} reported an error mid-answer: "
                f"{self._quote(str(said))}"
            )
        try:
            if self.api == "ollama":
                message = event.get("message") or {}
                piece, reasoning = message.get("content") or "", _length(message.get("thinking"))
                if not event.get("done"):
                    return piece, reasoning, None, None
                return piece, reasoning, event.get("done_reason") or "stop", token_usage("ollama", event)
            usage = token_usage("openai", event) if isinstance(event.get("usage"), dict) else None
            choices = event.get("choices") or []
            if not choices:
                return "", 0, None, usage
            choice = choices[0]
            delta = choice.get("delta") or {}
            reasoning = _length(delta.get("reasoning_content")) + _length(delta.get("reasoning"))
            return delta.get("content") or "", reasoning, choice.get("finish_reason"), usage
        except (AttributeError, TypeError):
            raise LLMBadResponse(
                f"The {self._server} at {self._url(path)} streamed an event of an unexpected "
                f"shape: {self._quote(json.dumps(event, ensure_ascii=False))}"
            ) from None

    async def _read_bounded(self, response: httpx.Response, path: str) -> bytes:
        """The body, refused past MAX_RESPONSE_BYTES before it is all in memory."""
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_RESPONSE_BYTES:
                raise LLMTooLarge(
                    f"The {self._server} at {self._url(path)} sent more than "
                    f"{MAX_RESPONSE_BYTES // 1_000_000} MB for one answer; it was dropped. A "
                    "model that does not stop is usually missing its stop token or output limit."
                )
        return bytes(body)

    def _unreachable_message(self, path: str, reason: str) -> str:
        if self.api == "ollama":
            advice = (
                "Start Ollama with `ollama serve` (or the Ollama app), or set LLM_BASE_URL to the "
                "address where it runs."
            )
        else:
            advice = (
                "Check that the server is running, or set LLM_BASE_URL to the address where it "
                "runs."
            )
        return f"Cannot reach the {self._server} at {self._url(path)} ({reason}). {advice}"

    # -- response handling -----------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        # A proxy may echo the request headers back in its error page.
        return text.replace(self._api_key, "***") if self._api_key else text

    def _quote(self, text: str) -> str:
        text = self._scrub(" ".join(text.split()))
        if len(text) > MAX_QUOTED_CHARS:
            text = text[:MAX_QUOTED_CHARS] + "…"
        return repr(text) if text else "(empty body)"

    def _error_text(self, response: httpx.Response) -> str:
        """The server's own explanation, from whichever error shape it uses."""
        try:
            data = response.json()
        except ValueError:
            return self._quote(response.text)
        if isinstance(data, dict):
            error = data.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return self._quote(error["message"])
            for candidate in (error, data.get("message"), data.get("detail")):
                if isinstance(candidate, str):
                    return self._quote(candidate)
        return self._quote(response.text)

    def _raise_if_model_missing(self, response: httpx.Response, model: str) -> None:
        """A 404 names a missing model only when its body says so; a bare 404 is a wrong URL."""
        try:
            data = response.json()
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        error = data.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        if not isinstance(message, str):
            other = data.get("message")
            message = other if isinstance(other, str) else ""
        lowered = message.lower()
        if code == "model_not_found" or (
            "model" in lowered and ("not found" in lowered or "does not exist" in lowered)
        ):
            raise ModelNotFound(
                self._missing_model_message(model, server_said=self._quote(message)), model=model
            )

    def _missing_model_message(
        self, model: str, *, listed: list[str] | None = None, server_said: str | None = None
    ) -> str:
        root = _without_credentials(self._root)
        where = f"The {self._server} at {root} does not have the model {model!r}"
        said = f" (server said: {server_said})" if server_said else ""
        if listed is not None:
            shown = ", ".join(listed[:10]) + (", …" if len(listed) > 10 else "")
            said = f" (it has: {shown})" if listed else " (it has no model at all)"
        if self.api == "ollama":
            # The client does not know which setting named the model (LLM_MODEL or
            # REFLECTION_MODEL): whoever catches this names it.
            advice = f"Download it with `ollama pull {model}`, or name a model shown by `ollama list`."
        else:
            advice = "The model must be one of the model ids this server offers."
        return f"{where}{said}. {advice}"

    def _raise_for_status(self, response: httpx.Response, path: str) -> None:
        status = response.status_code
        if status < 400:
            return
        if status in (400, 413) and (exceeded := self._context_exceeded(response)) is not None:
            raise exceeded
        hint = ""
        if status in (401, 403):
            hint = " Check the API key (LLM_API_KEY)."
        elif status == 404:
            hint = f" Is LLM_BASE_URL the address of an {self._server}?"
        raise LLMBadResponse(
            f"The {self._server} at {self._url(path)} answered HTTP {status}: "
            f"{self._error_text(response)}.{hint}",
            status=status,
        )

    def _context_exceeded(self, response: httpx.Response) -> LLMContextExceeded | None:
        """The server's refusal of a prompt longer than its context, with its counts, or None."""
        said = self._error_text(response)
        try:
            data = response.json()
        except ValueError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        fields = error if isinstance(error, dict) else {}
        kind = " ".join(str(fields.get(k, "")) for k in ("type", "code"))
        if not (_CONTEXT_EXCEEDED.search(said) or _CONTEXT_EXCEEDED.search(kind)):
            return None
        prompt, context = _count_of(fields.get("n_prompt_tokens")), _count_of(fields.get("n_ctx"))
        figures = _CONTEXT_FIGURES.search(said) or _LLAMA_FIGURES.search(said)
        if figures is not None:
            prompt = prompt or int(figures["prompt"])
            context = context or int(figures["context"])
        sizes = f" ({prompt:,} tokens for {context:,})" if prompt and context else ""
        return LLMContextExceeded(
            f"The {self._server} at {_without_credentials(self._root)} refused a prompt longer than "
            f"its context{sizes}: {said}. A retry cannot work; raise the server's context (llama.cpp "
            "-c, vLLM --max-model-len) or LLM_CONTEXT_TOKENS to what it holds.",
            status=response.status_code,
            prompt_tokens=prompt,
            context_tokens=context,
        )

    def _json(self, response: httpx.Response, path: str) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise LLMBadResponse(
                f"The {self._server} at {self._url(path)} answered something "
                f"that is not a JSON object: {self._quote(response.text)}",
                status=response.status_code,
            )
        return data

    def _extract(self, data: dict[str, Any], path: str) -> tuple[str, str | None]:
        """(content, stop reason) from a chat answer of this client's API."""
        try:
            if self.api == "ollama":
                content, stop = data["message"]["content"], data.get("done_reason")
            else:
                choice = data["choices"][0]
                content, stop = choice["message"]["content"], choice.get("finish_reason")
        except (KeyError, IndexError, TypeError):
            content, stop = None, None
        if not isinstance(content, str):
            if self.api == "ollama":
                where = '["message"]["content"]'
            else:
                where = '["choices"][0]["message"]["content"]'
            raise LLMBadResponse(
                f"The {self._server} at {self._url(path)} answered JSON without a "
                f"text at {where}: {self._quote(json.dumps(data, ensure_ascii=False))}"
            )
        return content, stop
