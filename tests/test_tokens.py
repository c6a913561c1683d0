"""Token accounting: every call's usage read from the server's answer, recorded per turn, in /why."""

from __future__ import annotations

import json

import pytest

from bot.clients.llm import LLMClient
from bot.clients.llm_wire import TokenUsage
from bot.memory.choice import TurnFigures, TurnSelection
from bot.memory.model import utcnow
from bot.presenting import why_text
from tests.builders import http_client
from tests.fakes.llm_server import FAKE_MODEL, Reply

CONVERSATION = [{"role": "system", "content": "Tu es Écho."}, {"role": "user", "content": "Bonjour à toi"}]


@pytest.mark.parametrize("api", ["ollama", "openai"])
async def test_every_chat_reads_the_servers_token_counts(api, llm_server):
    llm_server.replies.append(Reply("Bonjour Alice, ça va ?", prompt_tokens=1234))
    llm_server.replies.append("Oui.")
    async with http_client() as http:
        llm = LLMClient(http, api=api, base_url=llm_server.url)
        first = await llm.chat(CONVERSATION, model=FAKE_MODEL)
        second = await llm.chat(CONVERSATION, model=FAKE_MODEL, json_schema={"type": "object"})
    assert first.usage == TokenUsage(prompt_tokens=1234, completion_tokens=5)
    # The fake counts the words sent: "Tu es Écho." + "Bonjour à toi".
    assert second.usage == TokenUsage(prompt_tokens=6, completion_tokens=1)


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("ollama", {"message": {"role": "assistant", "content": "ok"}, "done": True}),
        ("ollama", {"message": {"role": "assistant", "content": "ok"}, "prompt_eval_count": "12", "eval_count": -1}),
        ("openai", {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
        ("openai", {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": None}),
    ],
)
async def test_a_server_that_does_not_count_gives_unknown_not_zero(api, body, llm_server):
    llm_server.replies.append(Reply(body=json.dumps(body)))
    async with http_client() as http:
        reply = await LLMClient(http, api=api, base_url=llm_server.url).chat(CONVERSATION, model=FAKE_MODEL)
    assert reply.text == "ok" and reply.usage == TokenUsage(None, None)


def _selection(figures: TurnFigures) -> TurnSelection:
    return TurnSelection(
        turn_id=1,
        user_id="u",
        story_id="s",
        query="Bonjour",
        degraded=False,
        slots=[],
        rules=[],
        created_at=utcnow(),
        figures=figures,
    )


def test_why_shows_the_prompt_size_against_the_context():
    text = why_text(_selection(TurnFigures(prompt_tokens=3412, completion_tokens=57, context_tokens=8192)))
    assert "Prompt: 3,412 tokens of a 8,192-token context; reply: 57 tokens." in text
    assert "filled the context" not in text


def test_why_says_when_the_prompt_filled_the_context():
    text = why_text(
        _selection(TurnFigures(prompt_tokens=8192, completion_tokens=3, context_tokens=8192, context_full=True))
    )
    assert "⚠️ The prompt filled the context: the model did not see its start (persona, rules)." in text


def test_why_says_when_the_model_gave_no_reply():
    assert "The language model gave no reply" in why_text(_selection(TurnFigures(failed=True)))
