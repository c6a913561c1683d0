"""Plain-text renderings of memory data, shared by the Discord cogs and the terminal chat.

Pure: takes engine data, returns strings (Discord markdown-safe: no tables, short lines), in
the language `lang` of bot.i18n (English by default, as the terminal shows them).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.i18n import DEFAULT_LANGUAGE, text
from bot.memory.model import HistoryEntry, Memory
from bot.memory.recall import TurnFigures, TurnSelection
from bot.memory.store import CONSOLIDATE, Consolidation, consolidated_into
from bot.memory.story_store import StoryHistoryEntry

if TYPE_CHECKING:
    from bot.engine import MemoryStats, ReceiptLine

REASONS = ("pinned", "global", "semantic", "type_quota", "backfill")
# The owner's web page is English.
REASON_LABELS = {reason: text(DEFAULT_LANGUAGE, f"reason_{reason}") for reason in REASONS}
STORAGE_FAILED = text(DEFAULT_LANGUAGE, "storage_failed")


def _reason(reason: str, lang: str) -> str:
    return text(lang, f"reason_{reason}") if reason in REASONS else reason


def clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _date(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%d") if dt else "—"


def memory_line(m: Memory, *, now: datetime, lang: str = DEFAULT_LANGUAGE) -> str:
    flags = []
    if m.pinned:
        flags.append("📌")
    if m.expires_at is not None:
        flags.append(text(lang, "flag_expired" if m.is_expired(now) else "flag_until", date=_date(m.expires_at)))
    if m.scope == "story":
        flags.append(text(lang, "flag_story"))
    suffix = f" ({', '.join(flags)})" if flags else ""
    return f"#{m.id} [{m.type}] {clip(m.text)}{suffix}"


def memory_pages(
    memories: Sequence[Memory], *, now: datetime, per_page: int = 10, max_chars: int = 1_900, lang: str = DEFAULT_LANGUAGE
) -> list[str]:
    """Pages of at most `per_page` memory lines and `max_chars` characters, header included
    (a Discord message holds 2,000); one page saying so when there is nothing."""
    return [
        page
        for page, _ in memory_pages_with_spans(memories, now=now, per_page=per_page, max_chars=max_chars, lang=lang)
    ]


def memory_pages_with_spans(
    memories: Sequence[Memory],
    *,
    now: datetime,
    per_page: int = 10,
    max_chars: int = 1_900,
    lang: str = DEFAULT_LANGUAGE,
) -> list[tuple[str, range]]:
    """`memory_pages`, each page with the positions in `memories` it shows."""
    if not memories:
        return [(text(lang, "no_memories"), range(0))]
    lines = [memory_line(m, now=now, lang=lang) for m in memories]
    total = len(lines)

    def header(first: int, last: int) -> str:
        return text(lang, "memories_header", first=first, last=last, total=total)

    # The longest header any page can have: its numbers are at most `total`.
    room = max_chars - len(header(total, total))
    if room < 1:
        raise ValueError("max_chars leaves no room for a memory line")
    pages: list[tuple[str, range]] = []
    start = 0
    while start < total:
        chunk = [clip(lines[start], room)]
        used = len(chunk[0])
        for line in lines[start + 1 : start + per_page]:
            if used + 1 + len(line) > room:
                break
            chunk.append(line)
            used += 1 + len(line)
        pages.append((header(start + 1, start + len(chunk)) + "\n".join(chunk), range(start, start + len(chunk))))
        start += len(chunk)
    return pages


def why_text(selection: TurnSelection | None, *, lang: str = DEFAULT_LANGUAGE) -> str:
    if selection is None:
        return text(lang, "why_none")
    head = text(
        lang,
        "why_head",
        at=f"{selection.created_at:%Y-%m-%d %H:%M}",
        query=clip(selection.query, 80),
        chosen=_count(len(selection.slots), "memory", lang),
        candidates=_count(selection.candidates, "candidate", lang),
    )
    if selection.degraded:
        head += "\n" + text(lang, "why_degraded")
    head += "".join(f"\n{line}" for line in prompt_lines(selection.figures))
    lines = [head, ""]
    for n, slot in enumerate(selection.slots, 1):
        if slot.score is not None:
            score = text(lang, "why_score", score=f"{slot.score:.3f}")
        else:
            score = text(lang, "why_lexical") if slot.lexical else ""
        pin = " 📌" if slot.pinned else ""
        series = text(lang, "why_series", members=slot.series) if slot.series else ""
        lines.append(f"{n:>2}. #{slot.id} [{slot.type}] {_reason(slot.reason, lang)}{score}{pin}{series} — {clip(slot.text, 100)}")
    if selection.rules:
        lines.append("")
        lines.append(text(lang, "why_rules"))
        lines.extend(f"- {clip(r, 100)}" for r in selection.rules)
    if selection.lore:
        lines.append("")
        lines.append(text(lang, "why_lore"))
        for hit in selection.lore:
            fate = text(lang, "why_lore_kept" if hit["kept"] else "why_lore_left_out", cost=hit["cost"])
            lines.append(text(lang, "why_lore_line", name=clip(hit["name"], 60), keyword=clip(hit["keyword"], 40), fate=fate))
    lines.extend(_story_lines(selection.story, lang))
    return "\n".join(lines)


def prompt_lines(figures: TurnFigures) -> list[str]:
    """The prompt's size as the LLM server counted it, and whether it was cut."""
    if figures.failed:
        return ["⚠️ The language model gave no reply to this message."]
    if figures.prompt_tokens is None:
        return []
    size = f"Prompt: {figures.prompt_tokens:,} tokens"
    if figures.context_tokens:
        size += f" of a {figures.context_tokens:,}-token context"
    if figures.completion_tokens is not None:
        size += f"; reply: {figures.completion_tokens:,} tokens"
    lines = [size + "."]
    if figures.context_full:
        lines.append("⚠️ The prompt filled the context: the model did not see its start (persona, rules).")
    return lines


