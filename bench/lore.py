"""Lore bench: a 200-entry lorebook matched per turn, the fast matcher against a naive scan.

Run from the repository root: ``python bench/lore.py``. The book has 200 entries of 3 plain
keywords each (a fifth case-sensitive, a seventh matching inside words) and 10 regex keys; a
turn scans the last message and the 4 before it (~1,200 characters). Prints the median time
per turn of ``Lorebook.match`` and of the naive scan (every keyword of every entry tried with
``in`` / ``re.search``), their ratio, and whether both fire the same entries on every turn.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.characters.lore import LoreEntry
from bot.characters.lorebook import Lorebook
from tests.lore_reference import naive_fired

ENTRIES = 200
TURNS = 300
WORDS = (
    "harbour",
    "tavern",
    "guild",
    "market",
    "tower",
    "bridge",
    "forest",
    "river",
    "castle",
    "temple",
    "moon",
    "storm",
    "queen",
    "smith",
    "dragon",
    "library",
    "garden",
    "gate",
    "mine",
    "island",
)


def make_book(rng: random.Random) -> Lorebook:
    entries = []
    for n in range(ENTRIES):
        keys = tuple(
            f"{rng.choice(WORDS)} {rng.choice(WORDS)}{n}" if k else f"{rng.choice(WORDS)}{n}" for k in range(3)
        )
        regexes = (regex.compile(rf"\b{rng.choice(WORDS)}s? of {n}\b", regex.IGNORECASE),) if n % 20 == 0 else ()
        entries.append(
            LoreEntry(
                f"entry {n}",
                "lore " * rng.randint(5, 40),
                keys=keys,
                regexes=regexes,
                case_sensitive=n % 5 == 0,
                whole_words=n % 7 != 0,
                order=n,
                priority=rng.randint(0, 3),
            )
        )
    return Lorebook(entries)


def make_turn(rng: random.Random, book: Lorebook) -> list[str]:
    """Five messages of chat; now and then one names a keyword of the book."""
    messages = []
    for _ in range(5):
        words = [
            rng.choice(rng.choice(book.entries).keys) if rng.random() < 0.02 else rng.choice(WORDS) for _ in range(40)
        ]
        messages.append(" ".join(words))
    return messages


def main() -> None:
    rng = random.Random(13)
    book = make_book(rng)
    turns = [make_turn(rng, book) for _ in range(TURNS)]
    regex_only: list[float] = []
    fast: list[float] = []
    naive: list[float] = []
    same = True
    fired = 0
    for turn in turns:
        start = time.perf_counter()
        hits = book.match(turn, budget_chars=2000, scan_depth=4).hits
        fast.append(time.perf_counter() - start)
        text = "\n".join(turn)
        start = time.perf_counter()
        lowered = text.lower()
        for pattern, on_lowered, prefix in book._index.regex_probes():
            haystack = lowered if on_lowered else text
            if prefix in haystack:
                pattern.search(haystack)
        regex_only.append(time.perf_counter() - start)
        start = time.perf_counter()
        reference = naive_fired(book, text)
        naive.append(time.perf_counter() - start)
        same &= {h.name for h in hits} == {book.entries[i].name for i in reference}
        fired += len(hits)
    fast_ms = statistics.median(fast) * 1000
    naive_ms = statistics.median(naive) * 1000
    print(
        f"lorebook: {ENTRIES} entries, {sum(len(e.keys) for e in book.entries)} plain keywords, "
        f"{sum(len(e.regexes) for e in book.entries)} regex keys; {TURNS} turns of "
        f"{statistics.mean(len(chr(10).join(t)) for t in turns):.0f} characters scanned, "
        f"{fired / TURNS:.1f} entries fired per turn"
    )
    print(
        f"fast matcher (Aho-Corasick + regexes, budget applied): median {fast_ms:.3f} ms per turn, "
        f"p95 {sorted(fast)[int(TURNS * 0.95)] * 1000:.3f} ms"
    )
    print(f"  of which the 10 regex keys, searched one by one:    median {statistics.median(regex_only) * 1000:.3f} ms")
    print(f"naive scan (every keyword of every entry):             median {naive_ms:.3f} ms per turn")
    print(f"ratio naive / fast: {naive_ms / fast_ms:.1f}x; same entries fired on every turn: {same}")


if __name__ == "__main__":
    main()
