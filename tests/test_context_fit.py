"""A turn fits its prompt into the model's context: the oldest lines of the conversation leave
first, then the weakest memory slots, and `/why` says what was left out; when even the smallest
prompt does not fit, the person is told the model's context is too small (never to try again),
the message is kept, no request is sent in vain, the operator reads it once in the log and on
the owner's page. A server's refusal of a prompt longer than its context teaches the bot that
context, and the turn is fitted again on it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from bot.clients.llm import LLMClient
from bot.clients.metrics import Metrics
from bot.engine import Incoming
from bot.engine.fitting import (
    DEFAULT_CHARS_PER_TOKEN,
    ContextTooSmall,
    TokenRate,
    answer_room,
    fit_prompt,
    weakest_first,
)
from bot.engine.prompting import ChannelLine
from bot.memory.model import Memory, utcnow
from bot.presenting import turn_text, why_text
from tests.builders import DISTINCT_FACTS, make_engine
from tests.fakes.llm_server import FakeLLMServer, Reply

# -- the rule, on its own ----------------------------------------------------------------------


def _memory(i: int, *, pinned: bool = False) -> Memory:
    now = utcnow()
    return Memory(i, "u", f"memory {i:02d} " + "x" * 40, "fact", "global", pinned, 1.0, now, now)


def _build(lines, memories) -> list[dict]:
    return [
        {"role": "system", "content": "S" * 300 + "".join(m.text for m in memories)},
        *({"role": "user", "content": line.text} for line in lines),
        {"role": "user", "content": "the message"},
    ]


def _chars(messages) -> int:
    return sum(len(m["content"]) for m in messages)


LINES = [ChannelLine("Alice", f"line {i} " + "y" * 90) for i in range(6)]


def test_the_oldest_lines_leave_first_then_the_weakest_memories_pinned_last():
    memories = [_memory(1, pinned=True), *(_memory(i) for i in range(2, 8))]
    full = _chars(_build(LINES, memories))
    # Room for everything but two lines.
    fitted = fit_prompt(_build, LINES, memories, context_tokens=full - 150 + answer_room(full), count=_chars)
    assert fitted.history_left_out == 2 and not fitted.memories_left_out
    assert [m["content"] for m in fitted.messages[1:-1]] == [line.text for line in LINES[2:]]
    # Room for the minimum and two memories: every line left out, then the last chosen first.
    small = _chars(_build([], memories[:3]))
    fitted = fit_prompt(_build, LINES, memories, context_tokens=small + answer_room(small), count=_chars)
    assert fitted.history_left_out == len(LINES)
    assert fitted.memories_left_out == {7, 6, 5, 4}
    assert fitted.tokens <= small
    assert [m.id for m in weakest_first(memories)] == [7, 6, 5, 4, 3, 2, 1], "pinned last"


def test_when_even_the_minimum_does_not_fit_the_context_is_too_small_and_says_by_how_much():
    minimum = _chars(_build([], []))
    with pytest.raises(ContextTooSmall) as small:
        fit_prompt(_build, LINES, [_memory(1)], context_tokens=minimum, count=_chars)
    assert small.value.needed == minimum + answer_room(minimum) and small.value.context == minimum


def test_the_rate_is_the_most_token_hungry_the_server_counted():
    rate = TokenRate()
    prompt = [{"role": "user", "content": "z" * 3000}]
    assert not rate.measured and rate.chars_per_token == DEFAULT_CHARS_PER_TOKEN
    rate.observe(prompt, 1000 + 8)
    rate.observe(prompt, 500 + 8)  # a server that counted only what it had not cached
    rate.observe([{"role": "user", "content": "short"}], 40)  # the template, not the text
    assert rate.measured and rate.chars_per_token == 3.0
    assert rate.tokens(prompt) == 1000 + 8


# -- in a turn ---------------------------------------------------------------------------------


@dataclass
class Seeded:
    history: list[ChannelLine]
    memory_ids: list[int]


async def _seed(engine, n_memories: int = 24) -> Seeded:
    ids = [
        await engine.memories.remember("alice", f"L'utilisateur {fact}.", story_id="chan-1", place="guild-1")
        for fact in DISTINCT_FACTS[:n_memories]
    ]
    history = []
    for i in range(12):
        history.append(ChannelLine("Alice", f"Ligne {i} d'Alice sur sa journée au port, les bateaux et la pluie."))
        history.append(
            ChannelLine("Écho", f"Réponse {i} d'Écho, qui pose une question sur les bateaux.", from_bot=True)
        )
    return Seeded(history, ids)


def _incoming(text: str, history: list[ChannelLine]) -> Incoming:
    return Incoming(user_id="alice", user_name="Alice", text=text, story_id="chan-1", place="guild-1", history=history)


def _openai(http, llm_server: FakeLLMServer) -> LLMClient:
    return LLMClient(http, api="openai", base_url=llm_server.url)


async def test_a_turn_leaves_out_the_oldest_lines_then_the_weakest_memories_and_why_says_so(
    db, http, llm_server: FakeLLMServer, tmp_path
):
    """The fake counts a token per word; its counts teach the bot its rate on the first turn."""
    measuring = make_engine(db, http, llm_server, tmp_path, llm=_openai(http, llm_server), llm_context_tokens=8192)
    seeded = await _seed(measuring)
    bob = Incoming(user_id="bob", user_name="Bob", text="Salut", story_id="chan-9", place="guild-1")
    # Someone without memories, without a conversation: the smallest prompt, as the server counts it.
    await measuring.conversation.turn(bob)
    await measuring.operator.wait_reflections("bob")
    # Bob's reply (his reflection is sent after it).
    smallest = sum(
        len(str(m["content"]).split()) for m in [r for r in llm_server.chats if r.json_schema is None][-1].messages
    )
    # A context that holds the character and a few memories, not the conversation.
    context = smallest + 80 + answer_room(smallest)
    engine = make_engine(db, http, llm_server, tmp_path, llm=_openai(http, llm_server), llm_context_tokens=context)
    await engine.conversation.turn(bob)  # the rate, from the server's count
    await engine.operator.wait_reflections("bob")
    result = await engine.conversation.turn(_incoming("Tu te souviens des bateaux ?", seeded.history))
    assert result.reply is not None
    sent = [r for r in llm_server.chats if r.json_schema is None][-1]
    assert sum(len(str(m["content"]).split()) for m in sent.messages) <= context - answer_room(context)
    # The head, the turn's note (memories, story) and the message: no line of the conversation.
    assert [m["role"] for m in sent.messages] == ["system", "user", "user"], "no line of the conversation left"
    assert sent.last_user == "Alice: Tu te souviens des bateaux ?"
    selection = await engine.memories.why("alice", "chan-1")
    assert selection is not None
    figures = selection.figures
    assert figures.history_left_out == 12, "every line left before a memory did"
    left_out = [slot for slot in selection.slots if slot.left_out]
    assert figures.memories_left_out == len(left_out) > 0
    kept = [slot for slot in selection.slots if not slot.left_out]
    assert selection.slots[-len(left_out) :] == left_out, "the last chosen left first"
    system = sent.context
    assert all(s.text in system for s in kept)
    assert not any(s.text in system for s in left_out)
    text = why_text(selection)
    assert f"left out: 12 older lines of the conversation, {len(left_out)} memory slot" in text
    assert text.count("— left out to fit the context") == len(left_out)
    await engine.operator.wait_reflections("alice")


async def test_a_context_too_small_for_even_the_smallest_prompt_is_said_once_and_never_asked_again(
    db, http, llm_server: FakeLLMServer, tmp_path, caplog
):
    metrics = Metrics()
    engine = make_engine(
        db, http, llm_server, tmp_path, llm=_openai(http, llm_server), llm_context_tokens=8192, metrics=metrics
    )
    llm_server.context_tokens = 200  # the server refuses more, as llama.cpp does, and says so
    caplog.set_level(logging.WARNING)
    first = await engine.conversation.turn(_incoming("Bonjour, je m'appelle Alice.", []))
    asked = len(llm_server.chats)
    second = await engine.conversation.turn(_incoming("Tu es là ?", []))
    for result in (first, second):
        assert result.reply is None
        shown = turn_text(result)
        assert "context is too small" in shown and "try again" not in shown
        assert "the model holds 200" in shown
    assert asked == 1, "the smallest prompt was tried once, at a guessed rate; the refusal taught the rest"
    assert len(llm_server.chats) == asked, "nothing is sent that the server must refuse"
    warned = [r for r in caplog.records if "too small for the bot's prompts" in r.getMessage()]
    assert len(warned) == 1
    too_small = engine.operator.model_figures().too_small
    assert too_small is not None and too_small.context == 200
    assert b"echo_prompt_context_too_small_total 2.0" in metrics.exposition()
    async with db.reader.execute("SELECT user_message, reply FROM exchanges ORDER BY id") as cur:
        assert [tuple(row) for row in await cur.fetchall()] == [
            ("Bonjour, je m'appelle Alice.", None),
            ("Tu es là ?", None),
        ]
    selection = await engine.memories.why("alice", "chan-1")
    assert selection is not None and selection.figures.context_too_small
    assert "too small for even the smallest prompt" in why_text(selection)
    await engine.operator.wait_reflections("alice")


async def test_a_refusal_for_the_context_teaches_it_and_the_turn_is_fitted_again_once(
    db, http, llm_server: FakeLLMServer, tmp_path
):
    """A server that does not say its context (LLM_CONTEXT_TOKENS stands in, larger than it)."""
    engine = make_engine(db, http, llm_server, tmp_path, llm=_openai(http, llm_server), llm_context_tokens=8192)
    seeded = await _seed(engine, 6)
    await engine.conversation.turn(_incoming("Bonjour !", []))  # the rate, from the server's count
    await engine.operator.wait_reflections("alice")
    # The server holds that first prompt (head, memories, story, message) and 100 words more.
    llm_server.context_tokens = sum(len(str(m["content"]).split()) for m in llm_server.chats[0].messages) + 100
    result = await engine.conversation.turn(_incoming("Et les bateaux ?", seeded.history))
    assert result.reply is not None
    refused, answered = [r for r in llm_server.chats if r.json_schema is None][-2:]
    assert len(refused.messages) > len(answered.messages)
    assert engine.operator.model_figures().context == llm_server.context_tokens
    selection = await engine.memories.why("alice", "chan-1")
    assert selection is not None and selection.figures.history_left_out > 0
    await engine.operator.wait_reflections("alice")


async def test_a_conversation_key_names_a_conversation_not_a_person(db, http, llm_server: FakeLLMServer, tmp_path):
    engine = make_engine(db, http, llm_server, tmp_path, llm=_openai(http, llm_server))
    other = make_engine(db, http, llm_server, tmp_path, llm=_openai(http, llm_server))
    await engine.conversation.turn(_incoming("Bonjour", []))
    await engine.conversation.turn(_incoming("Encore", []))
    await engine.conversation.turn(
        Incoming(user_id="alice", user_name="Alice", text="Ailleurs", story_id="chan-2", place="guild-1")
    )
    keys = [r.body["prompt_cache_key"] for r in llm_server.chats if r.body and r.json_schema is None]
    assert keys[0] == keys[1] != keys[2]
    assert all("alice" not in k and "chan" not in k for k in keys)
    await other.conversation.turn(_incoming("Bonjour", []))
    elsewhere = [r.body["prompt_cache_key"] for r in llm_server.chats if r.body and r.json_schema is None][-1]
    assert elsewhere != keys[0], "salted: not a hash anyone can redo"
    await engine.operator.wait_reflections("alice")
    await other.operator.wait_reflections("alice")


async def test_the_servers_own_figures_are_counted_per_call_and_exposed(db, http, llm_server: FakeLLMServer, tmp_path):
    metrics = Metrics()
    engine = make_engine(db, http, llm_server, tmp_path, llm=_openai(http, llm_server), metrics=metrics)
    llm_server.replies.append(Reply("Bonjour Alice.", prompt_tokens=1500, cached_tokens=1200, prompt_ms=300.0))
    await engine.conversation.turn(_incoming("Bonjour", []))
    totals = engine.operator.model_figures().totals["reply"]
    assert (totals.prompt_tokens, totals.reused_tokens, totals.read_tokens) == (1500, 1200, 300)
    exposed = metrics.exposition().decode()
    assert 'echo_prompt_tokens_read_total{call="reply"} 300.0' in exposed
    assert 'echo_prompt_tokens_reused_total{call="reply"} 1200.0' in exposed
    assert 'echo_prompt_read_seconds_total{call="reply"} 0.3' in exposed
    selection = await engine.memories.why("alice", "chan-1")
    assert selection is not None and selection.figures.cached_tokens == 1200
    assert "1,200 of them from the server's cache" in why_text(selection)
    await engine.operator.wait_reflections("alice")
