"""A story's positions: the character's stances on subjects of the story, each held only while a
line of the conversation still backs it (a justification quoting the character's own words is
refused), the most quoted kept within the story's bound."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.memory.story.plans import MAX_POSITIONS, POSITION_BUDGET, Position, longest_common_substring_len, reanchors
from bot.memory.text import content_words, normalise


@dataclass(frozen=True, slots=True)
class ProposedPosition:
    subject: str
    stance: str
    justification: str


@dataclass(frozen=True, slots=True)
class PositionUpdate:
    """A stored position rewritten by a legitimate justification (date refreshed)."""

    before: Position
    after: Position


@dataclass(frozen=True, slots=True)
class NotReanchored:
    """A proposal on a stored subject whose justification quotes a stance: the stored row is
    left as it was."""

    position: Position
    proposed: ProposedPosition
    shared_chars: int


@dataclass(frozen=True, slots=True)
class RefusedPosition:
    """A proposal on a new subject whose justification quotes a stance: nothing is inserted."""

    proposed: ProposedPosition
    shared_chars: int


@dataclass(slots=True)
class PositionPlan:
    insert: list[ProposedPosition] = field(default_factory=list)
    update: list[PositionUpdate] = field(default_factory=list)
    not_reanchored: list[NotReanchored] = field(default_factory=list)
    refused: list[RefusedPosition] = field(default_factory=list)
    evict: list[Position] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def subject_key(subject: str) -> str:
    """Identity of a subject: its content words in order of the alphabet ("le café" = "café"),
    or the normalised text when it has none."""
    key = " ".join(sorted(content_words(subject)))
    return key or normalise(subject)


def _proposal(item: Any) -> ProposedPosition | None:
    if isinstance(item, ProposedPosition):
        return item

    def get(key: str) -> Any:
        return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)

    values = [get(k) for k in ("subject", "stance", "justification")]
    if not all(isinstance(v, str) and normalise(v) for v in values):
        return None
    subject, stance, justification = (" ".join(str(v).split()) for v in values)
    return ProposedPosition(subject, stance, justification)


def _most_quoted(stances: Sequence[tuple[str, str]], justification: str) -> tuple[str, int]:
    """(label, shared characters) of the stance the justification reuses most, for the note."""
    shared = [(longest_common_substring_len(s, justification), label) for label, s in stances]
    size, label = max(shared)
    return label, size


def plan_positions(current: Sequence[Position], proposed: Iterable[Any] | None, now: datetime) -> PositionPlan:
    """Decide what the reflection's positions change.

    A proposal anchors something only when `reanchors` accepts its justification against every
    stance of the story: the stored ones, those accepted earlier in this plan and its own. Same
    subject as a stored position: the stance and justification are rewritten and the date
    refreshed; if the justification self-cites, the stored row is left untouched (its date
    keeps ageing, so it can still be evicted). New subject: inserted; if it self-cites, refused,
    since a reworded subject would otherwise bring the quoted stance back with a fresh date.
    Past `MAX_POSITIONS` the least recently anchored positions are evicted (to history, by the
    store).
    """
    plan = PositionPlan()
    by_key = {subject_key(p.subject): p for p in current}
    held = [(f"the stance of position #{p.id}", p.stance) for p in current]
    seen: set[str] = set()
    for item in proposed or ():
        prop = _proposal(item)
        if prop is None:
            plan.notes.append("position without subject, stance or justification ignored")
            continue
        key = subject_key(prop.subject)
        if key in seen:
            plan.notes.append(f"position on {prop.subject!r} proposed twice: only the first considered")
            continue
        seen.add(key)
        stored = by_key.get(key)
        compared = [("its own stance", prop.stance), *held]
        if not reanchors([s for _, s in compared], prop.justification):
            label, shared = _most_quoted(compared, prop.justification)
            why = f"its justification reuses {shared} characters of {label}"
            if stored is None:
                plan.refused.append(RefusedPosition(prop, shared))
                plan.notes.append(f"new position on {prop.subject!r} refused: {why}")
            else:
                plan.not_reanchored.append(NotReanchored(stored, prop, shared))
                plan.notes.append(f"position #{stored.id} ({stored.subject!r}) not re-anchored: {why}")
            continue
        held.append((f"the stance proposed on {prop.subject!r}", prop.stance))
        if stored is None:
            plan.insert.append(prop)
            continue
        after = Position(stored.id, stored.subject, prop.stance, prop.justification, stored.created_at, now)
        plan.update.append(PositionUpdate(stored, after))

    # Re-anchored and new positions are dated `now` and stay. A position that was proposed but
    # not re-anchored competes with the rest on its old date: that is how it gets to age out.
    updated = {u.before.id for u in plan.update}
    ageing = [p for p in current if p.id not in updated]
    ageing.sort(key=lambda p: (p.updated_at, p.id), reverse=True)
    room = max(MAX_POSITIONS - len(updated), 0)
    for prop in plan.insert[room:]:
        plan.notes.append(f"position on {prop.subject!r} dropped: over {MAX_POSITIONS} at once")
    plan.insert = plan.insert[:room]
    plan.evict = ageing[room - len(plan.insert) :]
    return plan


def select_positions(positions: Sequence[Position], query: str, limit: int = POSITION_BUDGET) -> list[Position]:
    """The positions served in the turn's context: most relevant to the message, then most
    recently anchored.

    Relevance is the number of content words the message shares with the subject and stance.
    Not cosine: a story holds at most `MAX_POSITIONS`, the turn embeds only its own query (and
    has no vector for positions), and a lexical overlap is deterministic and free. When nothing
    overlaps, recency decides, which is why a position must not be able to refresh its own date.
    """
    query_words = content_words(query)

    def rank(p: Position) -> tuple[int, datetime, int]:
        overlap = len(query_words & content_words(f"{p.subject} {p.stance}"))
        return overlap, p.updated_at, p.id

    return sorted(positions, key=rank, reverse=True)[: max(limit, 0)]
