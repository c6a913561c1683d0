"""The replace guard: the vélo/mercredi failure (docs/design.md, "Write path") and its
neighbours, on labelled data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.memory.write.replace_guard import SAME_SUBJECT_CUTOFF, judge_replacement, subject_overlap

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from replace_guard_corpus import DIFFERENT, HARD, PEOPLE_OTHER, PEOPLE_SAME, SAME
from replace_guard_corpus_en import PEOPLE_OTHER_EN, PEOPLE_SAME_EN


def test_seed_001_velo_is_not_overwritten_by_mercredi():
    verdict = judge_replacement(
        "L'utilisateur vient au bureau en vélo.",
        "L'utilisateur n'est jamais disponible le mercredi.",
        "Je ne suis jamais disponible le mercredi, c'est mon jour de sport.",
    )
    assert not verdict.replace and "not the same subject" in verdict.why


@pytest.mark.parametrize("old, new, message", SAME)
def test_true_corrections_replace(old, new, message):
    assert judge_replacement(old, new, message).replace


@pytest.mark.parametrize("old, new, message", DIFFERENT + HARD)
def test_neighbouring_facts_are_added_beside_the_old_one(old, new, message):
    assert not judge_replacement(old, new, message).replace


def test_overlap_alone_does_not_separate_corrections_from_neighbours():
    """Why the message decides above the cut-off: both score exactly the cut-off."""
    correction = subject_overlap("L'utilisateur habite à Nantes.", "L'utilisateur habite à Lyon.")
    neighbour = subject_overlap("L'utilisateur habite à Nantes.", "L'utilisateur habite avec sa sœur.")
    assert correction == neighbour == SAME_SUBJECT_CUTOFF


def test_an_enrichment_keeping_the_whole_old_fact_replaces_even_with_aussi():
    verdict = judge_replacement(
        "L'utilisateur est allergique aux arachides.",
        "L'utilisateur est allergique aux arachides et aux noix de cajou.",
        "Et aussi aux noix de cajou.",
    )
    assert verdict.replace


# Another person's fact (issue 22, item 9): a change word counts only for the words the old text
# alone has, so "mon frère a déménagé" does not replace the sister's fact; the same person's fact
# changed, or the old person named, still does. English and French alike.
@pytest.mark.parametrize("old, new, message", PEOPLE_SAME + PEOPLE_SAME_EN)
def test_a_relatives_own_fact_changed_replaces(old, new, message):
    assert judge_replacement(old, new, message).replace


@pytest.mark.parametrize("old, new, message", PEOPLE_OTHER + PEOPLE_OTHER_EN)
def test_another_relatives_fact_is_added_beside_the_old_one(old, new, message):
    verdict = judge_replacement(old, new, message)
    assert not verdict.replace
    assert "whom the message does not name" in verdict.why
