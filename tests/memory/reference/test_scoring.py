"""Cosine scoring against a user's vector matrix."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bot.memory.reference.scoring import cosine_scores


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
