"""Lorebooks: entries of world knowledge that enter the context when their keywords appear.

Two sources give the same `Lorebook`: the `character_book` of a SillyTavern V2/V3 card, and a
lore file of Écho's own format (YAML), named by a character file's `lore:` key (a SillyTavern
World Info file there is read into that format first, by bot/characters/world_info.py):

    budget_chars: 2000        # optional; LORE_BUDGET_CHARS when absent
    scan_depth: 4             # optional; recent messages scanned besides the last one
    entries:
      - name: The harbour
        keys: [harbour, port, "/quai(s)? d'orsay/i"]   # "/.../flags" is a regular expression
        content: The harbour of Vellmar freezes every winter.
        case_sensitive: false   # default false
        whole_words: true       # default true
        constant: false         # true: always in, keywords or not
        order: 100              # lower first in the block (a card's insertion_order)
        priority: 0             # higher kept first when the budget is short

Plain keywords of the whole book are matched at once by one Aho-Corasick automaton per case
rule (pyahocorasick), which finds every occurrence, overlapping ones included, in one pass
over the text; word boundaries are checked on the few hits. Regex keywords, rarer, are
searched one by one, each within REGEX_TIMEOUT_SECONDS: a key that runs out of time is disabled
(logged once, listed in /why). Entries are operator-written: never about a user, never a memory,
but a card comes from anywhere, and its keys are untrusted.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ahocorasick
import regex

from bot.characters.world_info import is_world_info, lore_from_world_info
from bot.clients.outside_files import LORE_FILE, read_document
from bot.errors import LoreError

log = logging.getLogger(__name__)

DEFAULT_SCAN_DEPTH = 4
# A key with nested repetition ("/^(\w+\s?)+$/") can backtrack for hours on one short message,
# and Python's `re` holds the process meanwhile, signals included. The `regex` package reads the
# same syntax as `re` (Unicode \b and \w, lookarounds, backreferences: what RE2 would drop or
# change) and gives up at a timeout. A sound key scans a turn's text in well under a millisecond.
REGEX_TIMEOUT_SECONDS = 0.1
# All regex keys of one turn together: a card with many such keys holds the event loop this long
# at most (other users' commands must be answered within Discord's 3 s); the keys left over are
# searched on the next turn, by when the ones that ran out of time are disabled.
REGEX_TURN_SECONDS = 0.3
# A card's token budget in characters: about four characters per token.
CHARS_PER_TOKEN = 4
_REGEX_KEY = re.compile(r"^/(?P<pattern>.+)/(?P<flags>[imsux]*)$", re.DOTALL)
_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL, "u": 0, "x": regex.VERBOSE}
_ENTRY_KEYS = (
    "name", "keys", "content", "case_sensitive", "whole_words", "constant", "order", "priority", "enabled",
)  # fmt: skip
_BOOK_KEYS = ("budget_chars", "scan_depth", "entries")
# A backslash before a letter other than these may mean something case-dependent (\S, \W, \x41,
# \N{...}): such a pattern is not lower-cased (see `_on_lowered`).
_SAFE_ESCAPE_LETTERS = frozenset("bwsd")


@dataclass(frozen=True, slots=True)
class LoreEntry:
    name: str
    content: str
    keys: tuple[str, ...] = ()
    regexes: tuple[regex.Pattern[str] | re.Pattern[str], ...] = ()
    case_sensitive: bool = False
    whole_words: bool = True
    constant: bool = False
    order: int = 100
    priority: int = 0


@dataclass(frozen=True, slots=True)
class LoreHit:
    """An entry that fired: on which keyword ("(constant)" for a constant one), at what cost;
    or, `disabled`, a regex key of it that ran out of time once and is no longer searched."""

    name: str
    keyword: str
    cost: int
    content: str
    kept: bool  # False: it fired but the budget was spent, or it is a disabled key
    disabled: bool = False


@dataclass(slots=True)
class Lorebook:
    entries: list[LoreEntry]
    budget_chars: int | None = None
    scan_depth: int | None = None
    _automata: dict[bool, Any] = field(default_factory=dict, init=False, repr=False)
    # (entry index, the pattern searched, whether in the lower-cased text, a literal every match
    # starts with ("" when unknown), the key as written)
    _regexes: list[tuple[int, regex.Pattern[str], bool, str, str]] = field(default_factory=list, init=False, repr=False)
    # Positions in `_regexes` of the keys that ran out of time.
    _disabled: set[int] = field(default_factory=set, init=False, repr=False)
    _turn_budget_logged: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        # One automaton per case rule; each hit names (entry index, keyword as written).
        for case_sensitive in (False, True):
            automaton = ahocorasick.Automaton()
            found: dict[str, list[tuple[int, str]]] = {}
            for index, entry in enumerate(self.entries):
                if entry.case_sensitive != case_sensitive:
                    continue
                for key in entry.keys:
                    needle = key if case_sensitive else key.lower()
                    found.setdefault(needle, []).append((index, key))
            for needle, owners in found.items():
                automaton.add_word(needle, (len(needle), owners))
            if found:
                automaton.make_automaton()
                self._automata[case_sensitive] = automaton
        for index, entry in enumerate(self.entries):
            for written in entry.regexes:
                # An entry built with Python's `re` (another lorebook format's reader) is searched
                # with the same time limit: `re` has none.
                pattern = written if isinstance(written, regex.Pattern) else regex.compile(written.pattern, written.flags)
                lowered = _on_lowered(pattern)
                searched = lowered or pattern
                prefix = _literal_prefix(searched) if not searched.flags & regex.IGNORECASE else ""
                self._regexes.append((index, searched, lowered is not None, prefix, f"/{pattern.pattern}/"))

    def fired(self, text: str) -> dict[int, str]:
        """Entry index → the first keyword that made it fire in `text` (constants included)."""
        hits: dict[int, str] = {i: "(constant)" for i, e in enumerate(self.entries) if e.constant}
        for case_sensitive, automaton in self._automata.items():
            haystack = text if case_sensitive else text.lower()
            for end, (length, owners) in automaton.iter(haystack):
                start = end - length + 1
                bounded = not (
                    (start > 0 and _word_char(haystack[start - 1]))
                    or (end + 1 < len(haystack) and _word_char(haystack[end + 1]))
                )
                for index, key in owners:
                    if index not in hits and (bounded or not self.entries[index].whole_words):
                        hits[index] = key
        lowered = text.lower()
        deadline = time.perf_counter() + REGEX_TURN_SECONDS
        for position, (index, pattern, on_lowered, prefix, key) in enumerate(self._regexes):
            haystack = lowered if on_lowered else text
            # `in` finds a literal far faster than a regex scans for "\bword…".
            if index in hits or position in self._disabled or prefix not in haystack:
                continue
            left = deadline - time.perf_counter()
            if left <= 0:
                if not self._turn_budget_logged:
                    self._turn_budget_logged = True
                    log.warning(
                        "lore: the regular expressions used up their %g s of a turn; the keys left "
                        "are searched on the next turns while the slow ones are disabled",
                        REGEX_TURN_SECONDS,
                    )
                break
            timeout = min(REGEX_TIMEOUT_SECONDS, left)
            try:
                found = pattern.search(haystack, timeout=timeout)
            except TimeoutError:
                if timeout < REGEX_TIMEOUT_SECONDS:
                    continue  # cut short by the turn's budget: given its full time on a later turn
                self._disabled.add(position)
                log.warning(
                    "lore: the key %s of the entry %r took more than %g s on a text of %d characters "
                    "and is disabled until the next start; a regular expression with nested or overlapping "
                    "repetition (such as (\\w+\\s?)+ or (\\w|\\w\\w)+) can run for hours: rewrite it without",
                    key, self.entries[index].name, REGEX_TIMEOUT_SECONDS, len(haystack),
                )
                continue
            if found:
                hits[index] = key
        return hits

    def disabled(self) -> list[tuple[int, str]]:
        """(entry index, key as written) of every regex key disabled for running out of time."""
        return [(self._regexes[p][0], self._regexes[p][4]) for p in sorted(self._disabled)]

    def match(self, recent: Sequence[str], *, budget_chars: int, scan_depth: int) -> list[LoreHit]:
        """The entries fired by the last message and the `scan_depth` messages before it;
        those kept fit the budget, higher priority first, and come in the block's order."""
        depth = self.scan_depth if self.scan_depth is not None else scan_depth
        budget = self.budget_chars if self.budget_chars is not None else budget_chars
        scanned = list(recent)[-(depth + 1):] if recent else []
        fired = self.fired("\n".join(scanned))
        ranked = sorted(fired, key=lambda i: (-self.entries[i].priority, self.entries[i].order, i))
        used = 0
        kept: set[int] = set()
        for index in ranked:
            cost = len(self.entries[index].content)
            if used + cost <= budget:
                kept.add(index)
                used += cost
        ordered = sorted(fired, key=lambda i: (i not in kept, self.entries[i].order, i))
        return [
            LoreHit(self.entries[i].name, fired[i], len(self.entries[i].content), self.entries[i].content, i in kept)
            for i in ordered
        ] + [LoreHit(self.entries[i].name, key, 0, "", False, disabled=True) for i, key in self.disabled()]


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


