"""Chat client for Ollama (`/api/chat`) and OpenAI-compatible (`/v1/chat/completions`) servers.

One `LLMClient` per configured server, over the application's single shared `httpx.AsyncClient`.
`chat` returns a whole answer (the reflection, replies when not streamed); `stream` reads Ollama's
NDJSON or OpenAI's server-sent events and shows the text as it grows.
Every failure surfaces as an `LLMError` subclass whose message is written for the person running
the bot: it names the URL and says what to do, and never contains the API key.

The two APIs' wire format (request bodies, images, token counts, thinking) is pure and lives in
bot/clients/llm_wire.py; how a server's failures are told, in bot/clients/llm_server.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from bot.clients.kinds import Api
from bot.clients.llm_server import LLMServer, connect_failure
from bot.clients.llm_wire import ChatMessage, ChatReply, Thinking, TokenUsage, request_body, strip_thinking, token_usage
from bot.clients.values import storable
from bot.errors import (
    LLMBadResponse,
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
# Reasoning hidden from the user, in characters: about 60,000 tokens, past the longest thinking
# budgets of today's reasoning models (32,000-38,000 tokens). A trace this long is a loop, and
# cutting it early spares the wait up to MAX_RESPONSE_BYTES or the timeout.
MAX_THINKING_CHARS = 250_000
_ENCODING_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})

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


def _same_model(wanted: str, listed: str) -> bool:
    """Ollama names a model `name:tag` and serves `name` as `name:latest`."""

    def tagged(name: str) -> str:
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"

    return tagged(wanted) == tagged(listed)


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
        self._at = LLMServer(api, root, self._api_key)

    async def chat(
        self,
        messages: Sequence[ChatMessage],
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
            self._at.raise_if_model_missing(response, model)
        self._at.raise_for_status(response, path)
        data = self._at.json(response, path)
        content, stop_reason = self._at.extract(data, path)
        if stop_reason == "length":
            if json_schema is not None:
                raise LLMBadResponse(
                    f"The {self._at.name} at {self._at.url(path)} stopped at its token limit before "
                    f"finishing the JSON answer of model {model!r}; raise the model's output limit "
                    "or shorten the prompt."
                )
            log.warning("model %s hit its token limit: the reply is cut short", model)
        # The model's text enters here: a JSON-escaped lone surrogate must not reach the database.
        text = storable(strip_thinking(content))
        if not text:
            raise LLMBadResponse(f"The {self._at.name} at {self._at.url(path)} returned an empty reply.")
        log.debug(
            "%s chat model=%s structured=%s %.2fs %d chars",
            self.api,
            model,
            json_schema is not None,
            time.perf_counter() - started,
            len(text),
        )
        return ChatReply(text, token_usage(self.api, data))

    async def stream(
        self,
        messages: Sequence[ChatMessage],
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
                        self._at.raise_if_model_missing(failed, model)
                    self._at.raise_for_status(failed, path)
                async for event in self._at.events(response, path):
                    piece, reasoning, event_stop, event_usage = self._at.stream_event(event, path)
                    stop = event_stop or stop
                    usage = event_usage or usage
                    thinking.hidden_chars += reasoning
                    if piece and thinking.feed(storable(piece)) and (visible := thinking.answer()) != shown:
                        shown = visible
                        await on_text(visible)
                    if thinking.hidden_chars > MAX_THINKING_CHARS:
                        raise LLMTooLarge(
                            f"The model behind the {self._at.name} at {self._at.url(path)} reasoned for "
                            f"more than {MAX_THINKING_CHARS:,} characters without finishing; its "
                            "answer was dropped. A model that does not stop thinking is usually "
                            "missing its stop token or output limit."
                        )
                if stop is None:
                    raise LLMBadResponse(
                        f"The {self._at.name} at {self._at.url(path)} ended the stream before the "
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
            raise LLMBadResponse(f"The {self._at.name} at {self._at.url(path)} returned an empty reply.")
        log.debug(
            "%s stream model=%s %.2fs %d chars usage=%s",
            self.api,
            model,
            time.perf_counter() - started,
            len(text),
            usage,
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
                "%s does not implement /v1/models: cannot verify that model %r exists before the first chat",
                self._at.url(path),
                model,
            )
            return
        self._at.raise_for_status(response, path)
        data = self._at.json(response, path)
        try:
            if self.api == "ollama":
                names = [entry.get("name") or entry["model"] for entry in data["models"]]
            else:
                names = [entry["id"] for entry in data["data"]]
        except (KeyError, TypeError, AttributeError):
            raise LLMBadResponse(
                f"The {self._at.name} at {self._at.url(path)} answered a model list of an unexpected "
                f"shape: {self._at.quote(response.text)}"
            ) from None
        if not any(_same_model(model, str(name)) for name in names):
            listed = [str(n) for n in names]
            raise ModelNotFound(self._at.missing_model_message(model, listed=listed), model=model)

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
            self._at.raise_if_model_missing(response, model)
            return None
        self._at.raise_for_status(response, "/api/show")
        info = self._at.json(response, "/api/show").get("model_info")
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
        self._at.raise_for_status(response, "/v1/models")
        listed = self._at.json(response, "/v1/models").get("data")
        entries = [
            entry
            for entry in (listed if isinstance(listed, list) else [])
            if isinstance(entry, dict) and _same_model(model, str(entry.get("id")))
        ]
        vllm = _first_size([entry.get("max_model_len") for entry in entries])
        if vllm is not None:
            return ServerInfo("vllm", vllm)
        meta = [entry.get("meta") for entry in entries]
        found = [entry.get("context_length") for entry in entries]
        found += [m.get("n_ctx") for m in meta if isinstance(m, dict)]
        return ServerInfo("openai-compatible", _first_size(found))

    async def count_tokens(self, messages: Sequence[ChatMessage]) -> int | None:
        """The prompt's tokens as the server's own template and tokenizer count them, where it
        can say before a chat (llama.cpp: /apply-template, then /tokenize); None elsewhere."""
        if self.server is None or self.server.kind != "llama.cpp":
            return None
        timeout = min(self.timeout, CHECK_TIMEOUT)
        wire = [{"role": m["role"], "content": m["content"]} for m in messages]
        templated = await self._send("POST", "/apply-template", {"messages": wire}, timeout)
        if templated.status_code != 200:
            return None
        prompt = self._at.json(templated, "/apply-template").get("prompt")
        if not isinstance(prompt, str):
            return None
        counted = await self._send("POST", "/tokenize", {"content": prompt}, timeout)
        tokens = self._at.json(counted, "/tokenize").get("tokens") if counted.status_code == 200 else None
        return len(tokens) if isinstance(tokens, list) else None

    def _body(
        self,
        messages: Sequence[ChatMessage],
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
        request = self._http.build_request(method, self._at.root + path, json=body, headers=headers, timeout=timeout)
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
            raise LLMUnavailable(self._at.unreachable_message(path, reason)) from None
        except (TimeoutError, httpx.TimeoutException):
            raise LLMTimeout(
                f"The {self._at.name} at {self._at.url(path)} did not answer within {timeout:g} s. "
                "The model may still be loading or the machine is overloaded; raise the LLM "
                "timeout if this is normal for it."
            ) from None
        except httpx.ConnectError as exc:
            raise LLMUnavailable(self._at.unreachable_message(path, connect_failure(exc))) from None
        except httpx.TransportError as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise LLMBadResponse(
                f"The connection to the {self._at.name} at {self._at.url(path)} broke before a "
                f"complete answer arrived ({self._at.scrub(detail)})."
            ) from None

    async def _complete(self, response: httpx.Response, path: str) -> httpx.Response:
        """The whole (bounded) body, as a response that can be read again."""
        content = await self._at.read_bounded(response, path)
        # The body is already decoded: the new response must not decode it again.
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _ENCODING_HEADERS]
        return httpx.Response(response.status_code, headers=headers, content=content, request=response.request)

    # -- response handling -----------------------------------------------------------------
