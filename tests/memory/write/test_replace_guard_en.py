"""The replace guard on English replacements, labelled like the French ones."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.memory.write.replace_guard import judge_replacement

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from replace_guard_corpus_en import DIFFERENT_EN, HARD_EN, SAME_EN

# A correction to another word with no shared stem: only meaning links "vegetarian" and
# "vegan", so the guard keeps the old fact and adds the new one beside it (the safe side).
KNOWN_MISSES = [("The user is vegetarian.", "The user has become vegan.")]


@pytest.mark.parametrize("old, new, message", [c for c in SAME_EN if c[:2] not in KNOWN_MISSES])
def test_true_english_corrections_replace(old, new, message):
    assert judge_replacement(old, new, message).replace


def test_the_known_english_miss_is_added_beside_not_lost():
    missed = [(old, new) for old, new, message in SAME_EN if not judge_replacement(old, new, message).replace]
    assert missed == KNOWN_MISSES


@pytest.mark.parametrize("old, new, message", DIFFERENT_EN + HARD_EN)
def test_english_neighbouring_facts_are_added_beside_the_old_one(old, new, message):
    assert not judge_replacement(old, new, message).replace


def test_also_in_english_adds_a_fact():
    verdict = judge_replacement("The user speaks English.", "The user speaks Spanish.", "I speak Spanish too.")
    assert not verdict.replace