_QUANTIFIERS = frozenset("?*+{")


def _literal_prefix(pattern: regex.Pattern[str]) -> str:
    """Plain characters every match of `pattern` starts with, after an optional leading \\b;
    "" when the pattern may match otherwise (an alternation, a class, a quantifier, a flag)."""
    source = pattern.pattern
    if "|" in source or pattern.flags & (regex.VERBOSE | regex.IGNORECASE):
        return ""
    if source.startswith("\\b"):
        source = source[2:]
    prefix = []
    for i, char in enumerate(source):
        if not (char.isalnum() or char == " ") or (i + 1 < len(source) and source[i + 1] in _QUANTIFIERS):
            break
        prefix.append(char)
    return "".join(prefix)


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def naive_fired(book: Lorebook, text: str) -> dict[int, str]:
    """The reference the fast matcher is measured against: every keyword of every entry tried
    in turn with `in`, its word boundaries then checked with `re.search` (the bench and the
    tests compare both)."""
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
            if not entry.whole_words or re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", haystack):
                hits[index] = key
                break
        else:
            for pattern in entry.regexes:
                if pattern.search(text):
                    hits[index] = f"/{pattern.pattern}/"
                    break
    return hits


# --- reading ----------------------------------------------------------------------------------


def load_lore_file(path: str | Path) -> Lorebook:
    file = Path(path)
    # Through the one guarded reader, as the character file that names it: a FIFO or a device is
    # refused, the size and what the document expands to are bounded, JSON is read as JSON.
    document = read_document(file, LORE_FILE)
    if isinstance(document, list):
        document = {"entries": document}
    if not isinstance(document, Mapping):
        raise LoreError(f"{file}: expected a mapping with entries (or a list of entries).")
    if is_world_info(document):
        document = lore_from_world_info(file, document)
    unknown = [str(k) for k in document if k not in _BOOK_KEYS]
    if unknown:
        raise LoreError(f"{file}: unknown key {unknown[0]!r}; the keys are {', '.join(_BOOK_KEYS)}.")
    raw_entries = document.get("entries") or []
    if not isinstance(raw_entries, list):
        raise LoreError(f"{file}: entries must be a list.")
    entries = []
    for index, raw in enumerate(raw_entries):
        where = f"{file}: entries[{index}]"
        if not isinstance(raw, Mapping):
            raise LoreError(f"{where} must be a mapping (keys, content, ...).")
        extra = [str(k) for k in raw if k not in _ENTRY_KEYS]
        if extra:
            raise LoreError(f"{where}: unknown key {extra[0]!r}; the keys are {', '.join(_ENTRY_KEYS)}.")
        if raw.get("enabled") is False:
            continue
        entries.append(_entry(where, raw, index))
    return Lorebook(
        entries,
        budget_chars=_optional_int(file, document, "budget_chars"),
        scan_depth=_optional_int(file, document, "scan_depth"),
    )


