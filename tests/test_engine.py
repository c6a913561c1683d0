"""The conversation engine on a real SQLite file, a scripted LLM and real embedders."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time

import pytest

from bot.clients.embeddings import OllamaEmbedder
from bot.clients.llm import LLMClient
from bot.clients.metrics import Metrics
from bot.clients.storage import Database
from bot.engine import MAX_REFLECTION_ATTEMPTS, REFLECTION_BATCH, Incoming, reflection_worker
from bot.memory.model import NewMemory
from bot.memory.read import recall as recall_module
from bot.memory.read.indexing import Indexer
from bot.memory.stores.exchanges import PendingExchange
from bot.memory.stores.stories import load_story
from bot.memory.stores.vectors import stale_memories
from tests.builders import character_rules, local_embedder, make_engine, msg, turns_in_memory_work
from tests.fakes.llm_server import LLMRequest, Reply


async def test_llm_down_gives_a_clear_reply_and_keeps_the_exchange(db, http, llm_server, tmp_path):
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.handler = lambda request: Reply(status=500, error="CUDA out of memory")
    result = await engine.conversation.turn(msg("Bonjour, je m'appelle Alice."))
    assert result.reply is None and "CUDA out of memory" in (result.error or "")
    async with db.reader.execute("SELECT user_message, reply, last_error FROM exchanges") as cur:
        [(text, reply, error)] = await cur.fetchall()
    assert text == "Bonjour, je m'appelle Alice." and reply is None and "CUDA" in error


async def test_a_turn_counts_as_memory_work_except_while_the_model_answers(db, http, llm_server, tmp_path):
    """Long jobs for other people step aside while a turn does its memory work
    (bot/memory/cache/slices.py: Foreground); while the model answers, the turn is not counted."""
    metrics = Metrics()
    engine = make_engine(db, http, llm_server, tmp_path, metrics=metrics)
    seen_by_model: list[int] = []

    def answer(request: LLMRequest) -> str:
        if request.json_schema is not None:  # the turn's reflection, after it
            return json.dumps({"memories": []})
        seen_by_model.append(turns_in_memory_work(metrics))
        return "Bonjour Alice !"

    llm_server.handler = answer
    seen: set[int] = set()

    async def watch() -> None:
        while True:
            seen.add(turns_in_memory_work(metrics))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    result = await engine.conversation.turn(msg("Bonjour, je m'appelle Alice."))
    watcher.cancel()
    assert result.reply == "Bonjour Alice !"
    assert seen == {0, 1}  # before, while it read and wrote, and after
    assert seen_by_model == [0]
    assert turns_in_memory_work(metrics) == 0
    await engine.close()


async def test_an_absurdly_long_message_is_cut_not_refused(db, http, llm_server, tmp_path):
    engine = make_engine(db, http, llm_server, tmp_path, max_message_chars=500)
    result = await engine.conversation.turn(msg("blabla " * 100_000))
    assert result.reply is not None
    assert len(llm_server.chats[-1].last_user) < 600


async def test_one_users_reflections_never_run_concurrently_and_a_burst_is_batched(db, http, llm_server, tmp_path):
    # A server that takes two requests at once: the replies go on while a reflection is held.
    engine = make_engine(db, http, llm_server, tmp_path, llm_concurrency=2)
    running = 0
    peak = 0
    reflections = 0
    # The first reflection is held until every turn is in, so what queues behind it is the
    # burst, whatever the machine's speed.
    all_turns_in = asyncio.Event()

    async def handler(request: LLMRequest):
        nonlocal running, peak, reflections
        if request.json_schema is None:
            return "ok"
        reflections += 1
        running += 1
        peak = max(peak, running)
        await all_turns_in.wait()
        await asyncio.sleep(0.01)
        running -= 1
        return json.dumps({"memories": []})

    llm_server.handler = handler
    for n in range(30):
        await engine.conversation.turn(msg(f"message {n}"))
        engine.operator.schedule_reflection("alice")
        if n == 0:
            while reflections == 0:
                await asyncio.sleep(0.01)
    all_turns_in.set()
    await engine.operator.wait_reflections("alice")
    assert peak == 1
    # The first exchange alone, then the 29 that queued behind it, four at a time.
    assert reflections == 1 + -(-29 // REFLECTION_BATCH)
    assert (await engine.memories.stats("alice")).pending_reflections == 0


async def test_an_unparseable_reflection_is_retried_then_set_aside_and_changes_nothing(
    db, http, llm_server, tmp_path, store
):
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.handler = lambda r: "pas du JSON du tout" if r.json_schema is not None else "ok"
    await engine.conversation.turn(msg("Je suis allergique aux arachides."))
    for _ in range(MAX_REFLECTION_ATTEMPTS):
        engine.operator.schedule_reflection("alice")
        await engine.operator.wait_reflections("alice")
    assert await store.list("alice") == []
    async with db.reader.execute("SELECT reflection_attempts, reflected_at, last_error FROM exchanges") as cur:
        [(attempts, reflected_at, error)] = await cur.fetchall()
    assert attempts == MAX_REFLECTION_ATTEMPTS and reflected_at is not None and "unparseable" in error


async def test_a_reflection_with_hallucinated_and_foreign_ids_touches_nothing(db, http, llm_server, tmp_path, store):
    engine = make_engine(db, http, llm_server, tmp_path)
    bob_id = await store.add("bob", NewMemory(text="L'utilisateur aime le rock.", place="guild-1"))
    mine = await store.add("alice", NewMemory(text="L'utilisateur aime le jazz.", place="guild-1"))
    llm_server.handler = lambda r: (
        json.dumps({"delete": [bob_id, 987654], "replace": [{"id": bob_id, "text": "L'utilisateur aime la valse."}]})
        if r.json_schema is not None
        else "ok"
    )
    await engine.conversation.turn(msg("J'aime le jazz."))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert (await store.get("bob", bob_id)).text == "L'utilisateur aime le rock."
    assert (await store.get("alice", mine)).text == "L'utilisateur aime le jazz."
    refused = {d.detail for d in engine.operator.last_reflection("alice").decisions}
    assert refused == {"id not shown to the model"}


async def test_the_reflection_is_shown_only_the_authors_memories_with_ids(db, http, llm_server, tmp_path, store):
    engine = make_engine(db, http, llm_server, tmp_path)
    await store.add("bob", NewMemory(text="L'utilisateur est allergique au gluten.", place="guild-1"))
    mine = await store.add("alice", NewMemory(text="L'utilisateur est allergique aux arachides.", place="guild-1"))
    llm_server.handler = lambda r: "{}" if r.json_schema is not None else "ok"
    await engine.conversation.turn(msg("Parlons de mes allergies."))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    prompt = [r for r in llm_server.chats if r.json_schema is not None][-1].last_user
    assert f"[{mine}] (fact) L'utilisateur est allergique aux arachides." in prompt
    assert "gluten" not in prompt


@pytest.mark.parametrize(
    "learned_in, asked_in, shared, visible",
    [
        ("dm", "guild-1", False, False),
        ("guild-1", "guild-2", False, False),
        ("guild-1", "dm", False, False),
        ("guild-1", "guild-1", False, True),
        ("dm", "dm", False, True),
        ("dm", "guild-1", True, True),
    ],
)
async def test_privacy_boundary_between_dms_and_guilds(
    db, http, llm_server, tmp_path, learned_in, asked_in, shared, visible, store
):
    engine = make_engine(db, http, llm_server, tmp_path)
    await store.add("alice", NewMemory(text="L'utilisateur suit une thérapie le jeudi.", place=learned_in))
    await engine.privacy.set_sharing("alice", shared)
    await engine.conversation.turn(msg("Quoi de neuf ?", place=asked_in))
    assert ("thérapie" in llm_server.chats[-1].context) is visible


async def test_rules_are_always_in_context_outside_the_budget(db, http, llm_server, tmp_path, store):
    engine = make_engine(db, http, llm_server, tmp_path)
    await engine.start()
    # Thirty cities, not "ville numéro n": thirty texts differing by a number are one series, and
    # a series takes only its share of the slots.
    cities = "Lyon Nantes Lille Metz Nice Brest Rennes Tours Dijon Reims Caen Pau Sète Albi Agen Arles Annecy Bayonne Blois Cahors Colmar Dax Dole Gap Laval Lens Mâcon Niort Rodez Vannes".split()
    for city in cities:
        await store.add("alice", NewMemory(text=f"L'utilisateur a visité la ville de {city}.", place="guild-1"))
    result = await engine.conversation.turn(msg("Salut"))
    assert len(result.selection.slots) == 24
    assert len(result.selection.rules) == len(engine.character.rules) > 0
    system = llm_server.chats[-1].context
    assert all(rule in system for rule in engine.character.rules)
    # Rules never leak into a user's memories, and cannot be pinned or forgotten by users.
    assert all(m.type != "rule" for m in await store.list("alice"))
    rule_id = (await character_rules(store, engine.character))[0].id
    assert not await engine.memories.pin("alice", rule_id) and not await engine.memories.forget("alice", rule_id)


async def test_a_hanging_embedder_degrades_the_turn_within_the_bound(
    db, http, llm_server, tmp_path, embedding_server, store, monkeypatch
):
    monkeypatch.setattr(recall_module, "TURN_EMBEDDING_TIMEOUT", 1.0)
    embedder = OllamaEmbedder(http, base_url=embedding_server.url, model="fake-embed")
    engine = make_engine(db, http, llm_server, tmp_path, embedder=embedder)
    # A story memory: the global pass would otherwise take it before the semantic pass.
    memory_id = await store.add(
        "alice",
        NewMemory(
            text="L'utilisateur est allergique aux arachides.", place="guild-1", scope="story", story_id="chan-1"
        ),
    )
    embedding_server.mode = "hang"
    started = time.monotonic()
    result = await engine.conversation.turn(msg("Un dessert avec des arachides ?"))
    assert time.monotonic() - started < 5
    assert result.reply is not None and result.selection.degraded
    # Lexical FTS matches stand in for the missing cosines.
    [slot] = [s for s in result.selection.slots if s.id == memory_id]
    assert slot.lexical and slot.reason == "semantic"
    # A degraded turn counts nothing, except itself.
    await engine.conversation.wait_recorded("alice")
    m = await store.get("alice", memory_id)
    assert (m.times_candidate, m.times_served, m.times_semantic) == (0, 0, 0)
    stats = await engine.memories.stats("alice")
    assert (stats.turns, stats.degraded_turns) == (1, 1)


async def test_a_turn_asks_for_its_query_vectors_before_its_own_writes(
    db, http, llm_server, tmp_path, embedding_server
):
    """The model embeds the query while the turn writes (the embedding is the longest part of a
    turn's memory work): with another program holding the database's write lock, the turn's
    writes wait, and its query has already reached the embedder."""
    engine = make_engine(
        db, http, llm_server, tmp_path, embedder=OllamaEmbedder(http, base_url=embedding_server.url, model="fake-embed")
    )
    text = "Tu te souviens de mon vélo rouge ?"
    other = sqlite3.connect(db.path, timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        turn = asyncio.create_task(engine.conversation.turn(msg(text)))
        await asyncio.wait_for(embedding_server.wait_for_requests(1), timeout=4)
        assert not turn.done()
        assert any(text in json.dumps(r.body, ensure_ascii=False) for r in embedding_server.requests)
    finally:
        other.execute("ROLLBACK")
        other.close()
    result = await asyncio.wait_for(turn, timeout=30)
    assert result.reply is not None and not result.selection.degraded


async def test_a_healthy_turn_updates_the_counters(db, http, llm_server, tmp_path, store):
    embedder = local_embedder()
    engine = make_engine(db, http, llm_server, tmp_path, embedder=embedder)
    memory_id = await store.add("alice", NewMemory(text="L'utilisateur est allergique aux arachides.", place="guild-1"))
    await Indexer(db, embedder).run_once()
    result = await engine.conversation.turn(msg("Je peux manger un dessert aux arachides ?"))
    assert not result.selection.degraded
    await engine.conversation.wait_recorded("alice")
    m = await store.get("alice", memory_id)
    assert (m.times_candidate, m.times_served) == (1, 1)
    assert (await engine.memories.stats("alice")).degraded_turns == 0


async def test_erase_removes_everything_about_one_user_only(db, http, llm_server, tmp_path, store):
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.handler = lambda r: (
        json.dumps(
            {
                "memories": [{"text": "L'utilisateur habite à Nantes.", "type": "fact", "confidence": 0.95}],
                "summary": "Alice habite à Nantes.",
                "anchors": {"add": ["Alice habite à Nantes."]},
            }
        )
        if r.json_schema is not None
        else "ok"
    )
    for user in ("alice", "bob"):
        await engine.conversation.turn(msg("J'habite à Nantes.", user=user))
        engine.operator.schedule_reflection(user)
        await engine.operator.wait_reflections(user)
    forgotten = (await store.list("alice"))[0].id
    await engine.memories.forget("alice", forgotten)
    exported = await engine.privacy.export("alice")
    assert exported["history"] and exported["story_history"] == [] and exported["exchanges"]
    [story] = exported["stories"]
    assert story["summary"] == "Alice habite à Nantes." and story["anchors"][0]["text"] == "Alice habite à Nantes."
    assert exported["turns"] and exported["turns"][0]["message"] == "J'habite à Nantes."
    assert exported["settings"] == {"share_memories": False}

    await engine.privacy.erase("alice")
    for table in (
        "memories",
        "memory_history",
        "memory_vectors",
        "exchanges",
        "turns",
        "turn_stats",
        "story_summaries",
        "story_anchors",
        "story_positions",
        "story_state",
        "story_history",
        "user_settings",
    ):
        async with db.reader.execute(f"SELECT COUNT(*) FROM {table} WHERE user_id = ?", ("alice",)) as cur:
            assert (await cur.fetchone())[0] == 0, table
    assert await store.list("bob") and (await engine.privacy.export("bob"))["exchanges"]


async def test_a_crashing_reflection_counts_attempts_and_does_not_block_later_exchanges(
    db, http, llm_server, tmp_path, monkeypatch, store
):
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.handler = lambda r: (
        json.dumps({"memories": [{"text": "L'utilisateur habite à Nantes.", "type": "fact", "confidence": 0.95}]})
        if r.json_schema is not None
        else "ok"
    )
    import bot.engine.reflection_worker as engine_module

    real_apply = engine_module.apply_reflection
    crashes = 0

    async def crash_on_the_first_exchange(db_, reflection, ctx, **kwargs):
        nonlocal crashes
        if "poison" in ctx.user_message:
            crashes += 1
            raise RuntimeError("disk I/O error")
        return await real_apply(db_, reflection, ctx, **kwargs)

    monkeypatch.setattr(engine_module, "apply_reflection", crash_on_the_first_exchange)
    await engine.conversation.turn(msg("poison", story="chan-1"))
    for _ in range(MAX_REFLECTION_ATTEMPTS):
        engine.operator.schedule_reflection("alice")
        await engine.operator.wait_reflections("alice")
    assert crashes == MAX_REFLECTION_ATTEMPTS
    async with db.reader.execute(
        "SELECT reflection_attempts, reflected_at IS NOT NULL, last_error FROM exchanges"
    ) as cur:
        [(attempts, set_aside, error)] = await cur.fetchall()
    assert attempts == MAX_REFLECTION_ATTEMPTS and set_aside and "disk I/O error" in error
    # The next exchange is reflected normally: the poisoned one no longer heads the queue.
    await engine.conversation.turn(msg("J'habite à Nantes."))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert [m.text for m in await store.list("alice")] == ["L'utilisateur habite à Nantes."]


async def test_erase_wins_against_a_reflection_in_flight(db, http, llm_server, tmp_path, store):
    engine = make_engine(db, http, llm_server, tmp_path)
    release = asyncio.Event()
    reached = asyncio.Event()

    async def slow_reflection(request: LLMRequest):
        if request.json_schema is None:
            return "ok"
        reached.set()
        await release.wait()
        return json.dumps(
            {
                "memories": [{"text": "L'utilisateur habite à Lyon.", "type": "fact", "confidence": 0.95}],
                "summary": "Alice habite à Lyon.",
            }
        )

    llm_server.handler = slow_reflection
    await engine.conversation.turn(msg("J'habite à Lyon."))
    engine.operator.schedule_reflection("alice")
    await reached.wait()
    await engine.privacy.erase("alice")
    release.set()
    await engine.operator.wait_reflections("alice")
    await asyncio.sleep(0.1)
    assert await store.list("alice") == []
    for table in ("exchanges", "story_summaries", "memory_history"):
        async with db.reader.execute(f"SELECT COUNT(*) FROM {table} WHERE user_id = ?", ("alice",)) as cur:
            assert (await cur.fetchone())[0] == 0, table


async def test_a_batch_handed_out_twice_is_reflected_once(db, http, llm_server, tmp_path, store, monkeypatch):
    """A stale read of the pending exchanges (or two sweeps) must not apply a reflection twice."""
    read = reflection_worker.pending_exchanges
    handed: list[list[PendingExchange]] = []
    # Once the batch was reflected, the worker's next look and its read under the lock are stale.
    stale_reads = 2

    async def stale(db: Database, user_id: str, limit: int) -> list[PendingExchange]:
        nonlocal stale_reads
        batch = await read(db, user_id, limit)
        if batch:
            handed.append(batch)
        elif handed and stale_reads:
            stale_reads -= 1
            return handed[0]
        return batch

    monkeypatch.setattr(reflection_worker, "pending_exchanges", stale)
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.handler = lambda r: (
        json.dumps(
            {
                "memories": [
                    {"text": "L'utilisateur est allergique aux arachides.", "type": "fact", "confidence": 0.95}
                ],
                "state": {"mood": 1},
            }
        )
        if r.json_schema is not None
        else "ok"
    )
    await engine.conversation.turn(msg("Je suis allergique aux arachides."))
    await engine.operator.wait_reflections("alice")
    # Reflected, then handed out again: the model was asked twice.
    assert stale_reads == 0 and len([c for c in llm_server.chats if c.json_schema is not None]) == 2
    assert [m.text for m in await store.list("alice")] == ["L'utilisateur est allergique aux arachides."]
    async with db.reader.execute("SELECT reflection_attempts, last_error FROM exchanges") as cur:
        assert [tuple(r) for r in await cur.fetchall()] == [(0, None)]
    # The one thing a second application would not absorb: the mood moves by +1 once, not twice.
    assert (await load_story(db, "alice", "chan-1")).state == {"mood": 1.0}


async def test_an_llm_outage_is_logged_once_and_its_end_once(db, http, llm_server, tmp_path, caplog):
    engine = make_engine(db, http, llm_server, tmp_path)
    for _ in range(3):
        llm_server.replies.append(Reply(status=500, error="CUDA out of memory"))
    with caplog.at_level(logging.INFO, logger="bot.engine.turn"):
        results = [await engine.conversation.turn(msg(f"message {n}")) for n in range(4)]
    assert [r.reply is None for r in results] == [True, True, True, False]
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "bot.engine.turn"]
    assert [level for level, _ in logged] == [logging.WARNING, logging.INFO]
    assert "CUDA out of memory" in logged[0][1] and "after 3 failed" in logged[1][1]


async def test_a_streamed_turn_shows_the_text_growing_and_saves_the_whole_reply(db, http, llm_server, tmp_path):
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.replies.append(Reply("Bonjour Alice, enchantée."))
    seen: list[str] = []

    async def on_text(text: str) -> None:
        seen.append(text)

    result = await engine.conversation.turn(msg("Bonjour"), on_text=on_text)
    assert seen == ["Bonjour", "Bonjour Alice,", "Bonjour Alice, enchantée."]
    assert result.reply == "Bonjour Alice, enchantée." and not result.cut
    assert result.usage is not None and result.usage.completion_tokens == 3
    async with db.reader.execute("SELECT reply FROM exchanges") as cur:
        assert [tuple(row) for row in await cur.fetchall()] == [("Bonjour Alice, enchantée.",)]


async def test_a_stream_cut_halfway_is_the_reply_as_far_as_it_went(db, http, llm_server, tmp_path):
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.replies.append(Reply("Il était une fois un dragon", die_after=3))

    async def on_text(text: str) -> None:
        pass

    result = await engine.conversation.turn(msg("Une histoire"), on_text=on_text)
    assert result.cut and result.reply == "Il était une"
    assert result.error is not None and "cut" in result.error
    async with db.reader.execute("SELECT reply FROM exchanges") as cur:
        assert [tuple(row) for row in await cur.fetchall()] == [("Il était une",)]


@pytest.mark.parametrize("api", ["ollama", "openai"])
@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
async def test_a_line_separator_in_a_streamed_reply_keeps_the_whole_reply_stored_and_reflected(
    db, http, llm_server, tmp_path, api, separator
):
    engine = make_engine(db, http, llm_server, tmp_path, llm=LLMClient(http, api=api, base_url=llm_server.url))
    answer = f"Voici la première ligne.{separator}Et voici la seconde, entière."
    llm_server.handler = lambda request: "{}" if request.json_schema is not None else answer
    seen: list[str] = []

    async def on_text(text: str) -> None:
        seen.append(text)

    result = await engine.conversation.turn(msg("Deux lignes ?"), on_text=on_text)
    assert not result.cut and result.error is None
    assert result.reply == answer and seen[-1] == answer
    async with db.reader.execute("SELECT reply FROM exchanges") as cur:
        assert [row[0] for row in await cur.fetchall()] == [answer]
    await engine.operator.wait_reflections("alice")
    [reflection] = [r for r in llm_server.chats if r.json_schema is not None]
    assert "Et voici la seconde, entière." in json.dumps(reflection.messages, ensure_ascii=False)


def cellist(request: LLMRequest) -> str:
    """Replies, and a reflection remembers that the person plays the cello."""
    if request.json_schema is not None:
        return json.dumps(
            {"memories": [{"text": "L'utilisateur joue du violoncelle.", "type": "fact", "confidence": 0.9}]}
        )
    return "Enchantée !"


async def test_a_turn_schedules_its_own_reflection(db, http, llm_server, tmp_path, store):
    # No front end calls schedule_reflection: the answered message is reflected all the same.
    engine = make_engine(db, http, llm_server, tmp_path)

    llm_server.handler = cellist
    result = await engine.conversation.turn(msg("Je joue du violoncelle."))
    assert result.reply == "Enchantée !"
    await engine.operator.wait_reflections("alice")
    assert [m.text for m in await store.list("alice")] == ["L'utilisateur joue du violoncelle."]
    async with db.reader.execute("SELECT reflected_at IS NOT NULL FROM exchanges WHERE user_id = 'alice'") as cur:
        assert [r[0] for r in await cur.fetchall()] == [1]


async def test_what_a_reflection_writes_is_embedded_before_the_next_tick(
    db, http, llm_server, tmp_path, embedding_server, embedding_http
):
    """The person's next message, seconds away, finds the memories scored by meaning: no
    indexing tick runs here (none is scheduled), the reflection asks for the run itself."""
    embedder = OllamaEmbedder(embedding_http, base_url=embedding_server.url, model="fake-embed")
    engine = make_engine(db, http, llm_server, tmp_path, embedder=embedder)

    llm_server.handler = cellist
    await engine.conversation.turn(msg("Je joue du violoncelle."))
    await engine.operator.wait_reflections("alice")
    await engine.operator.wait_background()
    embedded = [text for r in embedding_server.requests for text in r.body["input"]]
    assert "L'utilisateur joue du violoncelle." in embedded
    assert await stale_memories(db, embedder.model, 10) == []
    await engine.close()


async def test_a_turn_reads_its_message_with_the_persons_lines_and_a_turn_read_ahead_embeds_nothing(
    db, http, llm_server, tmp_path, embedding_server, store
):
    from bot.engine.prompting import ChannelLine

    embedder = OllamaEmbedder(http, base_url=embedding_server.url, model="fake-embed")
    engine = make_engine(db, http, llm_server, tmp_path, embedder=embedder)
    await store.add("alice", NewMemory(text="L'utilisateur a un chat qui s'appelle Pixel.", place="guild-1"))
    await Indexer(db, embedder).run_once()
    llm_server.handler = lambda r: json.dumps({"memories": []}) if r.json_schema is not None else "Ah, raconte !"

    first = await engine.conversation.turn(msg("Tu sais quoi ?"))
    await engine.operator.wait_reflections("alice")
    await engine.operator.wait_background()
    embedded = [text for r in embedding_server.requests for text in r.body["input"]]
    assert first.reply not in embedded  # nothing is embedded after a reply: the next query needs its message
    history = [
        ChannelLine("Alice", "Tu sais quoi ?", from_person=True),
        ChannelLine("Bob", "Bob: moi je sais !"),
        ChannelLine("Écho", first.reply, from_bot=True),
    ]
    said = "Mon chat a encore fait une bêtise."
    read = "Tu sais quoi ?\nAh, raconte !\nMon chat a encore fait une bêtise."

    def turn(n: int) -> Incoming:
        return Incoming(
            user_id="alice", user_name="Alice", text=said, story_id="chan-1", place="guild-1",
            message_id=f"m-{n}", history=history,
        )  # fmt: skip

    before = len(embedding_server.requests)
    second = await engine.conversation.turn(turn(2))
    assert [r.body["input"] for r in embedding_server.requests[before:]] == [[said, read]]
    assert not second.selection.degraded

    # The front end holds the next message (a burst's wait): read ahead, its turn asks nothing.
    engine.conversation.read_ahead("alice", "chan-1", said, history)
    await engine.operator.wait_background()
    before = len(embedding_server.requests)
    third = await engine.conversation.turn(turn(3))
    assert embedding_server.requests[before:] == []
    assert not third.selection.degraded
    assert [s.id for s in third.selection.slots] == [s.id for s in second.selection.slots]