def _story_lines(story: dict[str, Any], lang: str = DEFAULT_LANGUAGE) -> list[str]:
    lines: list[str] = []
    anchors = story.get("anchors") or []
    positions = story.get("positions") or []
    state = story.get("state") or {}
    if anchors:
        lines += ["", text(lang, "why_anchors")] + [f"- [{a['id']}] {clip(a['text'], 100)}" for a in anchors]
    if story.get("summary"):
        lines += ["", text(lang, "why_summary", summary=clip(story["summary"], 300))]
    if positions:
        lines += ["", text(lang, "why_positions")] + [
            f"- {p['subject']}: {clip(p['stance'], 100)}" for p in positions
        ]
    if state:
        lines += ["", text(lang, "why_state", values=", ".join(f"{k} {v:g}" for k, v in state.items()))]
    return lines


def _cause(entry: HistoryEntry, lang: str) -> str:
    into = consolidated_into(entry.cause) if entry.operation == CONSOLIDATE else None
    return entry.cause if into is None else text(lang, "history_consolidated_into", id=into)


def history_text(
    entries: Sequence[HistoryEntry],
    story_entries: Sequence[StoryHistoryEntry] = (),
    consolidations: Sequence[Consolidation] = (),
    *,
    lang: str = DEFAULT_LANGUAGE,
) -> str:
    removals = [s for s in story_entries if s.operation == "anchor_removed"]
    if not entries and not removals and not consolidations:
        return text(lang, "history_empty")
    lines: list[str] = []
    if consolidations:
        lines.append(text(lang, "history_consolidations"))
        for c in consolidations:
            members = ", ".join(f"#{m}" for m, _ in c.members)
            if c.undone:
                now = text(lang, "history_consolidation_undone")
            elif c.text is None:
                now = text(lang, "history_consolidation_gone", id=c.memory_id)
            else:
                now = f"#{c.memory_id} “{clip(c.text, 200)}”"
            lines.append(
                text(lang, "history_consolidation_line", date=_date(c.at), n=len(c.members), members=members, now=now, history_id=c.history_id)
            )
        lines.append("")
    if entries:
        lines.append(text(lang, "history_head"))
        for e in entries:
            lines.append(
                text(
                    lang,
                    "history_line",
                    id=e.id,
                    memory_id=e.memory_id,
                    operation=e.operation,
                    date=_date(e.archived_at),
                    cause=_cause(e, lang),
                    restored=text(lang, "history_restored") if e.restored else "",
                    text=clip(e.text, 100),
                )
            )
    if removals:
        if lines:
            lines.append("")
        lines.append(text(lang, "history_anchors"))
        for s in removals:
            said = s.payload.get("text", "") if isinstance(s.payload, dict) else ""
            lines.append(text(lang, "history_anchor_line", date=_date(s.at), text=clip(said, 80), reason=s.reason or "—"))
    return "\n".join(lines)


def _count(n: int, noun: str, lang: str = DEFAULT_LANGUAGE) -> str:
    plural = "memories" if noun == "memory" else noun + "s"
    return text(lang, f"n_{noun if n == 1 else plural}", n=n)


