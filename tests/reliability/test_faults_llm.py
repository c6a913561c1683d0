"""LLM faults, over real HTTP: the reply path answers or says clearly that it cannot, a broken
reflection changes nothing it was not allowed to, and nothing the user said is lost.

Faults are scripted per request by tests/fakes/llm_server.py: a server that never answers, a
connection closed halfway, a body that is not JSON, an HTTP 500, a 5 MB answer, unparseable
reflection JSON, and a reflection naming ids it was not shown or that belong to another user.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from bot.clients.llm_server import MAX_RESPONSE_BYTES
from bot.engine import MAX_REFLECTION_ATTEMPTS, MAX_REPLY_CHARS
from bot.memory.model import NewMemory
from cogs.utils.answering import DISCORD_LIMIT, split_message
from tests.builders import make_engine, msg
from tests.fakes.llm_server import LLMRequest, Reply

TIMEOUT = 1.0
SLACK = 2.0
HUGE = "x" * (MAX_RESPONSE_BYTES * 5 // 2)  # 5 MB
ALLERGY = "L'utilisateur est allergique aux arachides."

REPLY_FAULTS: dict[str, Reply] = {
    "timeout": Reply(hang=True),
    "dropped": Reply("Bonjour !", truncated=True),
    "not_json": Reply(body="<html><h1>502 Bad Gateway</h1></html>", content_type="text/html"),
    "http_500": Reply(status=500, error="CUDA error: out of memory"),
    "5_MB": Reply(HUGE),
}


async def exchanges(db, user: str = "alice") -> list[tuple[Any, ...]]:
    async with db.reader.execute(
        "SELECT user_message, reply, reflected_at, reflection_attempts, last_error FROM exchanges "
        "WHERE user_id = ? ORDER BY id",
        (user,),
    ) as cur:
        return [tuple(row) for row in await cur.fetchall()]


async def snapshot(store, user: str) -> tuple[Any, ...]:
    memories = [(m.id, m.text, m.type, m.pinned, m.expires_at) for m in await store.list(user)]
    history = [(h.memory_id, h.operation, h.text) for h in await store.history(user)]
    return memories, history


@pytest.mark.parametrize("fault", list(REPLY_FAULTS))
async def test_a_failing_reply_says_so_clearly_and_keeps_the_message(fault, db, http, llm_server, tmp_path):
    engine = make_engine(db, http, llm_server, tmp_path, llm_timeout_seconds=TIMEOUT)
    llm_server.replies.append(REPLY_FAULTS[fault])
    started = time.monotonic()
    result = await engine.conversation.turn(msg("Je suis allergique aux arachides."))
    assert time.monotonic() - started < TIMEOUT + SLACK
    assert result.reply is None and result.failure == "model_down"
    # The operator's explanation names the server it could not use.
    assert result.error and llm_server.url in result.error
    [(text, reply, _, _, error)] = await exchanges(db)
    assert (text, reply) == ("Je suis allergique aux arachides.", None) and error
    # The next turn, with the server healthy again, is answered; the first message is still there.
    result = await engine.conversation.turn(msg("Tu es là ?"))
    assert result.reply == "echo: Alice: Tu es là ?"
    assert [e["message"] for e in (await engine.privacy.export("alice"))["exchanges"]] == [
        "Je suis allergique aux arachides.",
        "Tu es là ?",
    ]


async def test_a_runaway_reply_under_the_size_cap_is_cut_to_a_few_discord_messages(db, http, llm_server, tmp_path):
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.replies.append("bla " * 100_000)
    result = await engine.conversation.turn(msg("Raconte-moi une histoire."))
    assert result.reply is not None and len(result.reply) == MAX_REPLY_CHARS
    chunks = split_message(result.reply)
    assert len(chunks) <= MAX_REPLY_CHARS // DISCORD_LIMIT + 1 and all(len(c) <= DISCORD_LIMIT for c in chunks)
    [(_, stored, _, _, _)] = await exchanges(db)
    assert stored == result.reply


# The same prompt would fail the same way: these attempts count towards setting the batch aside.
DETERMINISTIC = {"unparseable", "5_MB"}


def reflection_faults(bob_id: int, hidden_id: int) -> dict[str, Reply]:
    foreign = {
        "memories": [{"text": ALLERGY, "type": "fact", "confidence": 0.95}],
        "delete": [bob_id, hidden_id, 987_654],
        "replace": [
            {"id": bob_id, "text": "L'utilisateur aime la valse."},
            {"id": hidden_id, "text": "L'utilisateur vit à Lyon."},
        ],
    }
    return {
        "timeout": Reply(hang=True),
        "dropped": Reply('{"memories": []}', truncated=True),
        "not_json_body": Reply(body="<html>oops</html>", content_type="text/html"),
        "http_500": Reply(status=500, error="overloaded"),
        "unparseable": Reply('{"memories": [{"text": "L\'utilisateur'),
        "5_MB": Reply(json.dumps({"memories": [], "summary": HUGE})),
        "foreign_ids": Reply(json.dumps(foreign)),
    }


@pytest.mark.parametrize(
    "fault", ["timeout", "dropped", "not_json_body", "http_500", "unparseable", "5_MB", "foreign_ids"]
)
async def test_a_broken_reflection_changes_nothing_it_may_not_and_loses_nothing(
    fault, db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path, reflection_timeout_seconds=TIMEOUT)
    bob_id = await store.add("bob", NewMemory(text="L'utilisateur aime le rock.", place="guild-1"))
    # Another place: never shown to a reflection of guild-1, so its id is not allowed.
    hidden_id = await store.add("alice", NewMemory(text="L'utilisateur habite à Nantes.", place="dm"))
    bob_before = await snapshot(store, "bob")
    alice_before = await snapshot(store, "alice")
    answer = reflection_faults(bob_id, hidden_id)[fault]

    def handler(request: LLMRequest) -> Reply | str:
        return answer if request.json_schema is not None else "D'accord."

    llm_server.handler = handler
    result = await engine.conversation.turn(msg("Je suis allergique aux arachides."))
    assert result.reply == "D'accord."
    started = time.monotonic()
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert time.monotonic() - started < TIMEOUT + SLACK

    assert await snapshot(store, "bob") == bob_before
    [(text, reply, reflected_at, attempts, error)] = await exchanges(db)
    assert (text, reply) == ("Je suis allergique aux arachides.", "D'accord.")
    if fault == "foreign_ids":
        # The allowed part lands; every id outside the shown ones is refused, whoever owns it.
        memories, history = await snapshot(store, "alice")
        assert [m[1] for m in memories] == ["L'utilisateur habite à Nantes.", ALLERGY] and history == []
        report = engine.operator.last_reflection("alice")
        refused = report.of("delete_refused") + report.of("replace_refused")
        assert len(refused) == 5 and {d.detail for d in refused} == {"id not shown to the model"}
        assert reflected_at is not None and attempts == 0
        return
    assert await snapshot(store, "alice") == alice_before
    assert error
    if fault in DETERMINISTIC:
        # Retried at once (a model samples), then set aside, not deleted: the message stays in
        # the user's export and later exchanges are no longer held up behind it.
        assert attempts == MAX_REFLECTION_ATTEMPTS and reflected_at is not None
        assert (await engine.privacy.export("alice"))["exchanges"][0]["message"] == text
        return
    # An outage is not the batch's fault: however often it fails, it stays pending.
    assert reflected_at is None and attempts == 1
    for _ in range(MAX_REFLECTION_ATTEMPTS):
        engine.operator.schedule_reflection("alice")
        await engine.operator.wait_reflections("alice")
    [(_, _, reflected_at, attempts, _)] = await exchanges(db)
    assert reflected_at is None and attempts == MAX_REFLECTION_ATTEMPTS + 1

    # Healthy again: the pending exchange is reflected, once.
    answer = Reply(json.dumps({"memories": [{"text": ALLERGY, "type": "fact", "confidence": 0.95}]}))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert [m.text for m in await store.list("alice")] == ["L'utilisateur habite à Nantes.", ALLERGY]
    [(_, _, reflected_at, _, error)] = await exchanges(db)
    assert reflected_at is not None and error is None
