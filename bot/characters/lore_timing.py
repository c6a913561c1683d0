"""Timed lore entries (SillyTavern's sticky, cooldown and delay), counted in the story's turns.

SillyTavern counts these in chat messages; in Écho a turn is one message answered, so a count
of N is N turns of the story (one person's story with one character: `Incoming.story_id` under
the owner key). With sticky 3, cooldown 2 and delay 2, as in SillyTavern's documentation:

    turn 0: delayed (the story has fewer than 2 turns)
    turn 1: the entry fires on its key
    turns 2, 3, 4: sticky (in, key or not, without a probability roll)
    turns 5, 6: cooldown (out, key or not)
    turn 7: it may fire again

A firing while an effect runs does not restart it. A clock is a small value that the turn
record keeps (`to_record`), so effects survive a restart; an entry's effects are keyed by a hash
of its text and keys, so editing the entry ends them, as SillyTavern does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Timer:
    fired: int  # the turn it fired on
    sticky_until: int  # last sticky turn (== fired without sticky)
    cooldown_until: int  # last cooldown turn (== sticky_until without cooldown)


@dataclass(slots=True)
class LoreClock:
    """One story's turn count and the timed effects running in it."""

    turn: int = 0  # turns of the story before this one
    timers: dict[str, Timer] = field(default_factory=dict)

    def delayed(self, delay: int) -> bool:
        """Delay N: the entry waits until the story has N turns, this one included."""
        return self.turn + 1 < delay

    def sticky(self, uid: str) -> bool:
        timer = self.timers.get(uid)
        return timer is not None and timer.fired < self.turn <= timer.sticky_until

    def cooling(self, uid: str) -> bool:
        timer = self.timers.get(uid)
        return timer is not None and timer.sticky_until < self.turn <= timer.cooldown_until

    def fired(self, uid: str, *, sticky: int, cooldown: int) -> None:
        """The entry entered the prompt this turn; starts its effects unless one runs."""
        if (sticky or cooldown) and not (self.sticky(uid) or self.cooling(uid)):
            self.timers[uid] = Timer(self.turn, self.turn + sticky, self.turn + sticky + cooldown)

    def next(self, uids: Iterable[str]) -> LoreClock:
        """The clock of the story's next turn, keeping the effects of entries still in the book
        that have not ended."""
        keep = set(uids)
        return LoreClock(
            self.turn + 1,
            {uid: t for uid, t in self.timers.items() if uid in keep and t.cooldown_until > self.turn},
        )

    def to_record(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "timers": {uid: [t.fired, t.sticky_until, t.cooldown_until] for uid, t in self.timers.items()},
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> LoreClock:
        """The clock a turn record kept; a fresh one for a record without (or a damaged one)."""
        if not isinstance(record, Mapping) or not isinstance(record.get("turn"), int):
            return cls()
        timers: dict[str, Timer] = {}
        raw = record.get("timers")
        for uid, values in raw.items() if isinstance(raw, Mapping) else ():
            if isinstance(values, list) and len(values) == 3 and all(isinstance(v, int) for v in values):
                timers[str(uid)] = Timer(*values)
        return cls(record["turn"], timers)
