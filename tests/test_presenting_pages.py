"""`memory_pages`: every /memories page, header included, fits in one Discord message."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.memory.model import MAX_MEMORY_CHARS, Memory
from bot.presenting import memory_pages
from cogs.utils.answering import DISCORD_LIMIT
from tests.lanes import examples

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
HEADER = re.compile(r"Memories (\d+)–(\d+) of (\d+):")


def memory(id_: int, text: str, *, pinned: bool = False, story: bool = False, dated: bool = False) -> Memory:
    return Memory(
        id=id_,
        user_id="u",
        text=text,
        type="preference",
        scope="story" if story else "global",
        pinned=pinned,
        confidence=1.0,
        created_at=NOW,
        updated_at=NOW,
        story_id="s" if story else None,
        expires_at=NOW + timedelta(days=30) if dated else None,
    )


def ids_on(page: str) -> list[int]:
    return [int(line.split(" ", 1)[0].lstrip("#")) for line in page.split("\n")[1:]]


def check_pages(pages: list[str], memories: list[Memory], *, per_page: int, max_chars: int) -> None:
    """Each page fits, carries a true header, and together they list every memory once, in order."""
    total = len(memories)
    worst_header = f"Memories {total}–{total} of {total}:"
    shown: list[int] = []
    for n, page in enumerate(pages):
        assert len(page) <= max_chars, (n, len(page))
        header, *lines = page.split("\n")
        first, last, of = map(int, HEADER.fullmatch(header).groups())  # type: ignore[union-attr]
        assert (first, last, of) == (len(shown) + 1, len(shown) + len(lines), total)
        assert 1 <= len(lines) <= per_page
        shown.extend(ids_on(page))
        if n + 1 < len(pages) and len(lines) < per_page:
            # Not needlessly short: the next line did not fit (within the widest header's margin).
            next_line = pages[n + 1].split("\n")[1]
            assert len(page) + 1 + len(next_line) + len(worst_header) - len(header) > max_chars
    assert shown == [m.id for m in memories]


def test_maximum_length_memories_fit_a_discord_message() -> None:
    text = ("Alice raconte longuement son voyage " * 20)[:MAX_MEMORY_CHARS]
    assert len(text) == MAX_MEMORY_CHARS
    memories = [memory(1_000_000 + n, text, pinned=True, story=True, dated=True) for n in range(37)]
    pages = memory_pages(memories, now=NOW)
    check_pages(pages, memories, per_page=10, max_chars=1_900)
    assert all(len(p) <= DISCORD_LIMIT for p in pages)
    assert len(pages) > 37 // 10 + 1  # the character budget, not the 10 lines, made these pages


def test_short_memories_still_come_ten_to_a_page() -> None:
    memories = [memory(n, f"Alice aime le numéro {n}") for n in range(1, 26)]
    pages = memory_pages(memories, now=NOW)
    check_pages(pages, memories, per_page=10, max_chars=1_900)
    assert [HEADER.match(p)[0] for p in pages] == [  # type: ignore[index]
        "Memories 1–10 of 25:",
        "Memories 11–20 of 25:",
        "Memories 21–25 of 25:",
    ]


def test_nothing_to_show() -> None:
    assert memory_pages([], now=NOW) == ["No memories yet."]


def test_a_line_longer_than_the_budget_is_clipped_to_fit() -> None:
    memories = [memory(1, "x" * MAX_MEMORY_CHARS), memory(2, "court")]
    pages = memory_pages(memories, now=NOW, max_chars=80)
    check_pages(pages, memories, per_page=10, max_chars=80)
    assert pages[0].endswith("…")


def test_a_budget_without_room_for_a_line_is_refused() -> None:
    with pytest.raises(ValueError):
        memory_pages([memory(1, "a")], now=NOW, max_chars=len("Memories 1–1 of 1:\n"))


@settings(max_examples=examples(100), deadline=None)
@given(
    lengths=st.lists(st.integers(1, MAX_MEMORY_CHARS), min_size=1, max_size=40),
    per_page=st.integers(1, 12),
    max_chars=st.integers(60, 2_000),
    flags=st.booleans(),
)
def test_property_every_page_fits_and_every_memory_is_listed_once(
    lengths: list[int], per_page: int, max_chars: int, flags: bool
) -> None:
    memories = [memory(n, "m" * length, pinned=flags, story=flags, dated=flags) for n, length in enumerate(lengths, 1)]
    pages = memory_pages(memories, now=NOW, per_page=per_page, max_chars=max_chars)
    check_pages(pages, memories, per_page=per_page, max_chars=max_chars)
