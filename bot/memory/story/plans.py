"""Per-story memory around the 24 slots: summary, code-held anchors, positions, bounded state.

Pure logic: the reflection proposes (already parsed), these functions decide what changes, and
`bot.memory.stores.stories` writes the decision. Nothing here does I/O.

The loops measured on the prototype (docs/design.md, "Loops") and the guard each one gets:
- the summary rewritten in full forgot facts the model stopped repeating → anchors held by the
  code sit above the full summary; the model drops one only by naming it and giving a reason;
- a stored position dictated a reply that the next reflection quoted back as its proof → a
  justification that reuses `SELF_CITATION_CHARS` of any stance the story holds (or of the one
  proposed) anchors nothing: no refreshed date, and no new position under a reworded subject;
- mood/trust drift → deltas clamped per turn and values clamped to the declared range
  (bot/memory/story/state.py).

The positions' plans are bot/memory/story/positions.py; what one reflection changed in a story,
bot/memory/story/report.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from difflib import SequenceMatcher
from typing import Any

from bot.memory.quoting import STORY_BLOCK_END, STORY_BLOCK_START, quote_line
from bot.memory.story.state import StateSpec
from bot.memory.text import normalise, words

# A justification that reuses 30 characters or more of the position it claims to support does
# not re-anchor it. Read from 21 real justifications of the prototype's journal (docs/design.md,
# "Measured decisions"): the self-citation reused 53 characters of its position, the closest
# legitimate one 13.
SELF_CITATION_CHARS = 30

# A removal reason must be a phrase that tells the person reading /history why ("l'utilisateur
# a corrigé : il habite Lyon"), not a token: "obsolète", "erreur", "doublon", "n/a", "none",
# "irrelevant" are all refused (a single word, or under 10 characters). Refusing costs one more
# reflection with the anchor in place; a wrong removal costs the fact (docs/design.md,
# "Principles": two errors never cost the same).
MIN_REMOVAL_REASON_CHARS = 10
MIN_REMOVAL_REASON_WORDS = 2

# Bound on the stored summary. The reflection rewrites "the whole story so far" every time and the
# text enters every reply and reflection prompt. On Ollama the bot asks for a context of
# `llm_context_tokens` (8192 by default, sent as num_ctx); an OpenAI-compatible server sets its
# own. A prompt past the context loses its START, where the persona and the rules are.
# 4000 characters of French are about 1,000 to 1,200 tokens, an eighth of the default context,
# the same bound as one incoming message (`max_message_chars`). A bound on context size, not a
# measured threshold. Over it, the rewrite
# is refused and the previous summary stays: the anchors already hold the key facts.
MAX_SUMMARY_CHARS = 4000

# Anchors are never evicted (only a reasoned removal drops one), so their number is bounded at
# the door: past this many, new anchors are refused and the full summary still carries them.
MAX_ANCHORS = 20
MAX_ANCHOR_CHARS = 300

# Positions are evicted oldest-first (by date of last re-anchoring) past this many per story:
# that eviction is what a self-refreshing position escaped in the prototype.
MAX_POSITIONS = 12
# Positions served in the turn's context, beside the 24 memory slots: a few lines, chosen by
# `select_positions`. A bound on context size, not a measured threshold.
POSITION_BUDGET = 4

# Field descriptions of the reflection's `positions` items, for the JSON schema. The prototype's
# wording "la position, dans ses termes" invited copying the character's own line: 4 verbatim
# copies in 12 reflections, 0 in 12 once reworded. These describe what to write (a third-person
# view, evidence from the user or the situation) rather than what to avoid, since asking the
# model to abstain was measured not to work (docs/design.md, "Measured decisions"): the code
# guard catches the rest.
POSITION_FIELD_DESCRIPTIONS: dict[str, str] = {
    "subject": (
        "What the view is about, in a few words: a topic, a person, a choice of the user "
        '(e.g. "rangement des livres"). One item per subject; reuse the subject of a known '
        "position to update it."
    ),
    "stance": (
        "The character's view on the subject, summarised in the third person as a short "
        'description of an opinion ("The character thinks that ..."), not as a line the '
        "character could say."
    ),
    "justification": (
        "The evidence for this view taken from the USER's side of the exchange: what the user "
        "said or did, quoted or paraphrased, or a fact of the situation. The character's own "
        "replies are not evidence for the character's opinion."
    ),
}

# Positions are not bounded when written (anchors are): each field is clipped when served.
_RENDER_CLIP = 240


@dataclass(frozen=True, slots=True)
class Anchor:
    id: int
    text: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Position:
    id: int
    subject: str
    stance: str
    justification: str
    created_at: datetime
    updated_at: datetime


@dataclass(slots=True)
class StoryState:
    """What is stored for one user in one story; `state` holds stored values only."""

    summary: str | None = None
    summary_updated_at: datetime | None = None
    anchors: list[Anchor] = field(default_factory=list)
    positions: list[Position] = field(default_factory=list)
    state: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Self-citation


def longest_common_substring_len(a: str, b: str) -> int:
    """Length of the longest run of characters the two normalised texts share."""
    na, nb = normalise(a), normalise(b)
    if not na or not nb:
        return 0
    # Without a junk heuristic, the longest matching block is the longest common substring.
    matcher = SequenceMatcher(None, na, nb, autojunk=False)
    return matcher.find_longest_match(0, len(na), 0, len(nb)).size


def reanchors(stances: Position | str | Iterable[Position | str], justification: str) -> bool:
    """Whether this justification may anchor a position (insert it, or refresh its date): it must
    be evidence of its own, not a quote of any of these stances.

    `plan_positions` passes every stance the story holds and the proposed one: a quote of the
    stored stance under a reworded subject would otherwise start the self-citing loop afresh.
    """
    if isinstance(stances, (Position, str)):
        stances = (stances,)
    if not normalise(justification):
        return False
    return all(
        longest_common_substring_len(s.stance if isinstance(s, Position) else s, justification) < SELF_CITATION_CHARS
        for s in stances
    )


# ---------------------------------------------------------------------------------------------
# Anchors


@dataclass(frozen=True, slots=True)
class AnchorRemoval:
    anchor: Anchor
    reason: str


@dataclass(frozen=True, slots=True)
class RefusedRemoval:
    anchor_id: Any
    reason: str
    why: str


@dataclass(slots=True)
class AnchorPlan:
    add: list[str] = field(default_factory=list)
    remove: list[AnchorRemoval] = field(default_factory=list)
    refused: list[RefusedRemoval] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _removal_fields(item: Any) -> tuple[Any, Any]:
    """(id, reason) from a tuple, a mapping or an object with attributes (a pydantic model)."""
    if isinstance(item, Mapping):
        return item.get("id"), item.get("reason")
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return item[0], item[1]
    return getattr(item, "id", None), getattr(item, "reason", None)


def _reason_problem(reason: Any) -> str | None:
    if not isinstance(reason, str) or not normalise(reason):
        return "no reason given"
    text = normalise(reason)
    if len(text) < MIN_REMOVAL_REASON_CHARS or len(words(text)) < MIN_REMOVAL_REASON_WORDS:
        return (
            f"reason too short ({len(text)} chars, {len(words(text))} word(s)); a removal needs "
            f"a phrase of at least {MIN_REMOVAL_REASON_WORDS} words and "
            f"{MIN_REMOVAL_REASON_CHARS} characters"
        )
    return None


def plan_anchor_changes(
    current: Sequence[Anchor], add: Iterable[str] | None, remove: Iterable[Any] | None
) -> AnchorPlan:
    """Decide which proposed anchor additions and removals happen.

    `current` is this user's anchors in this story: an id outside it (hallucinated, or another
    user's or story's anchor) is an unknown id and its removal is refused. Additions are
    deduplicated on normalised text against the anchors that survive this plan, so "remove X,
    add X" keeps the fact.
    """
    plan = AnchorPlan()
    by_id = {a.id: a for a in current}
    removed: set[int] = set()
    for item in remove or ():
        anchor_id, reason = _removal_fields(item)
        reason_text = " ".join(reason.split()) if isinstance(reason, str) else ""
        known = isinstance(anchor_id, int) and not isinstance(anchor_id, bool)
        anchor = by_id.get(anchor_id) if known else None
        if anchor is not None and anchor.id in removed:
            plan.notes.append(f"anchor #{anchor.id} named twice for removal: removed once")
            continue
        why = "unknown anchor id" if anchor is None else _reason_problem(reason)
        if anchor is None or why is not None:
            plan.refused.append(RefusedRemoval(anchor_id, reason_text, why or ""))
            plan.notes.append(f"removal of anchor #{anchor_id} refused: {why}")
            continue
        removed.add(anchor.id)
        plan.remove.append(AnchorRemoval(anchor, reason_text))

    seen = {normalise(a.text) for a in current if a.id not in removed}
    room = MAX_ANCHORS - len(seen)
    for text in add or ():
        if not isinstance(text, str) or not normalise(text):
            plan.notes.append("empty anchor ignored")
            continue
        text = " ".join(text.split())
        key = normalise(text)
        if key in seen:
            plan.notes.append(f"anchor already held: {text!r}")
            continue
        if len(text) > MAX_ANCHOR_CHARS:
            plan.notes.append(f"anchor over {MAX_ANCHOR_CHARS} chars refused: {text[:60]!r}…")
            continue
        if room <= 0:
            plan.notes.append(f"anchor refused, the story already holds {MAX_ANCHORS}: {text!r}")
            continue
        seen.add(key)
        room -= 1
        plan.add.append(text)
    return plan


@dataclass(frozen=True, slots=True)
class SummaryPlan:
    text: str | None  # the summary to store; None keeps the current one
    note: str | None = None  # why a proposed rewrite was not stored


def plan_summary(current: str | None, proposed: str | None) -> SummaryPlan:
    """The summary to store, if any.

    A blank rewrite is ignored: it would erase the story. A rewrite over `MAX_SUMMARY_CHARS` is
    refused whole (cutting it would drop what the model put last): the previous summary stays
    and the anchors hold the key facts. Anchors are not consulted: a summary that drops an
    anchored fact changes nothing for the anchor, and a repeat is accepted.
    """
    if proposed is None:
        return SummaryPlan(None)
    text = proposed.strip()
    if not text:
        return SummaryPlan(None, "blank summary ignored")
    if len(text) > MAX_SUMMARY_CHARS:
        return SummaryPlan(
            None,
            f"summary of {len(text)} chars refused, over {MAX_SUMMARY_CHARS}: the previous summary stays",
        )
    if current is not None and normalise(current) == normalise(text):
        return SummaryPlan(None)
    return SummaryPlan(text)


# ---------------------------------------------------------------------------------------------
# Positions


# ---------------------------------------------------------------------------------------------
# Context block


def _line(text: str, clip: int | None = _RENDER_CLIP) -> str:
    # Stored text comes from the model reading user messages: quoted like every stored text
    # that goes back into a prompt, it cannot close the block, fake a header or a chat turn.
    text = quote_line(text)
    return text if clip is None or len(text) <= clip else text[: clip - 1].rstrip() + "…"


def render_story_context(
    anchors: Sequence[Anchor],
    summary: str | None,
    positions: Sequence[Position],
    state_values: Mapping[str, float],
    specs: Mapping[str, StateSpec],
    *,
    show_ids: bool = False,
    describe_state: bool = True,
) -> str:
    """The story's block for the LLM context: anchors above the full summary, then the
    character's positions, then the state with its range. Empty when there is nothing.

    Everything inside is data written by the model from user messages; the markers say so and
    no stored text can reproduce them. `show_ids` is for the reflection, which names anchors by
    id to remove them. `describe_state=False` leaves out what each state means: a prompt that
    shows `render_state_guide` once, where it changes least, reads only the values here.
    """
    parts: list[str] = []
    if anchors:
        parts.append("Key facts of this story (kept until explicitly removed):")
        for a in anchors:
            prefix = f"[anchor {a.id}] " if show_ids else ""
            parts.append(f"- {prefix}{_line(a.text, clip=None)}")  # bounded when added
    if summary and summary.strip():
        parts.append("Story so far:")
        # A second guard only: `plan_summary` refuses longer rewrites, so this cuts a row stored
        # before the bound, which must not push the persona out of the prompt either. Not
        # `_RENDER_CLIP`: the reflection reads this block to rewrite the summary in full.
        parts.append(_line(summary, clip=MAX_SUMMARY_CHARS))
    if positions:
        parts.append("The character's current views:")
        for p in positions:
            grounds = _line(p.justification)
            parts.append(f"- {_line(p.subject, 80)}: {_line(p.stance)} (grounded in: {grounds})")
    if specs:
        parts.append("The character's state toward the user:")
        for name, spec in specs.items():
            value = spec.clamp(state_values.get(name, spec.default))
            desc = f": {_line(spec.description, 160)}" if spec.description and describe_state else ""
            parts.append(f"- {name} = {value:g} (range {spec.minimum:g} to {spec.maximum:g}){desc}")
    if not parts:
        return ""
    return "\n".join([STORY_BLOCK_START, *parts, STORY_BLOCK_END])


def render_state_guide(specs: Mapping[str, StateSpec]) -> str:
    """What each state the character keeps toward a person means: the part of the state that
    never changes, said once where a prompt changes least. Empty without state."""
    described = [(name, spec) for name, spec in specs.items() if spec.description]
    if not described:
        return ""
    return "The character's state toward the person, shown with the story's memory, means:\n" + "\n".join(
        f"- {name} (range {spec.minimum:g} to {spec.maximum:g}): {_line(spec.description, 160)}"
        for name, spec in described
    )
