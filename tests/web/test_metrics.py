"""/metrics is a Prometheus scrape that parses, and its figures move as turns are played."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from prometheus_client.parser import text_string_to_metric_families

from bot.clients.responsiveness import TICK_SECONDS
from bot.engine import MAX_REFLECTION_ATTEMPTS
from tests.fakes.llm_server import LLMRequest, Reply
from tests.web.conftest import CONTEXT, Page


async def scrape(page: Page) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await page.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def test_a_fresh_scrape_parses_and_shows_every_family_at_zero(page: Page):
    samples = await scrape(page)
    for outcome in ("answered", "degraded", "failed"):
        assert value(samples, "echo_turns_total", outcome=outcome) == 0
    assert value(samples, "echo_reflections_total", outcome="applied") == 0
    assert value(samples, "echo_reflection_backlog") == 0
    assert value(samples, "echo_storage_failures_total") == 0
    assert value(samples, "echo_llm_seconds_count", call="reply") == 0
    assert value(samples, "echo_prompt_tokens_count", call="reply") == 0
    assert value(samples, "echo_prompt_context_full_total", call="reply") == 0
    assert ("echo_embedding_seconds_count", (("call", "query"),)) in samples
    for priority in ("live", "follow_up", "reflection", "consolidation", "import"):
        assert value(samples, "echo_llm_queue_seconds_count", priority=priority) == 0
        assert value(samples, "echo_llm_queue_waiting", priority=priority) == 0


async def test_the_figures_move_as_turns_are_played(page: Page):
    before = await scrape(page)
    await page.play("Bonjour, je m'appelle Alice.")
    await page.play("J'habite à Nantes.")
    after = await scrape(page)
    assert value(after, "echo_turns_total", outcome="answered") == 2
    assert value(after, "echo_reflections_total", outcome="applied") == 2
    assert value(after, "echo_llm_seconds_count", call="reply") == 2
    assert value(after, "echo_llm_seconds_count", call="reflection") == 2
    assert value(after, "echo_llm_seconds_sum", call="reply") > 0
    assert value(after, "echo_memory_seconds_count") == 2
    assert value(after, "echo_embedding_seconds_count", call="query") > value(
        before, "echo_embedding_seconds_count", call="query"
    )
    assert value(after, "echo_embedding_seconds_count", call="passages") >= 1  # the indexer's
    # The tokens are the server's own count (the fake counts the words it was sent).
    sent = [r for r in page.llm.chats if r.json_schema is None]
    words = sum(len(str(m["content"]).split()) for r in sent for m in r.messages)
    assert value(after, "echo_prompt_tokens_sum", call="reply") == words
    assert value(after, "echo_completion_tokens_total", call="reply") > 0
    # Every call took its place in the model's budget, each by its priority; none waits now.
    assert value(after, "echo_llm_queue_seconds_count", priority="live") == 2
    assert value(after, "echo_llm_queue_seconds_count", priority="reflection") == 2
    assert value(after, "echo_llm_queue_waiting", priority="live") == 0

    # The LLM fails: the turn counts as failed, the reflection as an LLM failure, nothing else moves.
    page.llm.handler = lambda request: Reply(status=500, error="CUDA out of memory")
    await page.play("Tu es là ?")
    failed = await scrape(page)
    assert value(failed, "echo_turns_total", outcome="failed") == 1
    assert value(failed, "echo_turns_total", outcome="answered") == 2
    assert value(failed, "echo_llm_seconds_count", call="reply") == 3


async def test_the_reflection_backlog_and_set_aside_batches_are_read_from_the_database(page: Page):
    def reply_only(request: LLMRequest) -> Reply | str:
        return Reply(status=503, error="busy") if request.json_schema is not None else "D'accord."

    page.llm.handler = reply_only
    await page.play("Bonjour.")
    await page.play("Encore moi.")
    samples = await scrape(page)
    assert value(samples, "echo_reflection_backlog") == 2
    assert value(samples, "echo_reflections_total", outcome="llm_failed") >= 1

    page.llm.handler = lambda request: "pas du JSON" if request.json_schema is not None else "Oui."
    for _ in range(MAX_REFLECTION_ATTEMPTS):
        page.engine.operator.schedule_reflection("alice")
        await page.engine.operator.wait_reflections("alice")
    samples = await scrape(page)
    assert value(samples, "echo_reflection_backlog") == 0
    assert value(samples, "echo_reflection_set_aside") == 2
    assert value(samples, "echo_reflections_total", outcome="rejected") >= 1
    user = await page.get("/users/alice")
    assert "Reflections set aside" in user.text and "unparseable reflection" in user.text


async def test_a_full_context_is_logged_once_counted_and_shown(page: Page, caplog):
    def full(request: LLMRequest) -> Reply:
        if request.json_schema is not None:
            return Reply(json.dumps({"memories": []}))
        return Reply("Hein ?", prompt_tokens=CONTEXT)

    page.llm.handler = full
    with caplog.at_level(logging.WARNING, logger="bot.engine.llm_calls"):
        await page.play("Bonjour.")
        await page.play("Tu m'entends ?")
    warnings = [r for r in caplog.records if "reached the context size" in r.getMessage()]
    assert len(warnings) == 1 and "LLM_CONTEXT_TOKENS=8192" in warnings[0].getMessage()
    samples = await scrape(page)
    assert value(samples, "echo_prompt_context_full_total", call="reply") == 2
    assert value(samples, "echo_prompt_context_full_total", call="reflection") == 0

    overview = await page.get("/")
    assert "2 prompt(s) filled the model's context" in overview.text
    why = await page.engine.memories.why("alice", "chan-1")
    assert why is not None and why.figures.context_full and why.figures.prompt_tokens == CONTEXT


async def test_a_prompt_under_the_context_is_not_a_cut(page: Page):
    page.llm.handler = lambda request: (
        "{}" if request.json_schema is not None else Reply("Oui.", prompt_tokens=CONTEXT // 2)
    )
    await page.play("Bonjour.")
    samples = await scrape(page)
    assert value(samples, "echo_prompt_context_full_total", call="reply") == 0
    assert "filled the model" not in (await page.get("/")).text


async def test_the_page_and_the_scrape_show_the_loop_lag_and_the_embedding_models_wait(page: Page):
    """The owner's page shows how late the event loop ran (a loop held 600 ms shows a lag of at
    least 600 ms less one tick, whenever the tick's timer fell due) and how long turn queries
    waited for the local embedding model."""
    watching = asyncio.create_task(page.metrics.watch_loop())
    try:
        await page.play("Bonjour, je m'appelle Alice.")
        await asyncio.sleep(0.6)
        time.sleep(0.6)  # noqa: ASYNC251  (the loop held on purpose, as a long job on it would)
        await asyncio.sleep(0.6)
    finally:
        watching.cancel()
    samples = await scrape(page)
    assert value(samples, "echo_event_loop_lag_seconds_count") >= 3
    assert value(samples, "echo_embedding_queue_wait_seconds_count", kind="query") >= 1
    figures = page.metrics.recent_lag.figures()
    assert figures.max_ms >= (0.6 - TICK_SECONDS) * 1000 - 5
    response = await page.get("/")
    assert "Responsiveness" in response.text and "event loop lag" in response.text
    assert f"{figures.max_ms:.0f}" in response.text
    assert "embedding model" in response.text
