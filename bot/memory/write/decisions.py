"""What a reflection's apply decides, and whom for: each decision on one proposed memory, the
report of them all, the context of the user and place it writes in, and what each decision
means for the user's memory (its receipt line; whether the exchanges become its sources)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from bot.memory.model import (
    Cause,
    ChangeAction,
    OwnerKey,
    StoryId,
)
from bot.memory.story.report import StoryReport
from bot.memory.story.state import StateSpec

Action = Literal[
    "added",
    "merged",
    "absorbed",
    "dropped",
    "replaced",
    "replace_as_add",
    "replace_refused",
    "deleted",
    "delete_refused",
]


@dataclass(slots=True)
class Decision:
    action: Action
    text: str
    memory_id: int | None = None
    detail: str = ""
    # The memory's text before a replace or a merge.
    before: str | None = None


@dataclass(slots=True)
class ReflectionReport:
    decisions: list[Decision] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    story: StoryReport | None = None

    def of(self, action: Action) -> list[Decision]:
        return [d for d in self.decisions if d.action == action]

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for d in self.decisions:
            counts[d.action] = counts.get(d.action, 0) + 1
        return ", ".join(f"{n} {a}" for a, n in sorted(counts.items())) or "nothing"


@dataclass(slots=True)
class ReflectionContext:
    """Who and where: what the write path needs beyond the reflection itself."""

    user_id: OwnerKey
    allowed_ids: frozenset[int]
    character_name: str
    user_message: str = ""
    user_name: str | None = None
    story_id: StoryId | None = None
    place: str | None = None
    source: str | None = None
    state_specs: Mapping[str, StateSpec] = field(default_factory=dict)
    # MAX_MEMORIES_PER_USER: past it, new items are dropped (merges and corrections still apply).
    max_memories: int | None = None
    # The exchanges reflected: every memory the reflection adds or confirms records them as its
    # sources, and its changes are filed under the last one (the reply that shows the receipt).
    exchange_ids: tuple[int, ...] = ()
    # Memories that came only from a message the user has since edited: the edit is the user's
    # own correction of them, so a replacement needs no further backing from the message.
    correctable: frozenset[int] = frozenset()
    # The other people who spoke in the channel lately: a memory about one of them is not the user's.
    other_names: tuple[str, ...] = ()

    @property
    def cause(self) -> Cause:
        return Cause.reflection(self.source)


# What a decision means for the user's memory: its receipt line, and whether the exchanges
# become sources of the memory.
CHANGE_ACTIONS: Mapping[Action, ChangeAction] = {
    "added": "added",
    "replace_as_add": "added",
    "merged": "replaced",
    "replaced": "replaced",
    "deleted": "forgotten",
}


SOURCED = frozenset({"added", "replace_as_add", "merged", "absorbed", "replaced"})
