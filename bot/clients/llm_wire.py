"""The two chat APIs' wire formats, as pure functions: the request body of a chat call, a
message with its images in each API's shape, the token counts each API reports, and the
reasoning a model prints before its answer. No I/O: bot/clients/llm.py sends and reads.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.clients.kinds import Api

# Name sent in OpenAI's response_format.json_schema; the API requires one.
SCHEMA_NAME = "reflection"

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Image:
    """An image shown to a vision model with a message."""

    name: str
    mime: str
    data: bytes


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens of one call as the server counted them; None when it did not say."""

    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass(frozen=True, slots=True)
class ChatReply:
    text: str  # thinking stripped, made storable
    usage: TokenUsage
    stop_reason: str | None = None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def token_usage(api: Api, data: Mapping[str, Any]) -> TokenUsage:
    """Ollama counts at the top level (prompt_eval_count, eval_count), OpenAI under `usage`."""
    if api == "ollama":
        return TokenUsage(_count(data.get("prompt_eval_count")), _count(data.get("eval_count")))
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        return TokenUsage(None, None)
    return TokenUsage(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")))


def strip_thinking(text: str) -> str:
    """The answer without the model's `<think>…</think>` reasoning, trimmed."""
    text = _THINK_BLOCK.sub("", text)
    # Some chat templates open the block inside the prompt, so only the closing tag reaches us.
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    # A block still open means generation stopped while thinking: nothing after it is an answer.
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text.strip()


def request_body(
    api: Api,
    messages: Sequence[Mapping[str, Any]],
    *,
    model: str,
    json_schema: dict[str, Any] | None,
    temperature: float | None,
    stream: bool,
    context_tokens: int | None,
) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of a chat call; a message's `images` (raw bytes) go in the API's
    own shape: Ollama's base64 `images`, OpenAI's `image_url` content parts."""
    wire = [wire_message(api, m) for m in messages]
    body: dict[str, Any] = {"model": model, "messages": wire, "stream": stream}
    if api == "ollama":
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
    return "/v1/chat/completions", body


def wire_message(api: Api, message: Mapping[str, Any]) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    images: Sequence[Image] = message.get("images") or ()
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
