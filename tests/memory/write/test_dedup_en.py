"""Write-path dedup in English, as thoroughly as in French: the traps, the corpus (no distinct
facts merged, rewordings merged as often as in French), contractions, substitutions."""

from __future__ import annotations

import itertools

import pytest

from bench.dedup_corpus import FACTS
from bench.dedup_corpus_en import FACTS_EN, TRAPS_EN
from bot.memory.carriers import carrier_tokens
from bot.memory.write.dedup import SIMILARITY_THRESHOLD, similarity, similarity_details


def _pairs(facts):  # type: ignore[no-untyped-def]
    memories = [(topic, text) for topic, texts in facts.items() for text in texts]
    return [(ta == tb, a, b) for (ta, a), (tb, b) in itertools.combinations(memories, 2)]


@pytest.mark.parametrize(("name", "a", "b"), TRAPS_EN)
def test_every_trap_stays_under_the_threshold_in_english(name: str, a: str, b: str) -> None:
    assert similarity(a, b) < SIMILARITY_THRESHOLD, name


def test_no_two_distinct_facts_of_the_english_corpus_merge() -> None:
    merged = [(a, b) for same, a, b in _pairs(FACTS_EN) if not same and similarity(a, b) >= SIMILARITY_THRESHOLD]
    assert merged == []


def test_english_rewordings_merge_at_least_as_often_as_french_ones() -> None:
    def share(facts) -> float:  # type: ignore[no-untyped-def]
        variants = [(a, b) for same, a, b in _pairs(facts) if same]
        return sum(similarity(a, b) >= SIMILARITY_THRESHOLD for a, b in variants) / len(variants)

    assert share(FACTS_EN) >= share(FACTS) - 0.02


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user does not like coriander.", "The user doesn't like coriander."),
        ("The user can't drive.", "The user cannot drive."),
        ("The user won't eat fish.", "The user will not eat fish."),
    ],
)
def test_a_contraction_and_its_spelt_out_form_are_one_wording(a: str, b: str) -> None:
    assert carrier_tokens(a) == carrier_tokens(b)
    assert similarity(a, b) >= SIMILARITY_THRESHOLD


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user is allergic to peanuts.", "The user is allergic to shellfish."),
        ("The user lives near their mother.", "The user lives with their mother."),
        ("The user is going on holiday with her husband.", "The user is going on holiday with Mary."),
        ("The user has a dentist appointment next Tuesday.", "The user has a dentist appointment next Thursday."),
        ("The user doesn't like coriander.", "The user likes coriander."),
        ("The user is seeing Mark tonight.", "The user is seeing Mark tomorrow night."),
        ("The user has 2 sisters.", "The user has 3 sisters."),
        ("The user wakes up at 7am.", "The user wakes up at 8am."),
    ],
)
def test_one_word_swapped_is_another_fact_in_english(a: str, b: str) -> None:
    assert similarity(a, b) < SIMILARITY_THRESHOLD


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The user has a sister named Anna who lives in York.", "The user's sister Anna lives in York."),
        (
            "The user has a dentist appointment next Tuesday.",
            "The user has an appointment with the dentist next Tuesday.",
        ),
        ("The user is allergic to peanuts.", "The user is allergic to peanut."),
        ("The user likes the films of Miyazaki.", "The user likes the films of Hayao Miyazaki."),
        ("The user wakes up at 7am.", "The user wakes up at 7:00 am."),
    ],
)
def test_english_additions_and_respellings_still_merge(a: str, b: str) -> None:
    assert not similarity_details(a, b)["substitution"]
    assert similarity(a, b) >= SIMILARITY_THRESHOLD
