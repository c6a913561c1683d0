"""Lorebooks: entries of world knowledge that enter the context when they are talked about, as
SillyTavern's World Info does.

A book comes from a card's `character_book`, a SillyTavern World Info file or a lore file of
Écho's own format (bot/characters/lore_files.py and world_info.py read them). Each turn,
`Lorebook.match` decides which entries enter the reply's context (the entries and the words of
the decision are in bot/characters/lore.py, the choice among those that fired in
bot/characters/lore_choice.py):

1. Scan: the entry's keys (bot/characters/lore_keys.py) in the last `scan_depth` messages (the
   entry's own depth, else the book's, else LORE_SCAN_DEPTH), the message answered included.
   An entry with secondary keys fires by its logic: AND ANY (a primary key and any secondary),
   AND ALL, NOT ANY, NOT ALL. `constant` entries, and sticky ones (bot/characters/lore_timing.py),
   fire without keys; delayed ones and those cooling down do not fire.
2. Inclusion groups: of the entries of one group that fired together, one is kept: a sticky one,
   else the highest `order` among those with `group_override`, else a draw weighted by
   `group_weight`; with group scoring, only the entries matching the most keys take part.
3. Probability: an entry with probability under 100 is kept on a draw.
4. Recursion (`recursive`, on by default as in SillyTavern): the contents of the entries kept are
   scanned for more keys, at most MAX_RECURSION_STEPS times; `exclude_recursion` entries are not
   fired that way, `prevent_recursion` ones do not fire others, `delay_until_recursion` ones fire
   only that way.
5. Budget: constant (and `ignore_budget`) entries are always in; the others fill what remains
   of the budget, the most relevant to the message first: higher `priority`, then fired by the
   message answered before an earlier one, then more keys matched, then higher `order`.

Draws are made from a seed the turn gives (the story and its turn): the same message draws the
same. Entries are operator-written: never about a user, never a memory.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.characters.lore import (
    DEFAULT_SCAN_DEPTH,
    MAX_RECURSION_STEPS,
    Fired,
    How,
    Left,
    LeftOut,
    LoreEntry,
    LoreHit,
    LoreTurn,
)
from bot.characters.lore_choice import inclusion_groups, passes_probability, score, within_budget
from bot.characters.lore_keys import REGEX_TURN_SECONDS, Found, KeyIndex, Keys
from bot.characters.lore_timing import LoreClock

__all__ = ["DEFAULT_SCAN_DEPTH", "LoreEntry", "LoreHit", "Lorebook"]


@dataclass(slots=True)
class Lorebook:
    entries: list[LoreEntry]
    budget_chars: int | None = None
    # Messages scanned, the one answered included; None: LORE_SCAN_DEPTH's.
    scan_depth: int | None = None
    recursive: bool = True
    # Fields of the file Écho does not act on (logged once when read; `make doctor` lists them).
    ignored: tuple[str, ...] = ()
    _index: KeyIndex = field(init=False, repr=False)
    _source_hits: dict[int, dict[int, Found]] = field(default_factory=dict, init=False, repr=False)
    # Entries considered on every step whether their keys were found or not.
    _always: list[int] = field(default_factory=list, init=False, repr=False)
    # Read from the entries once: whether one counts turns, the deepest own depth, the levels
    # of "delay until recursion".
    _timed: bool = field(default=False, init=False, repr=False)
    _deepest: int = field(default=0, init=False, repr=False)
    _levels: tuple[int, ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        self._index = KeyIndex(
            [
                Keys(e.name, e.keys, e.regexes, e.secondary, e.secondary_regexes, e.case_sensitive, e.whole_words)
                for e in self.entries
            ]
        )
        self._always = [i for i, e in enumerate(self.entries) if e.constant or e.always or e.sources]
        self._timed = any(e.sticky or e.cooldown or e.delay for e in self.entries)
        self._deepest = max((e.scan_depth for e in self.entries if e.scan_depth is not None), default=0)
        self._levels = tuple(sorted({e.delay_until_recursion for e in self.entries if e.delay_until_recursion}))

    @property
    def timed(self) -> bool:
        """Whether an entry counts turns: the story's clock is then kept."""
        return self._timed

    @property
    def constant_chars(self) -> int:
        """Characters of the entries always in (constant): they take their part of the budget."""
        return sum(e.cost for e in self.entries if e.constant and not e.ignore_budget)

    def budget(self, setting: int) -> int:
        """The budget in characters: the book's own, else the setting's (LORE_BUDGET_CHARS)."""
        return self.budget_chars if self.budget_chars is not None else setting

    def fired(self, text: str) -> dict[int, str]:
        """Entry index → the first primary key found in `text` (constants: "(constant)"): the
        keys alone, without the rules of `match`."""
        hits: dict[int, str] = {i: "(constant)" for i, e in enumerate(self.entries) if e.constant}
        for index, found in self._index.scan(text).items():
            if found.primary and index not in hits:
                hits[index] = next(iter(found.primary))
        return hits

    def disabled(self) -> list[tuple[int, str]]:
        """(entry index, key as written) of every regex key disabled for running out of time."""
        return self._index.disabled()

    def match(
        self,
        recent: Sequence[str],
        *,
        budget_chars: int,
        scan_depth: int,
        clock: LoreClock | None = None,
        seed: str = "",
    ) -> LoreTurn:
        """The entries `recent` (oldest first, the message answered last) brings in.
        `budget_chars` and `scan_depth` (messages besides the one answered) apply when the book
        sets none; `seed` makes the draws of this turn."""
        clock = clock or LoreClock()
        budget = self.budget(budget_chars)
        depth = self.scan_depth if self.scan_depth is not None else scan_depth + 1
        messages = list(reversed(recent))
        deadline = time.perf_counter() + REGEX_TURN_SECONDS
        widest = max(self._deepest, depth) if self.entries else 0
        in_messages = self._index.scan(messages[: max(0, widest)], deadline) if widest > 0 else {}
        fired: dict[int, Fired] = {}
        left: Left = {}
        recursed: dict[int, Found] = {}
        levels = list(self._levels)
        level = levels.pop(0) if levels else 0
        for step in range(MAX_RECURSION_STEPS + 1):
            new = self._step(step, in_messages, depth, recursed, fired, left, clock, level)
            new = inclusion_groups(self.entries, new, fired, left, seed)
            new = [f for f in new if passes_probability(self.entries, f, seed, left)]
            for f in new:
                fired[f.index] = f
            if sum(self.entries[i].cost for i in fired) >= budget:
                break
            feeding = [self.entries[f.index].content for f in new if not self.entries[f.index].prevent_recursion]
            if feeding and self.recursive:
                for index, found in self._index.scan("\n".join(feeding), deadline).items():
                    recursed.setdefault(index, Found()).merge(found)
            elif levels:
                level = levels.pop(0)
            else:
                break
        kept = within_budget(self.entries, fired, budget, clock)
        following = clock.next(e.uid for e in self.entries) if clock.timers or self.timed else LoreClock(clock.turn + 1)
        return LoreTurn(self._hits(fired, kept, left), following, budget, self.budget_chars is not None)

    # --- the steps ----------------------------------------------------------------------------

    def _step(
        self,
        step: int,
        in_messages: dict[int, Found],
        depth: int,
        recursed: dict[int, Found],
        fired: dict[int, Fired],
        left: Left,
        clock: LoreClock,
        level: int,
    ) -> list[Fired]:
        """The entries that fire in this step of the scan."""
        new: list[Fired] = []
        # Only the entries something may fire: their keys were found, they need none, or they
        # are sticky.
        candidates = set(self._always).union(recursed, in_messages)
        if clock.timers:
            candidates.update(i for i, e in enumerate(self.entries) if clock.sticky(e.uid))
        for index in sorted(candidates):
            entry = self.entries[index]
            # An entry its secondary keys refused may pass once recursion brings them.
            if index in fired or (index in left and left[index][0] != "filter") or entry.never:
                continue
            left.pop(index, None)
            sticky = clock.sticky(entry.uid)
            found = self._how(index, entry, step, in_messages, depth, recursed, sticky, level)
            if found is None:
                continue
            if isinstance(found, str):
                left[index] = ("filter", found, "key")
            elif entry.delay and clock.delayed(entry.delay) and not sticky:
                left[index] = ("delay", found.key, found.how)
            elif clock.cooling(entry.uid) and not sticky:
                left[index] = ("cooldown", found.key, found.how)
            else:
                new.append(found)
        return new

    def _how(
        self,
        index: int,
        entry: LoreEntry,
        step: int,
        in_messages: dict[int, Found],
        depth: int,
        recursed: dict[int, Found],
        sticky: bool,
        level: int,
    ) -> Fired | str | None:
        """How the entry fires in this step: a `Fired`, the key its secondary keys refused
        (a str), or None."""
        if entry.always:
            return Fired(index, "decorator", "@@activate", level=step)
        if entry.constant:
            return Fired(index, "constant", "(constant)", level=step)
        if sticky:
            return Fired(index, "sticky", "(sticky)", level=step)
        if not entry.has_keys:
            return None
        if entry.delay_until_recursion and (step == 0 or entry.delay_until_recursion > level):
            return None
        if step > 0 and entry.exclude_recursion:
            return None
        window = entry.scan_depth if entry.scan_depth is not None else depth
        found = in_messages[index].within(window) if index in in_messages else Found()
        distance = min(found.primary.values(), default=None)
        if step > 0 and index in recursed:
            found.merge(recursed[index])
        for source in self._sources_found(index, entry):
            found.merge(source)
        if not found.primary:
            return None
        key = next(iter(found.primary))
        if not self._secondary_pass(entry, found):
            return key
        how: How = "recursion" if distance is None and step > 0 else "key"
        return Fired(index, how, key, distance if distance is not None else window, step, score(entry, found))

    def _sources_found(self, index: int, entry: LoreEntry) -> list[Found]:
        if not entry.sources:
            return []
        if index not in self._source_hits:
            self._source_hits[index] = {}
            for number, text in enumerate(entry.sources):
                found = self._index.scan(text).get(index)
                if found is not None:
                    self._source_hits[index][number] = found
        return list(self._source_hits[index].values())

    @staticmethod
    def _secondary_pass(entry: LoreEntry, found: Found) -> bool:
        wanted = len(entry.secondary) + len(entry.secondary_regexes)
        if not wanted:
            return True
        matched = len(found.secondary)
        return {
            "and_any": matched > 0,
            "and_all": matched >= wanted,
            "not_any": matched == 0,
            "not_all": matched < wanted,
        }[entry.logic]

    def _hits(self, fired: dict[int, Fired], kept: set[int], left: Left) -> list[LoreHit]:
        def hit(index: int, key: str, how: How, left_out: LeftOut | None) -> LoreHit:
            e = self.entries[index]
            return LoreHit(
                e.name, key, e.cost, e.content, left_out is None, left_out, how, e.position, e.depth, e.order
            )

        ordered = sorted(fired, key=lambda i: (i not in kept, self.entries[i].order, i))
        hits = [hit(i, fired[i].key, fired[i].how, None if i in kept else "budget") for i in ordered]
        hits += [hit(i, key, how, reason) for i, (reason, key, how) in sorted(left.items())]
        hits += [hit(i, key, "key", "disabled") for i, key in self.disabled()]
        return hits