def lorebook_from_card(file: Path, book: Any) -> Lorebook | None:
    """A V2/V3 card's `character_book` (SillyTavern's fields), or None when it has no entry."""
    if not isinstance(book, Mapping):
        raise LoreError(f"{file}: data.character_book must be a mapping.")
    raw_entries = book.get("entries") or []
    if isinstance(raw_entries, Mapping):  # some exporters key the entries by uid
        raw_entries = list(raw_entries.values())
    if not isinstance(raw_entries, list):
        raise LoreError(f"{file}: data.character_book.entries must be a list.")
    entries = []
    for index, raw in enumerate(raw_entries):
        where = f"{file}: data.character_book.entries[{index}]"
        if not isinstance(raw, Mapping):
            raise LoreError(f"{where} must be a mapping.")
        if raw.get("enabled") is False or raw.get("disable") is True:
            continue
        extensions = raw["extensions"] if isinstance(raw.get("extensions"), Mapping) else {}
        fields = {
            "name": raw.get("name") or raw.get("comment") or f"entry {raw.get('id', index)}",
            "keys": list(raw.get("keys") or raw.get("key") or []),
            "content": raw.get("content") or "",
            "case_sensitive": bool(raw.get("case_sensitive") or extensions.get("case_sensitive") or False),
            "whole_words": bool(extensions.get("match_whole_words", True) if extensions.get("match_whole_words") is not None else True),
            "constant": bool(raw.get("constant") or False),
            "order": raw.get("insertion_order", raw.get("order", 100)),
            "priority": raw.get("priority", 0) or 0,
        }
        entries.append(_entry(where, fields, index))
    if not entries:
        return None
    budget = book.get("token_budget")
    depth = book.get("scan_depth")
    return Lorebook(
        entries,
        budget_chars=int(budget) * CHARS_PER_TOKEN if isinstance(budget, int) and budget > 0 else None,
        scan_depth=int(depth) if isinstance(depth, int) and depth >= 0 else None,
    )


