"""Lore's vocabulary: an entry of a lorebook, what a turn decided about it, and the words for
how it came in or why it was left out. bot/characters/lorebook.py decides, each turn, which
entries enter the reply's context (SillyTavern's World Info semantics, described there).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Literal

import regex

from bot.characters.lore_timing import LoreClock

DEFAULT_SCAN_DEPTH = 4
# Recursion stops there however the entries name each other: each step is a scan of the new
# contents, and a book of entries that all name one another would otherwise run its length.
MAX_RECURSION_STEPS = 5
# A card's token budget in characters: about four characters per token.
CHARS_PER_TOKEN = 4
# SillyTavern's "@ D" position inserts an entry this many messages from the end by default.
DEFAULT_DEPTH = 4

Logic = Literal["and_any", "not_all", "not_any", "and_all"]
LOGICS: tuple[Logic, ...] = ("and_any", "not_all", "not_any", "and_all")
# Where an entry goes: in a block before the character's description, in the lore block after
# the character and its memories, or among the recent messages, `depth` from the end.
Position = Literal["before", "after", "depth"]
# How an entry came in, and why one that fired was left out.
How = Literal["key", "constant", "sticky", "recursion", "decorator"]
LeftOut = Literal["budget", "probability", "group", "cooldown", "delay", "filter", "disabled"]


@dataclass(frozen=True, slots=True)
class LoreEntry:
    name: str
    content: str
    keys: tuple[str, ...] = ()
    regexes: tuple[regex.Pattern[str] | re.Pattern[str], ...] = ()
    secondary: tuple[str, ...] = ()
    secondary_regexes: tuple[regex.Pattern[str] | re.Pattern[str], ...] = ()
    logic: Logic = "and_any"
    case_sensitive: bool = False
    whole_words: bool = True
    constant: bool = False
    order: int = 100
    priority: int = 0
    position: Position = "after"
    depth: int = DEFAULT_DEPTH
    probability: int = 100
    # Messages scanned, the one answered included; None: the book's.
    scan_depth: int | None = None
    groups: tuple[str, ...] = ()
    group_override: bool = False
    group_weight: int = 100
    group_scoring: bool = False
    sticky: int = 0
    cooldown: int = 0
    delay: int = 0
    exclude_recursion: bool = False
    prevent_recursion: bool = False
    # 0: fires in any step; N: only in recursion, from the Nth level of delayed entries on.
    delay_until_recursion: int = 0
    ignore_budget: bool = False
    # @@activate / @@dont_activate (SillyTavern's two content decorators).
    always: bool = False
    never: bool = False
    # Texts of the character scanned besides the messages (SillyTavern's "additional matching
    # sources": description, personality, scenario, the depth prompt, creator notes).
    sources: tuple[str, ...] = ()
    # The entry's identity for its timed effects: a hash of its text and keys, so that it
    # changes when the entry does (filled in when empty).
    uid: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.uid:
            text = "\x00".join((self.name, self.content, *self.keys, *(p.pattern for p in self.regexes)))
            object.__setattr__(self, "uid", hashlib.blake2b(text.encode(), digest_size=8).hexdigest())

    @property
    def has_keys(self) -> bool:
        return bool(self.keys or self.regexes)

    @property
    def cost(self) -> int:
        return len(self.content)


@dataclass(frozen=True, slots=True)
class LoreHit:
    """An entry that fired this turn: how and on which key ("(constant)" for a constant one),
    its cost; `kept` when it enters the prompt, else `left_out` says why. A regex key that ran out
    of time once and is no longer searched is a hit with `left_out="disabled"`."""

    name: str
    keyword: str
    cost: int
    content: str
    kept: bool
    left_out: LeftOut | None = None
    how: How = "key"
    position: Position = "after"
    depth: int = DEFAULT_DEPTH
    order: int = 100

    @property
    def disabled(self) -> bool:
        return self.left_out == "disabled"

    def record(self) -> dict[str, object]:
        """What the turn's record keeps of it (/why and the owner's page read it)."""
        return {
            "name": self.name,
            "keyword": self.keyword,
            "cost": self.cost,
            "kept": self.kept,
            "left_out": self.left_out,
            "how": self.how,
        }


@dataclass(slots=True)
class LoreTurn:
    """What `Lorebook.match` decided: the hits, kept first in the block's order, and the clock
    of the story's next turn."""

    hits: list[LoreHit]
    clock: LoreClock
    # The budget the entries were kept within, and whether the book set it (else the setting).
    budget: int = 0
    book_budget: bool = False

    def records(self) -> list[dict[str, object]]:
        """What the turn's record keeps of each hit; one left out by the budget names it."""
        return [
            h.record() | ({"budget": self.budget, "book_budget": self.book_budget} if h.left_out == "budget" else {})
            for h in self.hits
        ]

    @property
    def kept(self) -> list[LoreHit]:
        return [h for h in self.hits if h.kept]


@dataclass(slots=True)
class Fired:
    """An entry that fired in a step of the scan, before groups, probability and budget."""

    index: int
    how: How
    key: str
    distance: int = 0  # the newest message holding a key: 0 is the message answered
    level: int = 0  # recursion step (0: the messages)
    score: int = 0  # keys matched, as SillyTavern's group scoring counts them


# Entry index → (why it was left out, the key it fired on, how it fired).
Left = dict[int, tuple[LeftOut, str, How]]
