"""The engine's calls to the language model: each in its turn of the model's budget (live
replies first: bot/clients/model_queue.py), timed, their tokens counted (read and reused, as
the server says), a full context reported once, a runaway streamed reply stopped, and the reply
as it is sent. Also what the engine knows of the model's context: its size, where it was read,
and how many characters make a token on this server (bot/engine/fitting.py fits prompts in it)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import secrets
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.clients.llm import LLMClient, OnText
from bot.clients.llm_wire import ChatMessage, ChatReply, TokenUsage
from bot.clients.metrics import QUEUE_PRIORITIES, Metrics
from bot.clients.model_queue import ModelBudget, Priority
from bot.config import EngineSettings
from bot.engine.fitting import ContextTooSmall, TokenRate
from bot.errors import LLMContextExceeded
from bot.memory.model import utcnow
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


@dataclass(slots=True)
class CallTotals:
    """One kind of call's prompts since start-up, as the server counted them."""

    calls: int = 0
    prompt_tokens: int = 0  # counted by the server
    reused_tokens: int = 0  # of those, taken from its cache (where the server says)
    read_seconds: float = 0.0  # the server's time reading the rest (where it says)
    counted: int = 0  # calls whose answer said how many tokens the prompt had
    cache_counted: int = 0  # calls whose answer said how many were reused

    @property
    def read_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens


@dataclass(frozen=True, slots=True)
class TooSmall:
    """The last turn whose smallest prompt did not fit the model's context."""

    needed: int
    context: int
    at: datetime


# Each kind of call's place in the model's budget.
PRIORITIES = {
    "reply": Priority.LIVE,
    "checkin": Priority.FOLLOW_UP,
    "reflection": Priority.REFLECTION,
    "consolidation": Priority.CONSOLIDATION,
    "import": Priority.IMPORT,
}


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """The language model as the bot knows it: its server, its context and where it was read,
    the last turn that could not fit even its smallest prompt, and each kind of call's prompts
    since start-up (the owner's page shows them)."""

    server: str
    context: int | None
    context_source: str
    too_small: TooSmall | None
    totals: dict[str, CallTotals]
    # Each priority's last waits for a place in the model's budget, in seconds.
    waits: dict[str, list[float]]