def _entry(where: str, raw: Mapping[str, Any], index: int) -> LoreEntry:
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise LoreError(f"{where}: content must be a non-empty text.")
    keys_raw = raw.get("keys") or []
    if isinstance(keys_raw, str):
        keys_raw = [keys_raw]
    if not isinstance(keys_raw, list) or not all(isinstance(k, str) for k in keys_raw):
        raise LoreError(f"{where}: keys must be a list of texts.")
    constant = bool(raw.get("constant", False))
    case_sensitive = bool(raw.get("case_sensitive", False))
    keys: list[str] = []
    regexes: list[regex.Pattern[str]] = []
    for key in (k.strip() for k in keys_raw):
        if not key:
            continue
        written = _REGEX_KEY.match(key)
        if written is None:
            keys.append(key)
            continue
        flags = 0 if case_sensitive else regex.IGNORECASE
        for letter in written["flags"]:
            flags |= _FLAGS[letter]
        try:
            regexes.append(regex.compile(written["pattern"], flags))
        except regex.error as exc:
            raise LoreError(f"{where}: invalid regular expression {key!r}: {exc}.") from None
    if not keys and not regexes and not constant:
        raise LoreError(f"{where}: an entry needs keys, or constant: true.")
    for name in ("order", "priority"):
        if not isinstance(raw.get(name, 0), int) or isinstance(raw.get(name), bool):
            raise LoreError(f"{where}: {name} must be a whole number.")
    return LoreEntry(
        name=" ".join(str(raw.get("name") or f"entry {index}").split()),
        content=" ".join(content.split()),
        keys=tuple(keys),
        regexes=tuple(regexes),
        case_sensitive=case_sensitive,
        whole_words=bool(raw.get("whole_words", True)),
        constant=constant,
        order=int(raw.get("order", 100)),
        priority=int(raw.get("priority", 0)),
    )


def _optional_int(file: Path, document: Mapping[str, Any], key: str) -> int | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LoreError(f"{file}: {key} must be a whole number ≥ 0.")
    return value
