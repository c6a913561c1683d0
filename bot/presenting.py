"""Plain-text renderings of memory data, shared by the Discord cogs and the terminal chat.

Pure: takes engine data, returns strings (Discord markdown-safe: no tables, short lines), in
the language `lang` of bot.i18n (English by default, as the terminal shows them).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.i18n import DEFAULT_LANGUAGE, text
from bot.memory.choice import TurnFigures, TurnSelection
from bot.memory.model import MEMORY_TYPES, HistoryEntry, Memory
from bot.memory.stores.consolidations import BY_SOURCE, Consolidation
from bot.memory.stores.memories import CONSOLIDATE, consolidated_into
from bot.memory.stores.stories import StoryHistoryEntry

if TYPE_CHECKING:
    from bot.engine import MemoryStats, ReceiptLine

REASONS = ("pinned", "global", "semantic", "conversation", "type_quota", "backfill")
# The owner's web page is English.
REASON_LABELS = {reason: text(DEFAULT_LANGUAGE, f"reason_{reason}") for reason in REASONS}
STORAGE_FAILED = text(DEFAULT_LANGUAGE, "storage_failed")


def _reason(reason: str, lang: str) -> str:
    return text(lang, f"reason_{reason}") if reason in REASONS else reason


# The codes memory_history stores (its operation, and the cause the stores, the engine and the
# reflection write): /history names each in the reader's language, never as stored.
OPERATIONS = ("replace", "merge", "expiry", "delete", "edit", "restore", "consolidate")
CAUSES = {
    "reflection": "cause_reflection",
    "message deleted": "cause_message_deleted",
    "message edited": "cause_message_edited",
    "user: /forget": "cause_forget",
    "user: edit": "cause_edit",
    "user: /restore": "cause_restore",
    "restore": "cause_restore",
}
_REFLECTION_OF = "reflection of message "


def _type(type_: str, lang: str) -> str:
    return text(lang, f"type_{type_}") if type_ in MEMORY_TYPES else type_


def _operation(operation: str, lang: str) -> str:
    return text(lang, f"operation_{operation}") if operation in OPERATIONS else operation


def _cause(entry: HistoryEntry, lang: str) -> str:
    cause = entry.cause
    into = consolidated_into(cause) if entry.operation == CONSOLIDATE else None
    if into is not None:
        return text(lang, "history_consolidated_into", id=into)
    if cause in CAUSES:
        return text(lang, CAUSES[cause])
    if cause.startswith(_REFLECTION_OF):
        message = cause.removeprefix(_REFLECTION_OF)
        # Without a front-end message (the terminal), the source names an exchange: no number to show.
        if not message.isdigit():
            return text(lang, "cause_reflection")
        return text(lang, "cause_reflection_of", message=message)
    return text(lang, "cause_other", cause=cause)


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
    return f"#{m.id} [{_type(m.type, lang)}] {clip(m.text)}{suffix}"


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
        return text(lang, "memories_header", first=first, last=last, total=total) + "\n"

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
        chosen=text(lang, "n_chosen", n=len(selection.slots)),
        candidates=text(lang, "n_candidates", n=selection.candidates),
    )
    if selection.degraded:
        head += "\n" + text(lang, "why_degraded")
    head += "".join(f"\n{line}" for line in prompt_lines(selection.figures, lang=lang))
    lines = [head, ""]
    for n, slot in enumerate(selection.slots, 1):
        if slot.score is not None:
            score = text(lang, "why_score", score=f"{slot.score:.3f}")
        else:
            score = text(lang, "why_lexical") if slot.lexical else ""
        pin = " 📌" if slot.pinned else ""
        series = text(lang, "why_series", members=slot.series) if slot.series else ""
        said = text(lang, "why_withdrawn") if slot.withdrawn else clip(slot.text, 100)
        lines.append(f"{n:>2}. #{slot.id} [{_type(slot.type, lang)}] {_reason(slot.reason, lang)}{score}{pin}{series} — {said}")
    if selection.rules:
        lines.append("")
        lines.append(text(lang, "why_rules"))
        lines.extend(f"- {clip(r, 100)}" for r in selection.rules)
    if selection.lore:
        lines.append("")
        lines.append(text(lang, "why_lore"))
        for hit in selection.lore:
            fate = text(
                lang,
                "why_lore_disabled" if hit.get("disabled") else "why_lore_kept" if hit["kept"] else "why_lore_left_out",
                cost=hit["cost"],
            )
            lines.append(text(lang, "why_lore_line", name=clip(hit["name"], 60), keyword=clip(hit["keyword"], 40), fate=fate))
    lines.extend(_story_lines(selection.story, lang))
    return "\n".join(lines)


def prompt_lines(figures: TurnFigures, *, lang: str = DEFAULT_LANGUAGE) -> list[str]:
    """The prompt's size as the LLM server counted it, and whether it was cut."""
    if figures.failed:
        return [text(lang, "why_no_reply")]
    if figures.prompt_tokens is None:
        return []
    size = text(lang, "why_prompt", tokens=f"{figures.prompt_tokens:,}")
    if figures.context_tokens:
        size += text(lang, "why_prompt_context", context=f"{figures.context_tokens:,}")
    if figures.completion_tokens is not None:
        size += text(lang, "why_prompt_reply", tokens=f"{figures.completion_tokens:,}")
    lines = [size + "."]
    if figures.context_full:
        lines.append(text(lang, "why_context_full"))
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
            if c.undone and c.undone_by == BY_SOURCE:
                now = text(lang, "history_consolidation_undone_by_source")
            elif c.undone:
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
                    operation=_operation(e.operation, lang),
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