class ModelCalls:
    def __init__(self, llm: LLMClient, metrics: Metrics, settings: EngineSettings) -> None:
        self.llm = llm
        self.metrics = metrics
        context_tokens = settings.llm_context_tokens
        # LLM_CONCURRENCY places, shared by every call of the engine.
        self.budget = ModelBudget(settings.concurrency(llm.api))
        metrics.watch_model_queue(lambda priority: self.budget.waiting(Priority[priority.upper()]))
        # LLM_CONTEXT_TOKENS: the context assumed of a server that does not say its own.
        self.setting_context = context_tokens
        # What a refusal said the context is (llama.cpp's n_ctx): it outranks what was read.
        self.refused_at: int | None = None
        self.rates: defaultdict[str, TokenRate] = defaultdict(TokenRate)
        self.totals: defaultdict[str, CallTotals] = defaultdict(CallTotals)
        self.too_small: TooSmall | None = None
        # Calls (reply, reflection) whose full context was already reported in the log.
        self._context_warned: set[str] = set()
        self._too_small_warned = False
        # The conversation keys' salt: a key names a conversation to the server, never a person
        # (Discord ids are public and few enough to hash them all). Per process: after a
        # restart a router may place a conversation on another server once.
        self._salt = secrets.token_bytes(16)

    def conversation_key(self, user_id: str, story_id: str) -> str:
        """The key a router or a provider keeps one conversation on one cache with
        (`prompt_cache_key`): a salted hash of who and where, nothing readable."""
        digest = hmac.new(self._salt, f"{user_id}\x00{story_id}".encode(), hashlib.sha256)
        return "echo-" + digest.hexdigest()[:32]

    def context_tokens(self) -> int | None:
        """The context one call may fill, as known: what a refusal said, else what the server
        says (for Ollama, the num_ctx asked, within the model's own), else LLM_CONTEXT_TOKENS."""
        if self.refused_at is not None:
            return self.refused_at
        server = self.llm.server
        said = server.context_tokens if server is not None else None
        if self.llm.api == "ollama" and self.llm.context_tokens is not None:
            return min(self.llm.context_tokens, said) if said else self.llm.context_tokens
        return said or self.setting_context

    def context_source(self) -> str:
        """Where the context size was read, for the owner's page and doctor."""
        if self.refused_at is not None:
            return "the server's refusal of a longer prompt"
        server = self.llm.server
        if self.llm.api == "ollama":
            return "num_ctx (LLM_CONTEXT_TOKENS)"
        if server is not None and server.context_tokens:
            return {"llama.cpp": "llama.cpp /props n_ctx", "vllm": "vLLM max_model_len"}.get(
                server.kind, "the server's model list"
            )
        return "LLM_CONTEXT_TOKENS (the server does not say)"

    def figures(self) -> ModelFigures:
        server = self.llm.server
        return ModelFigures(
            server=server.kind if server is not None else self.llm.api,
            context=self.context_tokens(),
            context_source=self.context_source(),
            too_small=self.too_small,
            totals={call: dataclasses.replace(totals) for call, totals in sorted(self.totals.items())},
            waits={priority: list(self.metrics.recent_waits[priority]) for priority in QUEUE_PRIORITIES},
        )

    def rate(self, model: str) -> TokenRate:
        return self.rates[model]

    def learn(self, exc: LLMContextExceeded, messages: Sequence[ChatMessage], model: str) -> None:
        """A refusal says the context and the prompt's tokens: both are kept."""
        if exc.context_tokens:
            self.refused_at = exc.context_tokens
        self.rates[model].observe(messages, exc.prompt_tokens)

    def context_too_small(self, error: ContextTooSmall) -> None:
        """A turn could not fit even its smallest prompt: logged once, counted, kept for the page."""
        self.too_small = TooSmall(error.needed, error.context, utcnow())
        self.metrics.context_too_small.inc()
        if not self._too_small_warned:
            self._too_small_warned = True
            log.warning(
                "the model's context is too small for the bot's prompts (%s): messages are not answered "
                "and their authors are told why. Give the model a larger context (llama.cpp -c, vLLM "
                "--max-model-len, Ollama LLM_CONTEXT_TOKENS); later ones are counted "
                "(echo_prompt_context_too_small_total, the owner's page), not logged",
                error,
            )

    async def chat(
        self, call: str, messages: Sequence[ChatMessage], *, cache_key: str | None = None, **options: Any
    ) -> ChatReply:
        """One LLM call in its turn, timed and its tokens counted; a full context is logged once
        and counted."""
        priority = PRIORITIES[call]
        async with self.budget.place(priority, self.metrics.queue_waited(priority.label)):
            started = time.perf_counter()
            try:
                answer = await self.llm.chat(messages, cache_key=cache_key, **options)
            except LLMContextExceeded as exc:
                self.learn(exc, messages, options.get("model", ""))
                raise
            finally:
                self.metrics.llm_seconds.labels(call).observe(time.perf_counter() - started)
        self._count_tokens(call, answer, messages, options.get("model", ""))
        return answer

    async def stream_reply(
        self,
        messages: list[ChatMessage],
        on_text: OnText,
        *,
        model: str,
        timeout: float,
        cache_key: str | None = None,
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

        async with self.budget.place(Priority.LIVE, self.metrics.queue_waited(Priority.LIVE.label)):
            started = time.perf_counter()
            try:
                answer = await self.llm.stream(
                    messages, model=model, on_text=shown, timeout=timeout, cache_key=cache_key
                )
            except _LongEnough:
                answer = ChatReply(latest, TokenUsage(None, None), "length")
            except LLMContextExceeded as exc:
                self.learn(exc, messages, model)
                raise
            finally:
                self.metrics.llm_seconds.labels("reply").observe(time.perf_counter() - started)
        self._count_tokens("reply", answer, messages, model)
        return answer

    def _count_tokens(self, call: str, answer: ChatReply, messages: Sequence[ChatMessage], model: str) -> None:
        usage = answer.usage
        totals = self.totals[call]
        totals.calls += 1
        if usage.prompt_tokens is not None:
            self.metrics.prompt_tokens.labels(call).observe(usage.prompt_tokens)
            if not self.context_full(answer):  # a cut prompt's count is the context's, not the text's
                self.rates[model].observe(messages, usage.prompt_tokens)
            totals.counted += 1
            totals.prompt_tokens += usage.prompt_tokens
            # Of the prompt, what the server read, and what it took from its cache when it says.
            reused = min(usage.cached_tokens or 0, usage.prompt_tokens)
            totals.reused_tokens += reused
            self.metrics.prompt_tokens_read.labels(call).inc(usage.prompt_tokens - reused)
            if usage.cached_tokens is not None:
                totals.cache_counted += 1
                self.metrics.prompt_tokens_reused.labels(call).inc(reused)
        if usage.prompt_ms is not None:
            totals.read_seconds += usage.prompt_ms / 1000
            self.metrics.prompt_read_seconds.labels(call).inc(usage.prompt_ms / 1000)
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
                    call,
                    usage.prompt_tokens,
                    self.llm.context_tokens,
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
