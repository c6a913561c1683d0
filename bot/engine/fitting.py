"""A reply's prompt fitted into the model's context: what is left out first, and how the prompt's
tokens are counted before the server counts them.

A server refuses a prompt longer than its context (llama.cpp, vLLM: HTTP 400) or cuts its start
in silence (Ollama: the persona and the rules go first). The turn therefore fits its prompt into
the context it knows, leaving room for the answer: the oldest lines of the conversation go
first, one at a time, then the weakest memory slots (the reverse of the order the selection
chose them in, pinned memories last). The character, the rules, the story, the lore and the
message itself are the minimum: when even they do not fit, the context is too small and the
person is told so, never asked to try again.

Tokens are counted from characters, at a rate measured on the server's own counts (the
`prompt_tokens` of each answer, the counts of a refusal); before any count, DEFAULT_CHARS_PER_TOKEN,
what SmolLM2's tokenizer reads in French, the most token-hungry of the catalogue's languages on
the models measured. A count too low is caught by the server's refusal, which says the exact
figures: the rate is corrected from it and the turn fitted again, once.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from bot.clients.llm_wire import ChatMessage
from bot.engine.prompting import ChannelLine
from bot.errors import LLMContextExceeded
from bot.memory.model import Memory

# Measured with llama.cpp's /tokenize on Écho's reply prompt: 2,495 characters of French and
# English are 824 tokens for SmolLM2 (3.03 characters a token); qwen2.5 reads the same French at
# about 4.5. Used until the server has counted one prompt.
DEFAULT_CHARS_PER_TOKEN = 3.0
# A chat template wraps each message in its role's markers: 4 to 6 tokens in ChatML.
MESSAGE_TOKENS = 8
# Prompts shorter than this say more about the template than about the text: not measured.
MIN_MEASURED_CHARS = 500
# The rate is the most token-hungry of the last measures: a short conversation in another
# language changes it within this many calls.
MEASURES_KEPT = 64
# Room left for the answer: an eighth of the context, within these bounds. 1,024 tokens are two
# Discord messages of French; 128, three or four sentences, what a small context can give.
MIN_ANSWER_TOKENS = 128
MAX_ANSWER_TOKENS = 1024


def answer_room(context_tokens: int) -> int:
    """Tokens of the context kept for the model's answer."""
    return max(MIN_ANSWER_TOKENS, min(MAX_ANSWER_TOKENS, context_tokens // 8))


def prompt_chars(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(str(m.get("content", ""))) for m in messages)


@dataclass(slots=True)
class TokenRate:
    """Characters per token, from the server's own counts of the prompts it read."""

    measures: deque[float] = field(default_factory=lambda: deque(maxlen=MEASURES_KEPT))

    @property
    def measured(self) -> bool:
        return bool(self.measures)

    @property
    def chars_per_token(self) -> float:
        return min(self.measures) if self.measures else DEFAULT_CHARS_PER_TOKEN

    def observe(self, messages: Sequence[Mapping[str, Any]], prompt_tokens: int | None) -> None:
        """One prompt and the tokens the server counted in it (its whole prompt: a server that
        counts only what it did not have cached gives a rate too high, which `min` ignores)."""
        chars = prompt_chars(messages)
        text_tokens = (prompt_tokens or 0) - MESSAGE_TOKENS * len(messages)
        if chars >= MIN_MEASURED_CHARS and text_tokens > 0:
            self.measures.append(chars / text_tokens)

    def tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """The prompt's tokens as this rate counts them."""
        return math.ceil(prompt_chars(messages) / self.chars_per_token) + MESSAGE_TOKENS * len(messages)


@dataclass(frozen=True, slots=True)
class Fitted:
    """The messages sent, and what was left out of them to fit."""

    messages: list[ChatMessage]
    tokens: int  # as counted before sending
    history_left_out: int = 0  # the oldest lines of the conversation
    memories_left_out: frozenset[int] = frozenset()  # ids of memory slots


class ContextTooSmall(Exception):
    """Even the smallest prompt (no history, no memory) does not fit the context."""

    def __init__(self, needed: int, context: int) -> None:
        super().__init__(f"the smallest prompt takes about {needed:,} tokens; the model's context holds {context:,}")
        self.needed = needed
        self.context = context


Build = Callable[[Sequence[ChannelLine], Sequence[Memory]], list[ChatMessage]]


def weakest_first(memories: Sequence[Memory]) -> list[Memory]:
    """The order memory slots leave a prompt that does not fit: the last chosen first (the
    selection chooses by strength: pinned, global, recalled, quotas, backfill), pinned last."""
    # reversed before a stable sort: among equals, the last chosen leaves first.
    return sorted(reversed(memories), key=lambda m: m.pinned)  # noqa: C414


def fit_prompt(
    build: Build,
    history: Sequence[ChannelLine],
    memories: Sequence[Memory],
    *,
    context_tokens: int,
    count: Callable[[Sequence[Mapping[str, Any]]], int],
) -> Fitted:
    """The prompt `build` makes of the most history and memories that fit `context_tokens` with
    room for the answer. Raises ContextTooSmall when the minimum does not fit."""
    budget = context_tokens - answer_room(context_tokens)
    messages = build(history, memories)
    if (tokens := count(messages)) <= budget:
        return Fitted(messages, tokens)
    for dropped in range(1, len(history) + 1):
        messages = build(history[dropped:], memories)
        if (tokens := count(messages)) <= budget:
            return Fitted(messages, tokens, history_left_out=dropped)
    left_out: set[int] = set()
    for memory in weakest_first(memories):
        left_out.add(memory.id)
        messages = build((), [m for m in memories if m.id not in left_out])
        if (tokens := count(messages)) <= budget:
            return Fitted(messages, tokens, history_left_out=len(history), memories_left_out=frozenset(left_out))
    raise ContextTooSmall(tokens + answer_room(context_tokens), context_tokens)


def fit_turn(
    build: Build,
    history: Sequence[ChannelLine],
    memories: Sequence[Memory],
    context_tokens: int | None,
    rate: TokenRate,
) -> Fitted:
    """A turn's prompt fitted at the server's rate. Before the server has counted a prompt, a
    minimum that seems not to fit is sent all the same: the server counts, and says if it does
    not fit (the refusal teaches the rate and the context)."""
    if context_tokens is None:
        messages = build(history, memories)
        return Fitted(messages, rate.tokens(messages))
    try:
        return fit_prompt(build, history, memories, context_tokens=context_tokens, count=rate.tokens)
    except ContextTooSmall:
        if rate.measured:
            raise
        minimum = build((), ())
        return Fitted(minimum, rate.tokens(minimum), len(history), frozenset(m.id for m in memories))


class ContextKnown(Protocol):
    """What the model calls know of the context (bot/engine/llm_calls.py, ModelCalls)."""

    def context_tokens(self) -> int | None: ...

    def rate(self, model: str) -> TokenRate: ...

    def context_too_small(self, error: ContextTooSmall) -> None: ...


Answer = TypeVar("Answer")


async def answer_fitted(
    build: Build,
    history: Sequence[ChannelLine],
    memories: Sequence[Memory],
    calls: ContextKnown,
    model: str,
    ask: Callable[[list[ChatMessage]], Awaitable[Answer]],
) -> tuple[Fitted, Answer]:
    """The prompt fitted, and what `ask` got for it. A server that refuses the prompt as longer
    than its context has said its context and the prompt's tokens (`calls` learnt them): fitted
    again on them, once. Raises ContextTooSmall (told to `calls`), or what `ask` raises."""
    try:
        fitted = fit_turn(build, history, memories, calls.context_tokens(), calls.rate(model))
        try:
            return fitted, await ask(fitted.messages)
        except LLMContextExceeded:
            fitted = fit_turn(build, history, memories, calls.context_tokens(), calls.rate(model))
            try:
                return fitted, await ask(fitted.messages)
            except LLMContextExceeded as again:
                context = again.context_tokens or calls.context_tokens() or 0
                raise ContextTooSmall(again.prompt_tokens or fitted.tokens, context) from again
    except ContextTooSmall as exc:
        calls.context_too_small(exc)
        raise
