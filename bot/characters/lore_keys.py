"""Which keys of a lorebook appear in a text: every primary and secondary key of every entry,
found at once.

Plain keys are matched by one Aho-Corasick automaton per case rule (pyahocorasick), which finds
every occurrence, overlapping ones included, in one pass over the text; a one-word key of an
entry that matches whole words is then checked for word boundaries on its few hits (a key of
several words is matched as written, as SillyTavern does). Regex keys, rarer, are searched one
by one, each within REGEX_TIMEOUT_SECONDS and all of a turn's within REGEX_TURN_SECONDS: a key
that runs out of time is disabled until the next start (logged once, listed in /why). A card
comes from anywhere: its keys are untrusted.
"""

from __future__ import annotations

import logging
import re
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import ahocorasick
import regex

log = logging.getLogger(__name__)

# A key with nested repetition ("/^(\w+\s?)+$/") can backtrack for hours on one short message,
# and Python's `re` holds the process meanwhile, signals included. The `regex` package reads the
# same syntax as `re` (Unicode \b and \w, lookarounds, backreferences: what RE2 would drop or
# change) and gives up at a timeout. A sound key scans a turn's text in well under a millisecond.
REGEX_TIMEOUT_SECONDS = 0.1
# All regex keys of one turn together: a card with many such keys holds the event loop this long
# at most (other users' commands must be answered within Discord's 3 s); the keys left over are
# searched on the next turn, by when the ones that ran out of time are disabled.
REGEX_TURN_SECONDS = 0.3
PRIMARY, SECONDARY = 0, 1
# A backslash before a letter other than these may mean something case-dependent (\S, \W, \x41,
# \N{...}): such a pattern is not lower-cased (see `_on_lowered`).
_SAFE_ESCAPE_LETTERS = frozenset("bwsd")
_QUANTIFIERS = frozenset("?*+{")


@dataclass(frozen=True, slots=True)
class Keys:
    """One entry's keys as the index reads them."""

    name: str = ""
    primary: tuple[str, ...] = ()
    primary_regexes: tuple[regex.Pattern[str] | re.Pattern[str], ...] = ()
    secondary: tuple[str, ...] = ()
    secondary_regexes: tuple[regex.Pattern[str] | re.Pattern[str], ...] = ()
    case_sensitive: bool = False
    whole_words: bool = True


@dataclass(slots=True)
class Found:
    """The keys of one entry found in the texts scanned, as written, in the order found, each
    with the newest text holding it (0: the first text given, the message answered)."""

    primary: dict[str, int] = field(default_factory=dict)
    secondary: dict[str, int] = field(default_factory=dict)

    def add(self, slot: int, key: str, at: int = 0) -> None:
        keys = self.primary if slot == PRIMARY else self.secondary
        keys[key] = min(at, keys.get(key, at))

    def merge(self, other: Found) -> None:
        for key, at in other.primary.items():
            self.add(PRIMARY, key, at)
        for key, at in other.secondary.items():
            self.add(SECONDARY, key, at)

    def within(self, depth: int) -> Found:
        """The keys found in the `depth` newest texts."""
        return Found(
            {k: a for k, a in self.primary.items() if a < depth}, {k: a for k, a in self.secondary.items() if a < depth}
        )