def stats_text(stats: "MemoryStats", *, lang: str = DEFAULT_LANGUAGE) -> str:
    types = ", ".join(f"{n} {t}" for t, n in sorted(stats.by_type.items())) or text(lang, "stats_none")
    lines = [
        text(
            lang,
            "stats_total",
            memories=_count(stats.total, "memory", lang),
            types=types,
            pinned=stats.pinned,
            expired=stats.expired,
            cap=stats.cap,
        ),
        text(lang, "stats_turns", turns=stats.turns, degraded=stats.degraded_turns),
        text(lang, "stats_never_semantic", n=stats.never_semantic),
        text(lang, "stats_pending", n=stats.pending_reflections),
    ]
    if stats.consolidations:
        lines.append(text(lang, "stats_consolidations", n=stats.consolidations, members=stats.consolidated_members))
    if stats.total >= stats.cap:
        lines.append(text(lang, "stats_cap_reached"))
    if stats.never_surfaced:
        lines.append(text(lang, "stats_never_surfaced", n=len(stats.never_surfaced)))
        lines.extend(
            text(lang, "stats_never_surfaced_line", id=m.id, text=clip(m.text, 90), times=m.times_candidate)
            for m in stats.never_surfaced[:10]
        )
    return "\n".join(lines)


# --- answers to the memory commands (one wording for Discord and the terminal) ------------------


def remembered(memory_id: int, *, lang: str = DEFAULT_LANGUAGE) -> str:
    return text(lang, "remembered", id=memory_id)


def not_remembered(reason: object, *, lang: str = DEFAULT_LANGUAGE) -> str:
    return text(lang, "not_remembered", reason=reason)


def pin_result(memory_id: int, pinned: bool, done: bool, *, lang: str = DEFAULT_LANGUAGE) -> str:
    if not done:
        return no_memory(memory_id, lang=lang)
    return text(lang, "pinned" if pinned else "unpinned", id=memory_id)


def forget_result(memory_id: int, done: bool, *, lang: str = DEFAULT_LANGUAGE) -> str:
    return text(lang, "forgot", id=memory_id) if done else no_memory(memory_id, lang=lang)


def restore_result(history_id: int, restored: int | None, *, lang: str = DEFAULT_LANGUAGE) -> str:
    if restored is None:
        return text(lang, "no_history_entry", id=history_id)
    return text(lang, "restored", id=restored)


def no_memory(memory_id: int, *, lang: str = DEFAULT_LANGUAGE) -> str:
    # Another user's id and a missing id get the same answer: ids reveal nothing.
    return text(lang, "no_memory", id=memory_id)


def sharing_text(on: bool, *, changed: bool, lang: str = DEFAULT_LANGUAGE) -> str:
    state = text(lang, "on" if on else "off")
    return text(lang, "sharing_now" if changed else "sharing_is", state=state)


# --- receipts, edits, swipes -----------------------------------------------------------------

RECEIPT_ICON = "🧠"
SETTLED_ALREADY = (
    "This answer is settled: I kept it as shown, and only the latest answer of a conversation "
    "can be regenerated or swiped."
)
REGENERATE_FAILED = "I couldn't get another answer from my language model just now; the one shown stays."


def receipt_text(lines: Sequence[ReceiptLine]) -> str:
    """What one reflection changed, each memory as it is now (for the receipt)."""
    if not lines:
        return "Nothing of this message is in my memory of you."
    out = ["What I changed in my memory of you after this message:"]
    for line in lines:
        change, current = line.change, line.current
        if change.action == "added":
            out.append(f"+ added #{change.memory_id}: {clip(change.text)}")
        elif change.action == "replaced":
            out.append(f"~ replaced #{change.memory_id}: {clip(change.before or '', 80)} → {clip(change.text)}")
        else:
            out.append(f"− forgot #{change.memory_id}: {clip(change.text)} (/history to restore it)")
        if change.action != "forgotten":
            if current is None:
                out.append(f"   #{change.memory_id} has been forgotten since (/history to restore it).")
            elif current.text != change.text:
                out.append(f"   now: {clip(current.text)}")
    if all(line.current is None for line in lines):
        out.append("None of these memories is in my memory any more.")
    return "\n".join(out)


def gone_memory(memory_id: int) -> str:
    return f"#{memory_id} is no longer in my memory (forgotten); /history lists its archived versions."


def edit_result(memory_id: int, history_id: int | None) -> str:
    if history_id is None:
        return no_memory(memory_id)
    return f"Edited #{memory_id}. The previous version is archived as h{history_id}: `/restore {history_id}` brings it back."


def not_edited(reason: object) -> str:
    return f"Not edited: {reason}."