def stats_text(stats: "MemoryStats", *, lang: str = DEFAULT_LANGUAGE) -> str:
    types = ", ".join(f"{n} {_type(t, lang)}" for t, n in sorted(stats.by_type.items())) or text(lang, "stats_none")
    lines = [
        text(
            lang,
            "stats_total",
            memories=text(lang, "n_memories", n=stats.total),
            types=types,
            pinned=text(lang, "n_pinned", n=stats.pinned),
            expired=text(lang, "n_expired", n=stats.expired),
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


def receipt_text(lines: Sequence[ReceiptLine], *, lang: str = DEFAULT_LANGUAGE) -> str:
    """What one reflection changed, each memory as it is now (for the receipt)."""
    if not lines:
        return text(lang, "receipt_nothing")
    out = [text(lang, "receipt_head")]
    for line in lines:
        change, current = line.change, line.current
        if change.action == "added":
            out.append(text(lang, "receipt_added", id=change.memory_id, text=clip(change.text)))
        elif change.action == "replaced":
            out.append(
                text(lang, "receipt_replaced", id=change.memory_id, before=clip(change.before or "", 80), text=clip(change.text))
            )
        else:
            out.append(text(lang, "receipt_forgot", id=change.memory_id, text=clip(change.text)))
        if change.action != "forgotten":
            if current is None:
                out.append(text(lang, "receipt_forgotten_since", id=change.memory_id))
            elif current.text != change.text:
                out.append(text(lang, "receipt_now", text=clip(current.text)))
    if all(line.current is None for line in lines):
        out.append(text(lang, "receipt_all_gone"))
    return "\n".join(out)


def gone_memory(memory_id: int, *, lang: str = DEFAULT_LANGUAGE) -> str:
    return text(lang, "gone_memory", id=memory_id)


def edit_result(memory_id: int, history_id: int | None, *, lang: str = DEFAULT_LANGUAGE) -> str:
    if history_id is None:
        return no_memory(memory_id, lang=lang)
    return text(lang, "edited", id=memory_id, history_id=history_id)


def not_edited(reason: object, *, lang: str = DEFAULT_LANGUAGE) -> str:
    return text(lang, "not_edited", reason=reason)
