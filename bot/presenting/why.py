"""/why, as a person reads it (and the owner's page, which shares its words): the memories
grouped by why they hold their place, in the order the selection fills the places, each with
its closeness to the message in percent; the rules; the lore that came up, and why an entry
was left out; the story.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.i18n import moment, number, text
from bot.memory.choice import REASONS, Slot, TurnFigures, TurnSelection
from bot.presenting.memories import clip, type_name

# Why a lore entry that fired was left out, and how it came in (bot/characters/lore.py).
LORE_LEFT_OUT = ("budget", "probability", "group", "cooldown", "delay", "filter", "disabled")
LORE_HOW = ("key", "constant", "sticky", "recursion", "decorator")


def closeness(score: float | None) -> int | None:
    """How close a memory is to the message, 1–99 %: where its score stands among all the
    person's memories that turn. Scores are z-scores over those memories, so this is the share
    of them it is closer than (the normal law's), 50 % being the average one."""
    if score is None or math.isnan(score):
        return None
    return max(1, min(99, round(50 * (1 + math.erf(score / math.sqrt(2))))))


@dataclass(frozen=True, slots=True)
class Group:
    """The memories of one reason, in the order they were taken, with what the reason means."""

    reason: str
    title: str
    slots: list[Slot]


def groups(selection: TurnSelection) -> list[Group]:
    """The turn's memories grouped by why they hold their place, in the order the selection
    fills the places (the passes of bot/memory/read/selection.py)."""
    by_reason: dict[str, list[Slot]] = {}
    for slot in selection.slots:
        by_reason.setdefault(slot.reason, []).append(slot)
    order = [r for r in REASONS if r in by_reason] + [r for r in by_reason if r not in REASONS]
    return [Group(r, text(f"why_group_{r}") if r in REASONS else r, by_reason[r]) for r in order]


def slot_score(slot: Slot) -> str:
    """A memory's closeness as the page and /why show it: "84 %", "your words" (a lexical match
    stood in), or "—" (chosen without a score)."""
    if slot.lexical:
        return text("why_words")
    shown = closeness(slot.score)
    return text("why_closeness", percent=number(shown)) if shown is not None else "—"


def why_text(selection: TurnSelection | None) -> str:
    if selection is None:
        return text("why_none")
    lines = [
        text("why_head", at=moment(selection.created_at), query=clip(selection.query, 80)),
        text(
            "why_chosen",
            chosen=text("n_chosen", n=len(selection.slots)),
            candidates=text("n_candidates", n=selection.candidates),
        ),
    ]
    if selection.degraded:
        lines.append(text("why_degraded"))
    lines += prompt_lines(selection.figures)
    if selection.slots:
        lines.append(text("why_legend"))
    for group in groups(selection):
        lines += ["", group.title]
        for slot in group.slots:
            pin = " 📌" if slot.pinned else ""
            series = text("why_series", members=number(slot.series)) if slot.series else ""
            left_out = text("why_slot_left_out") if slot.left_out else ""
            said = text("why_withdrawn") if slot.withdrawn else clip(slot.text, 100)
            lines.append(f"- #{slot.id} [{type_name(slot.type)}] {slot_score(slot)}{pin}{series} — {said}{left_out}")
    if selection.rules:
        lines += ["", text("why_rules")]
        lines.extend(f"- {clip(r, 100)}" for r in selection.rules)
    if selection.lore:
        lines += ["", text("why_lore")]
        lines.extend(text("lore_line", name=row.name, how=row.how, fate=row.fate) for row in lore_rows(selection.lore))
    lines.extend(_story_lines(selection.story))
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class LoreRow:
    name: str
    how: str  # on which key, or why without one
    fate: str  # in the prompt (its cost), or why it was left out
    kept: bool


def lore_rows(lore: Sequence[dict[str, Any]]) -> list[LoreRow]:
    """The turn's lore as /why and the owner's page show it: each entry that fired, how, and
    whether it went in; the budget left-outs name the setting to raise."""
    rows = []
    for hit in lore:
        how = hit.get("how") if hit.get("how") in LORE_HOW else "key"
        left = hit.get("left_out") or ("disabled" if hit.get("disabled") else None if hit.get("kept") else "budget")
        keyword = clip(str(hit.get("keyword", "")), 40)
        cost = int(hit.get("cost") or 0)
        if left is None:
            fate = text("lore_kept", n=cost)
        elif left == "budget":
            budget = hit.get("budget")
            where = text("lore_budget_book") if hit.get("book_budget") else "LORE_BUDGET_CHARS"
            fate = text("lore_left_budget", budget=number(budget) if isinstance(budget, int) else "—", setting=where)
        else:
            fate = text(
                f"lore_left_{left}" if left in LORE_LEFT_OUT else "lore_left_budget",
                budget="—",
                setting="LORE_BUDGET_CHARS",
            )
        rows.append(
            LoreRow(clip(str(hit.get("name", "")), 60), text(f"lore_how_{how}", keyword=keyword), fate, left is None)
        )
    return rows


def prompt_lines(figures: TurnFigures) -> list[str]:
    """The prompt's size as the LLM server counted it, what was left out to fit the model's
    context, and whether it was cut."""
    if figures.context_too_small:
        return [text("why_context_too_small", context=number(figures.context_tokens or 0))]
    if figures.failed:
        return [text("why_no_reply")]
    lines = []
    if figures.prompt_tokens is not None:
        size = text("why_prompt", tokens=number(figures.prompt_tokens))
        if figures.context_tokens:
            size += text("why_prompt_context", context=number(figures.context_tokens))
        if figures.cached_tokens:
            size += text("why_prompt_cached", tokens=number(figures.cached_tokens))
        if figures.completion_tokens is not None:
            size += text("why_prompt_reply", tokens=number(figures.completion_tokens))
        lines.append(size + ".")
    left_out = [
        text(key, n=n)
        for key, n in (
            ("why_left_out_history", figures.history_left_out),
            ("why_left_out_memories", figures.memories_left_out),
        )
        if n
    ]
    if left_out:
        lines.append(text("why_left_out", context=number(figures.context_tokens or 0), what=", ".join(left_out)))
    if figures.context_full:
        lines.append(text("why_context_full"))
    return lines


def _story_lines(story: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    anchors = story.get("anchors") or []
    positions = story.get("positions") or []
    state = story.get("state") or {}
    if anchors:
        lines += ["", text("why_anchors")] + [f"- [{a['id']}] {clip(a['text'], 100)}" for a in anchors]
    if story.get("summary"):
        lines += ["", text("why_summary", summary=clip(story["summary"], 300))]
    if positions:
        lines += ["", text("why_positions")] + [f"- {p['subject']}: {clip(p['stance'], 100)}" for p in positions]
    if state:
        lines += ["", text("why_state", values=", ".join(f"{k} {number(v)}" for k, v in state.items()))]
    return lines
