"""The two chat APIs' wire formats, as pure functions: the request body of a chat call, a
message with its images in each API's shape, the token counts each API reports, and the
reasoning a model prints before its answer. No I/O: bot/clients/llm.py sends and reads.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from bot.clients.kinds import Api

# Name sent in OpenAI's response_format.json_schema; the API requires one.
SCHEMA_NAME = "reflection"

_OPEN = "<think>"
_CLOSE = "</think>"


@dataclass(frozen=True, slots=True)
class Image:
    """An image shown to a vision model with a message."""

    name: str
    mime: str
    data: bytes


class ChatMessage(TypedDict):
    """One message of a chat call, as the engine writes it; the wire shape is each API's
    (`wire_message`)."""

    role: Literal["system", "user", "assistant"]
    content: str
    # Shown to a vision model with the message (the last user message of a reply call).
    images: NotRequired[list[Image]]


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens of one call as the server counted them; None when it did not say.

    `cached_tokens`: of the prompt's tokens, those the server took from its cache instead of
    reading them (llama.cpp's `timings.cache_n`, OpenAI's `prompt_tokens_details.cached_tokens`,
    Ollama's `prompt_eval_cached_count` where it has one); `prompt_ms`: how long the server read
    the rest (llama.cpp's `timings.prompt_ms`, Ollama's `prompt_eval_duration`)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None = None
    prompt_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ChatReply:
    text: str  # thinking stripped, made storable
    usage: TokenUsage
    stop_reason: str | None = None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _milliseconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0 or value == float("inf"):
        return None
    return float(value)


def token_usage(api: Api, data: Mapping[str, Any]) -> TokenUsage:
    """Ollama counts at the top level (prompt_eval_count, eval_count, durations in ns), OpenAI
    under `usage`; llama.cpp adds its `timings` beside it."""
    if api == "ollama":
        duration = _milliseconds(data.get("prompt_eval_duration"))
        return TokenUsage(
            _count(data.get("prompt_eval_count")),
            _count(data.get("eval_count")),
            _count(data.get("prompt_eval_cached_count")),
            None if duration is None else duration / 1e6,
        )
    usage = data.get("usage")
    timings = data.get("timings")
    timings = timings if isinstance(timings, Mapping) else {}
    if not isinstance(usage, Mapping):
        return TokenUsage(None, None)
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    if cached is None:
        cached = _count(timings.get("cache_n"))
    return TokenUsage(
        _count(usage.get("prompt_tokens")),
        _count(usage.get("completion_tokens")),
        cached,
        _milliseconds(timings.get("prompt_ms")),
    )


def strip_thinking(text: str) -> str:
    """The answer without the model's `<think>…</think>` reasoning, trimmed."""
    thinking = Thinking()
    thinking.feed(text)
    return thinking.answer(final=True)