@dataclass(slots=True)
class KeyIndex:
    entries: Sequence[Keys]
    _automata: dict[bool, Any] = field(default_factory=dict, init=False, repr=False)
    # (entry index, slot, the pattern searched, whether in the lower-cased text, a literal every
    # match starts with ("" when unknown), the key as written)
    _regexes: list[tuple[int, int, regex.Pattern[str], bool, str, str]] = field(
        default_factory=list, init=False, repr=False
    )
    # Positions in `_regexes` of the keys that ran out of time.
    _disabled: set[int] = field(default_factory=set, init=False, repr=False)
    _turn_budget_logged: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        # One automaton per case rule; each hit names (entry index, slot, key as written, whether
        # its word boundaries are checked).
        for case_sensitive in (False, True):
            automaton = ahocorasick.Automaton()
            found: dict[str, list[tuple[int, int, str, bool]]] = {}
            for index, keys in enumerate(self.entries):
                if keys.case_sensitive != case_sensitive:
                    continue
                for slot, written in ((PRIMARY, keys.primary), (SECONDARY, keys.secondary)):
                    for key in written:
                        needle = key if case_sensitive else key.lower()
                        bounded = keys.whole_words and not any(c.isspace() for c in key)
                        found.setdefault(needle, []).append((index, slot, key, bounded))
            for needle, owners in found.items():
                automaton.add_word(needle, (len(needle), owners))
            if found:
                automaton.make_automaton()
                self._automata[case_sensitive] = automaton
        for index, keys in enumerate(self.entries):
            for slot, patterns in ((PRIMARY, keys.primary_regexes), (SECONDARY, keys.secondary_regexes)):
                for compiled in patterns:
                    # A pattern compiled with Python's `re` (another reader's) is searched with
                    # the same time limit: `re` has none.
                    pattern = (
                        compiled
                        if isinstance(compiled, regex.Pattern)
                        else regex.compile(compiled.pattern, compiled.flags)
                    )
                    lowered = _on_lowered(pattern)
                    searched = lowered or pattern
                    prefix = _literal_prefix(searched) if not searched.flags & regex.IGNORECASE else ""
                    self._regexes.append((index, slot, searched, lowered is not None, prefix, f"/{pattern.pattern}/"))

    def scan(self, texts: Sequence[str] | str, deadline: float | None = None) -> dict[int, Found]:
        """Entry index → its keys found in `texts` (newest first; a key counts in the text that
        holds it whole). `deadline` (a `time.perf_counter()` value) bounds the regex searches of
        the whole turn; one is set for this call when None."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        joined = "\n".join(texts)
        starts = list(accumulate((len(t) + 1 for t in texts[:-1]), initial=0))
        hits: dict[int, Found] = {}
        for case_sensitive, automaton in self._automata.items():
            haystack = joined if case_sensitive else joined.lower()
            for end, (length, owners) in automaton.iter(haystack):
                start = end - length + 1
                at_boundaries = not (
                    (start > 0 and _word_char(haystack[start - 1]))
                    or (end + 1 < len(haystack) and _word_char(haystack[end + 1]))
                )
                at = bisect_right(starts, start) - 1
                for index, slot, key, bounded in owners:
                    if at_boundaries or not bounded:
                        hits.setdefault(index, Found()).add(slot, key, at)
        if self._regexes:
            self._search_regexes(
                texts, joined, hits, deadline if deadline is not None else time.perf_counter() + REGEX_TURN_SECONDS
            )
        return hits

    def _search_regexes(self, texts: list[str], joined: str, hits: dict[int, Found], deadline: float) -> None:
        lowered = joined.lower()
        for position, (index, slot, pattern, on_lowered, prefix, key) in enumerate(self._regexes):
            haystack = lowered if on_lowered else joined
            found = hits.get(index)
            already = found is not None and key in (found.primary if slot == PRIMARY else found.secondary)
            # `in` finds a literal far faster than a regex scans for "\bword…".
            if already or position in self._disabled or prefix not in haystack:
                continue
            matched = self._search(position, pattern, haystack, deadline)
            if not matched:
                continue
            if len(texts) == 1:
                hits.setdefault(index, Found()).add(slot, key, 0)
                continue
            # Which text holds it, newest first: one of them, or none (a match across two).
            for at, text in enumerate(texts):
                if self._search(position, pattern, text.lower() if on_lowered else text, deadline):
                    hits.setdefault(index, Found()).add(slot, key, at)
                    break

    def _search(self, position: int, pattern: regex.Pattern[str], haystack: str, deadline: float) -> bool:
        """Whether the regex key at `position` matches, within its time and the turn's."""
        if position in self._disabled:
            return False
        left = deadline - time.perf_counter()
        if left <= 0:
            if not self._turn_budget_logged:
                self._turn_budget_logged = True
                log.warning(
                    "lore: the regular expressions used up their %g s of a turn; the keys left "
                    "are searched on the next turns while the slow ones are disabled",
                    REGEX_TURN_SECONDS,
                )
            return False
        timeout = min(REGEX_TIMEOUT_SECONDS, left)
        try:
            return pattern.search(haystack, timeout=timeout) is not None
        except TimeoutError:
            if timeout < REGEX_TIMEOUT_SECONDS:
                return False  # cut short by the turn's budget: given its full time on a later turn
            self._disabled.add(position)
            index, key = self._regexes[position][0], self._regexes[position][5]
            log.warning(
                "lore: the key %s of the entry %r took more than %g s on a text of %d characters "
                "and is disabled until the next start; a regular expression with nested or overlapping "
                "repetition (such as (\\w+\\s?)+ or (\\w|\\w\\w)+) can run for hours: rewrite it without",
                key,
                self.entries[index].name,
                REGEX_TIMEOUT_SECONDS,
                len(haystack),
            )
            return False

    def disabled(self) -> list[tuple[int, str]]:
        """(entry index, key as written) of every regex key disabled for running out of time."""
        return [(self._regexes[p][0], self._regexes[p][5]) for p in sorted(self._disabled)]

    def regex_probes(self) -> list[tuple[regex.Pattern[str], bool, str]]:
        """(pattern, whether searched in the lower-cased text, literal prefix) of each regex key:
        what the bench times on its own."""
        return [(pattern, lowered, prefix) for _, _, pattern, lowered, prefix, _ in self._regexes]


def _on_lowered(pattern: regex.Pattern[str]) -> regex.Pattern[str] | None:
    """A case-insensitive regex as a case-sensitive one over the lower-cased text, when that is
    the same search: a regex scans for a literal much faster without IGNORECASE."""
    if not pattern.flags & regex.IGNORECASE:
        return None
    source = pattern.pattern
    escapes = re.findall(r"\\(.)", source)
    if any(c.isalpha() and c not in _SAFE_ESCAPE_LETTERS for c in escapes) or "(?" in source:
        return None
    return regex.compile(source.lower(), pattern.flags & ~regex.IGNORECASE)


def _literal_prefix(pattern: regex.Pattern[str]) -> str:
    """Plain characters every match of `pattern` starts with, after an optional leading \\b;
    "" when the pattern may match otherwise (an alternation, a class, a quantifier, a flag)."""
    source = pattern.pattern
    if "|" in source or pattern.flags & (regex.VERBOSE | regex.IGNORECASE):
        return ""
    source = source.removeprefix("\\b")
    prefix = []
    for i, char in enumerate(source):
        if not (char.isalnum() or char == " ") or (i + 1 < len(source) and source[i + 1] in _QUANTIFIERS):
            break
        prefix.append(char)
    return "".join(prefix)


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"
