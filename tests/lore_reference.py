"""The reference the fast key matcher is measured against (tests and bench/lore.py)."""

from __future__ import annotations

import re

from bot.characters.lorebook import Lorebook


def naive_fired(book: Lorebook, text: str) -> dict[int, str]:
    """The reference the fast matcher is measured against: every primary key of every entry
    tried in turn with `in`, its word boundaries then checked with `re.search` (the bench and
    the tests compare both)."""
    lowered = text.lower()
    hits: dict[int, str] = {}
    for index, entry in enumerate(book.entries):
        if entry.constant:
            hits[index] = "(constant)"
            continue
        haystack = text if entry.case_sensitive else lowered
        for key in entry.keys:
            needle = key if entry.case_sensitive else key.lower()
            if needle not in haystack:
                continue
            single_word = not any(c.isspace() for c in key)
            if not entry.whole_words or not single_word or re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack):
                hits[index] = key
                break
        else:
            for pattern in entry.regexes:
                if pattern.search(text):
                    hits[index] = f"/{pattern.pattern}/"
                    break
    return hits
