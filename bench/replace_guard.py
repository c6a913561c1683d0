"""Reads the replace guard on labelled replacements and prints where each kind falls.

Run from the repository root: python bench/replace_guard.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replace_guard_corpus import DIFFERENT, HARD, PEOPLE_OTHER, PEOPLE_SAME, SAME
from replace_guard_corpus_en import DIFFERENT_EN, HARD_EN, PEOPLE_OTHER_EN, PEOPLE_SAME_EN, SAME_EN

from bot.memory.write.replace_guard import SAME_SUBJECT_CUTOFF, judge_replacement, subject_overlap


def report(language: str, SAME: list, DIFFERENT: list, HARD: list, PEOPLE_SAME: list, PEOPLE_OTHER: list) -> None:
    print(f"=== {language} ===")
    print(
        f"labelled replacements: {len(SAME)} true corrections, {len(DIFFERENT)} unrelated, {len(HARD)} hard (same verb)"
    )
    print("subject overlap distribution (correct | unrelated | hard):")
    for threshold in (0.0, 0.2, 0.34, 0.5, 0.67, 1.0):
        counts = [
            sum(1 for old, new, _ in group if subject_overlap(old, new) >= threshold)
            for group in (SAME, DIFFERENT, HARD)
        ]
        print(f"  >= {threshold:.2f}: {counts[0]:2d} | {counts[1]:2d} | {counts[2]:2d}")
    print(f"cut-off on overlap: {SAME_SUBJECT_CUTOFF:.2f}; above it, the user's message decides")
    groups = (
        ("true corrections", SAME, True),
        ("unrelated", DIFFERENT, False),
        ("hard", HARD, False),
        ("a relative's fact changed", PEOPLE_SAME, True),
        ("another relative named", PEOPLE_OTHER, False),
    )
    for name, group, want in groups:
        verdicts = [(judge_replacement(old, new, message), old, new) for old, new, message in group]
        right = sum(1 for v, _, _ in verdicts if v.replace is want)
        print(
            f"{name}: {right}/{len(group)} decided as labelled ({'replaced' if want else 'added beside the old fact'})"
        )
        for v, old, new in verdicts:
            if v.replace is not want:
                print(f"  wrong: {old!r} -> {new!r}: {v.why}")


def main() -> None:
    report("French (and the few English cases of the first corpus)", SAME, DIFFERENT, HARD, PEOPLE_SAME, PEOPLE_OTHER)
    print()
    report("English", SAME_EN, DIFFERENT_EN, HARD_EN, PEOPLE_SAME_EN, PEOPLE_OTHER_EN)


if __name__ == "__main__":
    main()