class Thinking:
    """A streamed answer split from the reasoning a model prints before it, piece by piece:
    each piece costs its own length, however long the stream already is (a runaway `<think>`
    never closed must not be read again at every piece).

    A `<think>…</think>` block is reasoning; a `</think>` with no block open ends reasoning that
    began in the prompt (some chat templates open the block there), so what came before it was
    reasoning too; a block still open means generation stopped while thinking."""

    def __init__(self) -> None:
        self._answer: list[str] = []
        self._text = ""
        self._dirty = False  # `_text` is behind `_answer`
        self._changed = False  # during one `feed`
        self._inside = False
        # The end of the last piece when it may be the start of a tag, kept until it is known.
        self._tail = ""
        self.hidden_chars = 0

    def feed(self, piece: str) -> bool:
        """Read one more piece; True when the answer so far changed."""
        text = self._tail + piece
        self._tail = ""
        self._changed = False
        start = 0
        while (at := text.find("<", start)) >= 0:
            self._take(text[start:at])
            head = text[at : at + len(_CLOSE)].lower()
            if head.startswith(_OPEN):
                self._inside = True
                start = at + len(_OPEN)
            elif head.startswith(_CLOSE) and not self._inside:
                self._answer.clear()
                self._changed = self._dirty = True
                start = at + len(_CLOSE)
            elif head.startswith(_CLOSE):
                self._inside = False
                # The block's removal joins what stood before it to what follows: a tag's start
                # just before ("<thi") is read again with the text after ("nk>").
                text = self._tag_start() + text[at + len(_CLOSE) :]
                start = 0
            elif len(head) < len(_CLOSE) and (_OPEN.startswith(head) or _CLOSE.startswith(head)):
                self._tail = text[at:]
                return self._changed
            else:
                self._take("<")
                start = at + 1
        self._take(text[start:])
        return self._changed

    def answer(self, *, final: bool = False) -> str:
        """The answer so far, trimmed; `final`: the stream has ended, so a tag's possible start
        held back is plain text after all."""
        if final and self._tail:
            self._take(self._tail)
            self._tail = ""
        if self._dirty:
            joined = "".join(self._answer)
            self._answer = [joined]
            self._text = joined.strip()
            self._dirty = False
        return self._text

    def _tag_start(self) -> str:
        """The end of the answer when it may be the start of a tag, taken out of the answer: at
        most a tag's length is looked at, so the work stays bounded by the piece."""
        end, i = "", len(self._answer)
        while i > 0 and len(end) < len(_CLOSE) - 1:
            i -= 1
            end = self._answer[i][-(len(_CLOSE) - 1 - len(end)) :] + end
        at = end.rfind("<")
        start = end[at:] if at >= 0 else ""
        if not start or not (_OPEN.startswith(start.lower()) or _CLOSE.startswith(start.lower())):
            return ""
        left = len(start)
        while left:
            last = self._answer.pop()
            if len(last) > left:
                self._answer.append(last[:-left])
                break
            left -= len(last)
        self._changed = self._dirty = True
        return start

    def _take(self, text: str) -> None:
        if not text:
            return
        if self._inside:
            self.hidden_chars += len(text)
        else:
            self._answer.append(text)
            self._changed = self._dirty = True


def request_body(
    api: Api,
    messages: Sequence[ChatMessage],
    *,
    model: str,
    json_schema: dict[str, Any] | None,
    temperature: float | None,
    stream: bool,
    context_tokens: int | None,
    keep_alive: str | None = None,
    cache_prompt: bool = False,
    cache_key: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of a chat call; a message's `images` (raw bytes) go in the API's
    own shape: Ollama's base64 `images`, OpenAI's `image_url` content parts.

    What the server is told besides the chat (docs/llm-servers.md): Ollama, how long to keep
    the model loaded after the call (`keep_alive`) and the context (`num_ctx`, the same on every
    call: a change reloads the model); an OpenAI-compatible server, the conversation's
    `prompt_cache_key` (a router or a provider keeps it on one cache) and, for llama.cpp,
    `cache_prompt`."""
    wire = [wire_message(api, m) for m in messages]
    body: dict[str, Any] = {"model": model, "messages": wire, "stream": stream}
    if api == "ollama":
        if keep_alive is not None:
            body["keep_alive"] = _keep_alive(keep_alive)
        if json_schema is not None:
            body["format"] = json_schema
        options: dict[str, Any] = {}
        if temperature is not None:
            options["temperature"] = temperature
        if context_tokens is not None:
            options["num_ctx"] = context_tokens
        if options:
            body["options"] = options
        return "/api/chat", body
    if json_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": json_schema, "strict": False},
        }
    if temperature is not None:
        body["temperature"] = temperature
    if stream:
        body["stream_options"] = {"include_usage": True}
    if cache_prompt:
        body["cache_prompt"] = True
    if cache_key is not None:
        body["prompt_cache_key"] = cache_key
    return "/v1/chat/completions", body


def _keep_alive(value: str) -> str | int | float:
    """Ollama reads a string as a duration with its unit ("30m") and seconds as a JSON number
    (a string "-1" has no unit and is refused)."""
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number


def wire_message(api: Api, message: ChatMessage) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    images = message.get("images") or ()
    if not images:
        return wire
    if api == "ollama":
        wire["images"] = [base64.b64encode(image.data).decode() for image in images]
    else:
        wire["content"] = [{"type": "text", "text": message["content"]}] + [
            {
                "type": "image_url",
                "image_url": {"url": f"data:{image.mime};base64,{base64.b64encode(image.data).decode()}"},
            }
            for image in images
        ]
    return wire
