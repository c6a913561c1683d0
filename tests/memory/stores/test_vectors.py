"""Vector storage and the full-text index, on real SQLite files."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from bot.clients.db import MIGRATIONS_DIR, SQLiteDatabase
from bot.memory.model import content_hash, utcnow
from bot.memory.stores.vectors import (
    VectorRow,
    delete_all_vectors,
    fts_query,
    lexical_matches,
    load_user_matrix,
    stale_among,
    stale_memories,
    store_vectors,
)
from tests.builders import add_memory, delete_memory, set_text

pytestmark = pytest.mark.both_stores

MODEL = "test-model"
ALICE, BOB = "111", "222"


def random_unit(seed: int, dim: int = 8) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


async def embed_all(db: SQLiteDatabase, model: str = MODEL, dim: int = 8) -> dict[int, np.ndarray]:
    """Give every stale memory a random vector, as the indexer would."""
    stale = await stale_memories(db, model, 1000)
    vectors = {m.id: random_unit(m.id, dim) for m in stale}
    async with db.write() as conn:
        await store_vectors(conn, [VectorRow(m.id, m.user_id, model, m.content_hash, vectors[m.id]) for m in stale])
    return vectors


# --- vectors ----------------------------------------------------------------------------------


async def test_vectors_round_trip_per_user(db: SQLiteDatabase) -> None:
    a1 = await add_memory(db, ALICE, "aime le thé")
    a2 = await add_memory(db, ALICE, "habite à Nantes")
    b1 = await add_memory(db, BOB, "joue du piano")
    vectors = await embed_all(db)

    ids, matrix = await load_user_matrix(db, ALICE, MODEL)
    assert ids == [a1, a2]
    assert matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix, np.stack([vectors[a1], vectors[a2]]))

    ids, matrix = await load_user_matrix(db, BOB, MODEL)
    assert ids == [b1]
    np.testing.assert_array_equal(matrix[0], vectors[b1])


async def test_no_vector_gives_an_empty_matrix(db: SQLiteDatabase) -> None:
    await add_memory(db, ALICE, "aime le thé")
    ids, matrix = await load_user_matrix(db, ALICE, MODEL)
    assert ids == []
    assert matrix.shape[0] == 0


async def test_changed_text_makes_the_vector_stale_and_unserved(db: SQLiteDatabase) -> None:
    tea = await add_memory(db, ALICE, "aime le thé")
    town = await add_memory(db, ALICE, "habite à Nantes")
    await embed_all(db)
    assert await stale_memories(db, MODEL, 10) == []

    await set_text(db, ALICE, town, "habite à Rennes")

    stale = await stale_memories(db, MODEL, 10)
    assert [(m.id, m.text, m.content_hash) for m in stale] == [
        (town, "habite à Rennes", content_hash("habite à Rennes"))
    ]
    ids, _ = await load_user_matrix(db, ALICE, MODEL)
    assert ids == [tea]


async def test_another_model_sees_every_memory_as_stale_and_no_vector(db: SQLiteDatabase) -> None:
    first = await add_memory(db, ALICE, "aime le thé")
    second = await add_memory(db, BOB, "joue du piano")
    await embed_all(db, MODEL)

    assert {m.id for m in await stale_memories(db, "other-model", 10)} == {first, second}
    assert (await load_user_matrix(db, ALICE, "other-model"))[0] == []
    assert (await load_user_matrix(db, ALICE, MODEL))[0] == [first]


async def test_stale_memories_lists_newest_first_within_the_limit(db: SQLiteDatabase) -> None:
    ids = [await add_memory(db, ALICE, f"souvenir {i}") for i in range(5)]
    assert [m.id for m in await stale_memories(db, MODEL, 2)] == [ids[4], ids[3]]


async def test_stale_among_reads_only_the_listed_memories_of_one_user(db: SQLiteDatabase) -> None:
    embedded = await add_memory(db, ALICE, "aime le thé")
    await embed_all(db)
    edited = await add_memory(db, ALICE, "joue du piano")
    await embed_all(db)
    await set_text(db, ALICE, edited, "joue du violon")  # its vector now older than its text
    fresh = await add_memory(db, ALICE, "a un chat")
    dated = await add_memory(db, ALICE, "part demain", expires_in=timedelta(days=1))
    bobs = await add_memory(db, BOB, "aime le café")
    unlisted = await add_memory(db, ALICE, "habite à Lyon")

    listed = [embedded, edited, fresh, dated, bobs, 999_999]
    assert [m.id for m in await stale_among(db, MODEL, ALICE, listed)] == [edited, fresh, dated]
    assert [m.id for m in await stale_among(db, MODEL, ALICE, listed, now=utcnow() + timedelta(days=2))] == [
        edited,
        fresh,
    ]
    assert await stale_among(db, MODEL, ALICE, []) == []
    assert unlisted in {m.id for m in await stale_memories(db, MODEL, 10)}


async def test_expired_memories_are_neither_served_nor_indexed(db: SQLiteDatabase) -> None:
    live = await add_memory(db, ALICE, "aime le thé")
    dated = await add_memory(db, ALICE, "a un rendez-vous demain", expires_in=timedelta(days=1))
    await embed_all(db)
    later = utcnow() + timedelta(days=2)

    assert (await load_user_matrix(db, ALICE, MODEL))[0] == [live, dated]
    assert (await load_user_matrix(db, ALICE, MODEL, now=later))[0] == [live]
    await set_text(db, ALICE, dated, "a un rendez-vous après-demain")
    assert await stale_memories(db, MODEL, 10, now=later) == []
    assert [m.id for m in await stale_memories(db, MODEL, 10)] == [dated]


async def test_storing_again_replaces_the_vector(db: SQLiteDatabase) -> None:
    memory = await add_memory(db, ALICE, "aime le thé")
    await embed_all(db)
    newer = random_unit(99)
    async with db.write() as conn:
        await store_vectors(conn, [VectorRow(memory, ALICE, MODEL, content_hash("aime le thé"), newer)])
    _, matrix = await load_user_matrix(db, ALICE, MODEL)
    np.testing.assert_array_equal(matrix, newer[None, :])


async def test_a_memory_deleted_while_embedding_is_skipped_not_fatal(db: SQLiteDatabase) -> None:
    kept = await add_memory(db, ALICE, "aime le thé")
    gone = await add_memory(db, ALICE, "habite à Nantes")
    stale = await stale_memories(db, MODEL, 10)
    await delete_memory(db, ALICE, gone)

    async with db.write() as conn:
        stored = await store_vectors(
            conn, [VectorRow(m.id, m.user_id, MODEL, m.content_hash, random_unit(m.id)) for m in stale]
        )

    assert stored == 1
    assert (await load_user_matrix(db, ALICE, MODEL))[0] == [kept]


async def test_a_vector_is_never_stored_under_another_users_memory(db: SQLiteDatabase) -> None:
    alice_memory = await add_memory(db, ALICE, "aime le thé")
    async with db.write() as conn:
        stored = await store_vectors(
            conn, [VectorRow(alice_memory, BOB, MODEL, content_hash("aime le thé"), random_unit(1))]
        )
    assert stored == 0
    assert (await load_user_matrix(db, BOB, MODEL))[0] == []
    assert (await load_user_matrix(db, ALICE, MODEL))[0] == []


async def test_deleting_a_memory_deletes_its_vectors(db: SQLiteDatabase) -> None:
    memory = await add_memory(db, ALICE, "aime le thé")
    await embed_all(db, MODEL)
    await embed_all(db, "other-model")
    await delete_memory(db, ALICE, memory)
    async with db.reader.execute("SELECT count(*) FROM memory_vectors") as cur:
        assert (await cur.fetchone())[0] == 0


async def test_delete_all_vectors_empties_the_index_only(db: SQLiteDatabase) -> None:
    await add_memory(db, ALICE, "aime le thé")
    await add_memory(db, BOB, "joue du piano")
    await embed_all(db)
    assert await delete_all_vectors(db) == 2
    assert (await load_user_matrix(db, ALICE, MODEL))[0] == []
    assert len(await stale_memories(db, MODEL, 10)) == 2


async def test_mixed_dimensions_under_one_model_serve_the_newest(db: SQLiteDatabase) -> None:
    old = await add_memory(db, ALICE, "aime le thé")
    new = await add_memory(db, ALICE, "habite à Nantes")
    async with db.write() as conn:
        yesterday = utcnow() - timedelta(days=1)
        eight = VectorRow(old, ALICE, MODEL, content_hash("aime le thé"), random_unit(1, 8))
        four = VectorRow(new, ALICE, MODEL, content_hash("habite à Nantes"), random_unit(2, 4))
        await store_vectors(conn, [eight], now=yesterday)
        await store_vectors(conn, [four])
    ids, matrix = await load_user_matrix(db, ALICE, MODEL)
    assert ids == [new]
    assert matrix.shape == (1, 4)


# --- full-text index --------------------------------------------------------------------------


async def test_fts_follows_insert_update_and_delete(db: SQLiteDatabase) -> None:
    memory = await add_memory(db, ALICE, "L'utilisateur fait du vélo le dimanche")
    assert set(await lexical_matches(db, ALICE, "vélo", 10)) == {memory}

    await set_text(db, ALICE, memory, "L'utilisateur fait de la natation le samedi")
    assert await lexical_matches(db, ALICE, "vélo", 10) == {}
    assert set(await lexical_matches(db, ALICE, "natation", 10)) == {memory}

    await delete_memory(db, ALICE, memory)
    assert await lexical_matches(db, ALICE, "natation", 10) == {}


async def test_fts_index_stays_consistent_with_its_content(db: SQLiteDatabase) -> None:
    if db.dialect != "sqlite":
        pytest.skip("FTS5's own integrity check; PostgreSQL's search column is generated from the row")
    memory = await add_memory(db, ALICE, "aime le thé vert")
    await set_text(db, ALICE, memory, "aime le café noir")
    await add_memory(db, BOB, "joue du piano")
    await delete_memory(db, ALICE, memory)
    async with db.write() as conn:
        # Raises "database disk image is malformed" if the index drifted from `memories`.
        await conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")


async def test_lexical_matches_are_scoped_by_user(db: SQLiteDatabase) -> None:
    alice_memory = await add_memory(db, ALICE, "aime le piano")
    bob_memory = await add_memory(db, BOB, "joue du piano")
    assert set(await lexical_matches(db, ALICE, "piano", 10)) == {alice_memory}
    assert set(await lexical_matches(db, BOB, "piano", 10)) == {bob_memory}
    assert await lexical_matches(db, "333", "piano", 10) == {}


async def test_lexical_matches_ignore_accents_and_case(db: SQLiteDatabase) -> None:
    memory = await add_memory(db, ALICE, "Fait du Vélo à Montréal")
    assert set(await lexical_matches(db, ALICE, "velo montreal", 10)) == {memory}


async def test_lexical_scores_rank_the_better_match_first(db: SQLiteDatabase) -> None:
    both = await add_memory(db, ALICE, "fait du vélo chaque dimanche")
    one = await add_memory(db, ALICE, "a acheté un vélo rouge")
    await add_memory(db, ALICE, "habite à Nantes")
    scores = await lexical_matches(db, ALICE, "Tu fais du vélo dimanche ?", 10)
    assert set(scores) == {both, one}
    assert 0 < scores[one] < scores[both] < 1


async def test_lexical_matches_respect_the_limit(db: SQLiteDatabase) -> None:
    for i in range(5):
        await add_memory(db, ALICE, f"vélo numéro {i}")
    assert len(await lexical_matches(db, ALICE, "vélo", 3)) == 3


async def test_query_of_stop_words_only_matches_nothing(db: SQLiteDatabase) -> None:
    await add_memory(db, ALICE, "il est dans le jardin")
    assert fts_query("le la de et il est") == ""
    assert await lexical_matches(db, ALICE, "le la de et il est", 10) == {}


@pytest.mark.parametrize(
    "query",
    [
        'vélo" OR "piano',
        '"vélo',
        "vélo AND",
        "AND vélo OR",
        "NEAR(vélo piano)",
        "vél* vélo",
        "(vélo",
        "vélo)",
        "text: vélo",
        "^vélo",
        "-vélo",
        "vélo NOT",
        "{text} : vélo",
        "vélo + piano",
    ],
)
async def test_fts_syntax_in_the_query_is_only_text(db: SQLiteDatabase, query: str) -> None:
    velo = await add_memory(db, ALICE, "fait du vélo")
    await add_memory(db, ALICE, "joue du piano" if "piano" not in query else "habite à Nantes")
    assert set(await lexical_matches(db, ALICE, query, 10)) == {velo}


@pytest.mark.parametrize("query", ['"', "AND", "OR NOT", "NEAR", "*", "()", '") OR ("', "^", ":"])
async def test_bare_fts_operators_neither_fail_nor_match_everything(db: SQLiteDatabase, query: str) -> None:
    await add_memory(db, ALICE, "fait du vélo")
    assert await lexical_matches(db, ALICE, query, 10) == {}


async def test_migration_indexes_memories_that_existed_before_it(tmp_path: Path) -> None:
    only_first = tmp_path / "migrations"
    only_first.mkdir()
    shutil.copy(MIGRATIONS_DIR / "0001_memory.sql", only_first)
    path = tmp_path / "old.sqlite3"
    old = await SQLiteDatabase.open(path, migrations=only_first)
    memory = await add_memory(old, ALICE, "collectionne les timbres")
    await old.close()

    upgraded = await SQLiteDatabase.open(path)
    try:
        assert set(await lexical_matches(upgraded, ALICE, "timbres", 10)) == {memory}
    finally:
        await upgraded.close()


async def test_lexical_matches_among_restricts_before_the_limit(db: SQLiteDatabase) -> None:
    # Short texts rank first in bm25: unrestricted, these twenty take every place of the limit.
    crowd = [await add_memory(db, ALICE, f"vélo {n}") for n in range(20)]
    wanted = await add_memory(db, ALICE, "L'utilisateur a parlé de son vélo rouge pendant les vacances d'été")
    assert wanted not in await lexical_matches(db, ALICE, "vélo", 16)

    assert set(await lexical_matches(db, ALICE, "vélo", 16, among=[wanted])) == {wanted}
    assert set(await lexical_matches(db, ALICE, "vélo", 16, among=[wanted, crowd[3]])) == {wanted, crowd[3]}
    assert await lexical_matches(db, ALICE, "vélo", 16, among=[]) == {}


async def test_lexical_matches_among_stays_scoped_by_user(db: SQLiteDatabase) -> None:
    bob_memory = await add_memory(db, BOB, "joue du piano")
    assert await lexical_matches(db, ALICE, "piano", 10, among=[bob_memory]) == {}
    assert set(await lexical_matches(db, BOB, "piano", 10, among=[bob_memory])) == {bob_memory}
