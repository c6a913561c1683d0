"""A chat server as the client reads it: its answers (a body bounded in size, a stream's lines
and events), and its failures told to the person running the bot (its name, its address without
credentials, its answers quoted without the API key, and what to do about each failure).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from bot.clients.kinds import Api
from bot.clients.llm_wire import TokenUsage, token_usage
from bot.errors import LLMBadResponse, LLMContextExceeded, LLMTooLarge, ModelNotFound

# A chat answer is a few KB (a long reasoning trace, a few hundred): past this, the model is
# looping, and its answer is dropped before it fills the memory.
MAX_RESPONSE_BYTES = 2_000_000
# A proxy's HTML error page quoted whole would bury the one line that matters.
MAX_QUOTED_CHARS = 500
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
    r"maximum context length is (?P<context>\d+) tokens.*?(?:requested|resulted in) (?P<prompt>\d+) tokens",
    re.IGNORECASE | re.DOTALL,
)
_LLAMA_FIGURES = re.compile(
    r"request \((?P<prompt>\d+) tokens\).*?context size \((?P<context>\d+) tokens\)", re.IGNORECASE
)


def without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def connect_failure(exc: BaseException) -> str:
    """Why a connection failed; httpx words a refusal "All connection attempts failed"."""
    cause: BaseException | None = exc
    visited: set[int] = set()
    while cause is not None and id(cause) not in visited:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        visited.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return str(exc) or "connection failed"


def count_of(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _length(text: Any) -> int:
    return len(text) if isinstance(text, str) else 0


def _line_end(buffer: bytearray, start: int) -> int:
    """Where the first line of `buffer` at or after `start` ends (at its CR or LF), -1 if none."""
    newline = buffer.find(b"\n", start)
    carriage = buffer.find(b"\r", start, newline if newline >= 0 else len(buffer))
    return carriage if carriage >= 0 else newline


@dataclass(frozen=True, slots=True)
class LLMServer:
    api: Api
    # The base URL, without a trailing slash (nor OpenAI's /v1).
    root: str
    api_key: str | None

    @property
    def name(self) -> str:
        return "Ollama server" if self.api == "ollama" else "OpenAI-compatible server"

    def url(self, path: str) -> str:
        return without_credentials(self.root + path)

    def unreachable_message(self, path: str, reason: str) -> str:
        if self.api == "ollama":
            advice = (
                "Start Ollama with `ollama serve` (or the Ollama app), or set LLM_BASE_URL to the "
                "address where it runs."
            )
        else:
            advice = "Check that the server is running, or set LLM_BASE_URL to the address where it runs."
        return f"Cannot reach the {self.name} at {self.url(path)} ({reason}). {advice}"

    def scrub(self, text: str) -> str:
        # A proxy may echo the request headers back in its error page.
        return text.replace(self.api_key, "***") if self.api_key else text

    def quote(self, text: str) -> str:
        text = self.scrub(" ".join(text.split()))
        if len(text) > MAX_QUOTED_CHARS:
            text = text[:MAX_QUOTED_CHARS] + "…"
        return repr(text) if text else "(empty body)"

    def error_text(self, response: httpx.Response) -> str:
        """The server's own explanation, from whichever error shape it uses."""
        try:
            data = response.json()
        except ValueError:
            return self.quote(response.text)
        if isinstance(data, dict):
            error = data.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return self.quote(error["message"])
            for candidate in (error, data.get("message"), data.get("detail")):
                if isinstance(candidate, str):
                    return self.quote(candidate)
        return self.quote(response.text)

    def raise_if_model_missing(self, response: httpx.Response, model: str) -> None:
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
            raise ModelNotFound(self.missing_model_message(model, server_said=self.quote(message)), model=model)

    def missing_model_message(
        self, model: str, *, listed: list[str] | None = None, server_said: str | None = None
    ) -> str:
        root = without_credentials(self.root)
        where = f"The {self.name} at {root} does not have the model {model!r}"
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

    def raise_for_status(self, response: httpx.Response, path: str) -> None:
        status = response.status_code
        if status < 400:
            return
        if status in (400, 413) and (exceeded := self.context_exceeded(response)) is not None:
            raise exceeded
        hint = ""
        if status in (401, 403):
            hint = " Check the API key (LLM_API_KEY)."
        elif status == 404:
            hint = f" Is LLM_BASE_URL the address of an {self.name}?"
        raise LLMBadResponse(
            f"The {self.name} at {self.url(path)} answered HTTP {status}: {self.error_text(response)}.{hint}",
            status=status,
        )

    def context_exceeded(self, response: httpx.Response) -> LLMContextExceeded | None:
        """The server's refusal of a prompt longer than its context, with its counts, or None."""
        said = self.error_text(response)
        try:
            data = response.json()
        except ValueError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        fields = error if isinstance(error, dict) else {}
        kind = " ".join(str(fields.get(k, "")) for k in ("type", "code"))
        if not (_CONTEXT_EXCEEDED.search(said) or _CONTEXT_EXCEEDED.search(kind)):
            return None
        prompt, context = count_of(fields.get("n_prompt_tokens")), count_of(fields.get("n_ctx"))
        figures = _CONTEXT_FIGURES.search(said) or _LLAMA_FIGURES.search(said)
        if figures is not None:
            prompt = prompt or int(figures["prompt"])
            context = context or int(figures["context"])
        sizes = f" ({prompt:,} tokens for {context:,})" if prompt and context else ""
        return LLMContextExceeded(
            f"The {self.name} at {without_credentials(self.root)} refused a prompt longer than "
            f"its context{sizes}: {said}. A retry cannot work; raise the server's context (llama.cpp "
            "-c, vLLM --max-model-len) or LLM_CONTEXT_TOKENS to what it holds.",
            status=response.status_code,
            prompt_tokens=prompt,
            context_tokens=context,
        )

    def json(self, response: httpx.Response, path: str) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise LLMBadResponse(
                f"The {self.name} at {self.url(path)} answered something "
                f"that is not a JSON object: {self.quote(response.text)}",
                status=response.status_code,
            )
        return data

    def extract(self, data: dict[str, Any], path: str) -> tuple[str, str | None]:
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
            where = '["message"]["content"]' if self.api == "ollama" else '["choices"][0]["message"]["content"]'
            raise LLMBadResponse(
                f"The {self.name} at {self.url(path)} answered JSON without a "
                f"text at {where}: {self.quote(json.dumps(data, ensure_ascii=False))}"
            )
        return content, stop

    async def events(self, response: httpx.Response, path: str) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of a stream: Ollama's NDJSON lines or OpenAI's SSE `data:` lines."""
        async for raw in self.lines(response, path):
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
                    f"The {self.name} at {self.url(path)} streamed something that is not a "
                    f"JSON object: {self.quote(line)}"
                )
            yield event

    async def lines(self, response: httpx.Response, path: str) -> AsyncIterator[bytes]:
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
                    f"The {self.name} at {self.url(path)} sent more than "
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

    def stream_event(self, event: dict[str, Any], path: str) -> tuple[str, int, str | None, TokenUsage | None]:
        """(text piece, characters of reasoning sent beside it, stop reason when finished, usage
        when given) of one stream event. Reasoning in a field of its own (Ollama's `thinking`,
        `reasoning_content` or `reasoning` of OpenAI-compatible servers) is never shown, only
        counted against MAX_THINKING_CHARS."""
        error = event.get("error")
        if error is not None:
            said = error.get("message") if isinstance(error, dict) else error
            raise LLMBadResponse(
                f"The {self.name} at {self.url(path)} reported an error mid-answer: {self.quote(str(said))}"
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
                f"The {self.name} at {self.url(path)} streamed an event of an unexpected "
                f"shape: {self.quote(json.dumps(event, ensure_ascii=False))}"
            ) from None

    async def read_bounded(self, response: httpx.Response, path: str) -> bytes:
        """The body, refused past MAX_RESPONSE_BYTES before it is all in memory."""
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_RESPONSE_BYTES:
                raise LLMTooLarge(
                    f"The {self.name} at {self.url(path)} sent more than "
                    f"{MAX_RESPONSE_BYTES // 1_000_000} MB for one answer; it was dropped. A "
                    "model that does not stop is usually missing its stop token or output limit."
                )
        return bytes(body)
