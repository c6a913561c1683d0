"""What one reflection changed in a story, and what it was refused."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.memory.story.plans import AnchorPlan
from bot.memory.story.positions import PositionPlan
from bot.memory.story.state import StatePlan


@dataclass(slots=True)
class StoryReport:
    """What one reflection changed in a story, and what it was refused."""

    summary_replaced: bool
    anchors: AnchorPlan
    added_anchor_ids: list[int]
    positions: PositionPlan
    inserted_position_ids: list[int]
    state: StatePlan
    notes: list[str] = field(default_factory=list)
