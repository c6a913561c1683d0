"""The engine's calls to the language model: timed, their tokens counted, a full context
reported once, a runaway streamed reply stopped, and the reply as it is sent."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from bot.clients.llm import LLMClient, OnText
from bot.clients.llm_wire import ChatMessage, ChatReply, TokenUsage
from bot.clients.metrics import Metrics
from bot.memory.text import storable

log = logging.getLogger(__name__)

# Ollama keeps the end of a prompt longer than its context (num_ctx) and counts what it kept
# (prompt_eval_count, cached tokens included), so a cut prompt reads as the context size: one
# counted within 2 % of it is taken as cut.
CONTEXT_FULL_RATIO = 0.98
# A reply longer than this is cut: a runaway generation must not become hundreds of Discord
# messages: this is two or three of them.
MAX_REPLY_CHARS = 4000


class _LongEnough(Exception):
    """Stops a streamed reply that went past MAX_REPLY_CHARS."""


class ModelCalls:
    def __init__(self, llm: LLMClient, metrics: Metrics) -> None:
        self.llm = llm
        self.metrics = metrics
        # Calls (reply, reflection) whose full context was already reported in the log.
        self._context_warned: set[str] = set()

    async def chat(self, call: str, messages: Sequence[ChatMessage], **options: Any) -> ChatReply:
        """One LLM call, timed and its tokens counted; a full context is logged once and counted."""
        started = time.perf_counter()
        try:
            answer = await self.llm.chat(messages, **options)
        finally:
            self.metrics.llm_seconds.labels(call).observe(time.perf_counter() - started)
        self._count_tokens(call, answer)
        return answer

    async def stream_reply(
        self, messages: list[ChatMessage], on_text: OnText, *, model: str, timeout: float
    ) -> ChatReply:
        """The streamed reply, timed and counted like `chat`; a runaway one is stopped once past
        MAX_REPLY_CHARS rather than read to the timeout, since no more of it would be shown."""
        latest = ""

        async def shown(text: str) -> None:
            nonlocal latest
            latest = text
            if len(text) > MAX_REPLY_CHARS:
                raise _LongEnough
            await on_text(text)

        started = time.perf_counter()
        try:
            answer = await self.llm.stream(messages, model=model, on_text=shown, timeout=timeout)
        except _LongEnough:
            answer = ChatReply(latest, TokenUsage(None, None), "length")
        finally:
            self.metrics.llm_seconds.labels("reply").observe(time.perf_counter() - started)
        self._count_tokens("reply", answer)
        return answer

    def _count_tokens(self, call: str, answer: ChatReply) -> None:
        usage = answer.usage
        if usage.prompt_tokens is not None:
            self.metrics.prompt_tokens.labels(call).observe(usage.prompt_tokens)
        if usage.completion_tokens is not None:
            self.metrics.completion_tokens.labels(call).inc(usage.completion_tokens)
        if self.context_full(answer):
            self.metrics.context_full.labels(call).inc()
            if call not in self._context_warned:
                self._context_warned.add(call)
                log.warning(
                    "a %s prompt of %d tokens reached the context size (LLM_CONTEXT_TOKENS=%d): the "
                    "server dropped its start, where the persona and the rules are. Raise "
                    "LLM_CONTEXT_TOKENS or lower HISTORY_CHARS; later cuts are counted "
                    "(echo_prompt_context_full, the owner's page), not logged",
                    call, usage.prompt_tokens, self.llm.context_tokens,
                )

    def context_full(self, answer: ChatReply) -> bool:
        context, prompt = self.llm.context_tokens, answer.usage.prompt_tokens
        return context is not None and prompt is not None and prompt >= context * CONTEXT_FULL_RATIO


def final_reply(reply: str, *, max_chars: int | None = None) -> str:
    """The model's answer as sent: never empty, never a runaway (a runaway generation must not
    become hundreds of Discord messages)."""
    limit = min(MAX_REPLY_CHARS, max_chars or MAX_REPLY_CHARS)
    reply = storable(reply).strip() or "…"
    if len(reply) > limit:
        if limit == MAX_REPLY_CHARS:
            log.warning("a reply of %d characters was cut to %d", len(reply), limit)
        reply = reply[: limit - 1] + "…"
    return reply
