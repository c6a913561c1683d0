"""Reads the replace guard's cut-off from labelled replacement pairs and prints where it falls.

Run from the repository root: python bench/replace_guard.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replace_guard_corpus import DIFFERENT, SAME  # noqa: E402

from bot.memory.replace_guard import SAME_SUBJECT_CUTOFF, subject_overlap  # noqa: E402


def main() -> None:
    same = sorted((subject_overlap(a, b), a, b) for a, b in SAME)
    diff = sorted((subject_overlap(a, b), a, b) for a, b in DIFFERENT)
    print(f"pairs: {len(same)} same-subject, {len(diff)} different-subject")
    print(f"highest different-subject score: {diff[-1][0]:.2f}  {diff[-1][1]!r} -> {diff[-1][2]!r}")
    kept = [s for s in same if s[0] >= SAME_SUBJECT_CUTOFF]
    print(f"cut-off in use: {SAME_SUBJECT_CUTOFF:.2f}")
    print(f"same-subject replacements applied: {len(kept)}/{len(same)}; applied as adds instead:")
    for score, a, b in same:
        if score < SAME_SUBJECT_CUTOFF:
            print(f"  {score:.2f}  {a!r} -> {b!r}")
    wrong = [d for d in diff if d[0] >= SAME_SUBJECT_CUTOFF]
    print(f"different-subject replacements that would erase a fact: {len(wrong)}/{len(diff)}")
    for score, a, b in wrong:
        print(f"  {score:.2f}  {a!r} -> {b!r}")
    print("score distribution (same | different):")
    for threshold in (0.0, 0.2, 0.34, 0.5, 0.67, 1.0):
        s = sum(1 for x in same if x[0] >= threshold)
        d = sum(1 for x in diff if x[0] >= threshold)
        print(f"  >= {threshold:.2f}: {s:2d} | {d:2d}")


if __name__ == "__main__":
    main()
