"""What a turn chose and why: the slot budget, each selected memory with its reason, and the
turn's selection as `/why`, the owner's page and the statistics read it.

The budget's figures and the measures behind them: docs/design.md, "Read path". The rank lists:
a candidate's list number is its type's index + GLOBAL_OFFSET if global + UNPINNED_OFFSET if not
pinned, so numbering order is rank order (pinned, story before global, type).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np

from bot.memory.model import USER_MEMORY_TYPES, Memory, OwnerKey, StoryId, UserMemoryType

# Score a memory needs for the semantic pass when the caller gives none (the prototype's cosine);
# a turn passes its own, on the fused scale (bot/memory/read/recall.py, `threshold_for`).
FALLBACK_THRESHOLD = 0.32
GLOBAL_CONTEXT_SHARE = 0.25
TYPE_QUOTAS: Mapping[UserMemoryType, int] = {"fact": 6, "preference": 5, "promise": 4, "episode": 5}
# The context holds this many memories (rules apart).
DEFAULT_LIMIT = 24

# A turn as the metrics and the turn log count it: no reply, answered without semantic scores,
# or answered.
TurnOutcome = Literal["failed", "degraded", "answered"]

# Why a memory holds its slot: by meaning (the message, or the conversation around it), because
# it is pinned or global, or to fill the type quotas and the rest of the slots; "followup": a
# dated memory whose date passed, which the turn invites the character to ask about
# (bot/engine/followups.py), outside the selection's passes.
Reason = Literal["pinned", "global", "semantic", "conversation", "type_quota", "backfill", "followup"]
REASONS: tuple[Reason, ...] = ("pinned", "global", "semantic", "conversation", "type_quota", "backfill", "followup")

# Keyed by any type: a rule finds no index (rules hold no slot).
TYPE_INDEX: dict[str, int] = {memory_type: index for index, memory_type in enumerate(USER_MEMORY_TYPES)}
TYPES = len(USER_MEMORY_TYPES)
# List number = type index + 4 if global + 8 if not pinned: numbering order is rank order.
GLOBAL_OFFSET = TYPES
UNPINNED_OFFSET = 2 * TYPES
LISTS = 4 * TYPES
ALL_LISTS = range(LISTS)
PINNED_LISTS = range(UNPINNED_OFFSET)
UNPINNED_STORY_LISTS = range(UNPINNED_OFFSET, UNPINNED_OFFSET + GLOBAL_OFFSET)
UNPINNED_GLOBAL_LISTS = range(UNPINNED_OFFSET + GLOBAL_OFFSET, LISTS)
GLOBAL_LISTS = (*range(GLOBAL_OFFSET, UNPINNED_OFFSET), *UNPINNED_GLOBAL_LISTS)


@dataclass(frozen=True, slots=True)
class Selected:
    memory: Memory
    reason: Reason
    score: float | None
    # Its series was cut to the series' slots: how many members the selection would have served.
    series: int = 0


@dataclass(slots=True)
class Slot:
    """One selected memory as recorded for /why."""

    id: int
    reason: Reason
    score: float | None
    type: str
    pinned: bool
    text: str
    lexical: bool = False
    # Its series was cut to SERIES_MAX_SLOTS: how many members the selection would have served.
    series: int = 0
    # Chosen, but left out of the prompt to fit the model's context (bot/engine/fitting.py).
    left_out: bool = False
    # Withdrawn since: the message it came from was deleted or edited (its text is no longer kept here).
    withdrawn: bool = False


@dataclass(slots=True)
class TurnFigures:
    """How the turn went, filled in by the engine once the LLM answered (or failed)."""

    failed: bool = False  # the LLM gave no reply
    memory_ms: int | None = None
    reply_ms: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    context_tokens: int | None = None
    # The prompt reached the context size: the server dropped its start.
    context_full: bool = False
    # Of the prompt's tokens, those the server took from its cache (where it says).
    cached_tokens: int | None = None
    # Left out of the prompt to fit the context: the oldest lines, the weakest memory slots.
    history_left_out: int = 0
    memories_left_out: int = 0
    # Even the smallest prompt did not fit the context: no reply, the person was told why.
    context_too_small: bool = False


@dataclass(slots=True)
class TurnSelection:
    turn_id: int
    user_id: OwnerKey
    story_id: StoryId
    query: str
    degraded: bool
    slots: list[Slot]
    rules: list[str]
    created_at: datetime
    story: dict[str, Any] = field(default_factory=dict)
    memories: list[Memory] = field(default_factory=list)
    candidates: int = 0
    # Lore entries that fired this turn: name, keyword, cost, kept or why left out, how it came
    # (outside the memory slots); and the story's lore clock after it (timed entries).
    lore: list[dict[str, Any]] = field(default_factory=list)
    lore_clock: dict[str, Any] | None = None
    # The person's display name and the story's name at this turn, for the owner's page.
    user_name: str = ""
    story_name: str = ""
    # What `Recall.record` and the prompt's notes need besides the slots; not part of the /why
    # record. `share`: the person's setting the candidates were read with.
    place: str = ""
    share: bool = False
    # An int64 array: a list of 100,000 ids cost the turn 3 ms to make and its record 5 ms to read.
    candidate_ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    threshold: float = FALLBACK_THRESHOLD
    figures: TurnFigures = field(default_factory=TurnFigures)

    @property
    def outcome(self) -> TurnOutcome:
        """failed (no reply), degraded (answered without semantic scores) or answered."""
        if self.figures.failed:
            return "failed"
        return "degraded" if self.degraded else "answered"

    def to_detail(self) -> str:
        return json.dumps(
            {
                "slots": [
                    {
                        "id": s.id,
                        "reason": s.reason,
                        "score": s.score,
                        "type": s.type,
                        "pinned": s.pinned,
                        "text": s.text,
                        "lexical": s.lexical,
                        "series": s.series,
                        "left_out": s.left_out,
                        "withdrawn": s.withdrawn,
                    }
                    for s in self.slots
                ],
                "rules": self.rules,
                "story": self.story,
                "candidates": self.candidates,
                "figures": asdict(self.figures),
                "lore": self.lore,
                "lore_clock": self.lore_clock,
                "user_name": self.user_name,
                "story_name": self.story_name,
            },
            ensure_ascii=False,
        )


def slot_of(chosen: Selected, lexical_ids: set[int], by_conversation: set[int], threshold: float) -> Slot:
    """A chosen memory as /why shows it: one the semantic or global pass took for its score,
    when the conversation lifted that score above the message's, is "recalled by the
    conversation"."""
    memory = chosen.memory
    lexical = memory.id in lexical_ids
    reason: Reason = chosen.reason
    recalled = chosen.score is not None and chosen.score >= threshold and not lexical
    if reason in ("semantic", "global") and recalled and memory.id in by_conversation:
        reason = "conversation"
    return Slot(
        id=memory.id,
        reason=reason,
        score=None if lexical else chosen.score,
        type=memory.type,
        pinned=memory.pinned,
        text=memory.text,
        lexical=lexical,
        series=chosen.series,
    )
