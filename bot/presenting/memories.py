"""A person's memories as they read them: the pages of /memories, /history, /memory-stats, the
receipt of what a reply changed, and the few words every page shares (a clipped text, a type,
a date)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from bot.i18n import day, number, text
from bot.memory.model import MEMORY_TYPES, OPERATIONS, HistoryEntry, Memory
from bot.memory.reports.stats import MemoryStats
from bot.memory.stores.consolidations import Consolidation
from bot.memory.stores.stories import StoryHistoryEntry

if TYPE_CHECKING:
    from bot.engine import ReceiptLine

RECEIPT_ICON = "🧠"


def clip(value: str, limit: int = 160) -> str:
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def type_name(type_: str) -> str:
    return text(f"type_{type_}") if type_ in MEMORY_TYPES else type_


def date(dt: datetime | None) -> str:
    return day(dt) if dt else "—"


def memory_line(m: Memory, *, now: datetime) -> str:
    flags = []
    if m.pinned:
        flags.append("📌")
    if m.expires_at is not None:
        flags.append(text("flag_expired" if m.is_expired(now) else "flag_until", date=date(m.expires_at)))
    if m.scope == "story":
        flags.append(text("flag_story"))
    suffix = f" ({', '.join(flags)})" if flags else ""
    return f"#{m.id} [{type_name(m.type)}] {clip(m.text)}{suffix}"


def memory_pages(memories: Sequence[Memory], *, now: datetime, per_page: int = 10, max_chars: int = 1_900) -> list[str]:
    """Pages of at most `per_page` memory lines and `max_chars` characters, header included
    (a Discord message holds 2,000); one page saying so when there is nothing."""
    return [page for page, _ in memory_pages_with_spans(memories, now=now, per_page=per_page, max_chars=max_chars)]


def memory_pages_with_spans(
    memories: Sequence[Memory], *, now: datetime, per_page: int = 10, max_chars: int = 1_900
) -> list[tuple[str, range]]:
    """`memory_pages`, each page with the positions in `memories` it shows."""
    if not memories:
        return [(text("no_memories"), range(0))]
    lines = [memory_line(m, now=now) for m in memories]
    total = len(lines)

    def header(first: int, last: int) -> str:
        return text("memories_header", first=number(first), last=number(last), total=number(total)) + "\n"

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


def edit_option(m: Memory) -> tuple[str, str]:
    """(label, description) of a memory in the menu that opens its edit form."""
    return text("edit_option", id=m.id), clip(m.text, 100)


def operation(code: str) -> str:
    """A history operation's code, in the reader's words."""
    return text(f"operation_{code}") if code in OPERATIONS else code


def _cause(entry: HistoryEntry) -> str:
    """Why a version was archived, in the reader's words (the memory_history's operations and
    causes are closed sets: bot/memory/model.py), never as stored."""
    cause = entry.cause
    if cause.kind == "consolidated":
        return text("history_consolidated_into", id=cause.into)
    if cause.kind == "reflection":
        # Without a front-end message (the terminal), the source names an exchange: no number to show.
        if cause.detail is None or not cause.detail.isdigit():
            return text("cause_reflection")
        return text("cause_reflection_of", message=cause.detail)
    if cause.kind == "other":
        return text("cause_other", cause=cause.detail or "")
    return text(f"cause_{cause.kind}")


def history_text(
    entries: Sequence[HistoryEntry],
    story_entries: Sequence[StoryHistoryEntry] = (),
    consolidations: Sequence[Consolidation] = (),
) -> str:
    removals = [s for s in story_entries if s.operation == "anchor_removed"]
    if not entries and not removals and not consolidations:
        return text("history_empty")
    lines: list[str] = []
    if consolidations:
        lines.append(text("history_consolidations"))
        for c in consolidations:
            members = ", ".join(f"#{m}" for m, _ in c.members)
            if c.undone and c.undone_by == "source":
                now = text("history_consolidation_undone_by_source")
            elif c.undone:
                now = text("history_consolidation_undone")
            elif c.text is None:
                now = text("history_consolidation_gone", id=c.memory_id)
            else:
                now = f"#{c.memory_id} “{clip(c.text, 200)}”"
            lines.append(
                text(
                    "history_consolidation_line",
                    date=date(c.at),
                    n=len(c.members),
                    members=members,
                    now=now,
                    history_id=c.history_id,
                )
            )
        lines.append("")
    if entries:
        lines.append(text("history_head"))
        for e in entries:
            lines.append(
                text(
                    "history_line",
                    id=e.id,
                    memory_id=e.memory_id,
                    operation=operation(e.operation),
                    date=date(e.archived_at),
                    cause=_cause(e),
                    restored=text("history_restored") if e.restored else "",
                    text=clip(e.text, 100),
                )
            )
    if removals:
        if lines:
            lines.append("")
        lines.append(text("history_anchors"))
        for s in removals:
            said = s.payload.get("text", "") if isinstance(s.payload, dict) else ""
            lines.append(text("history_anchor_line", date=date(s.at), text=clip(said, 80), reason=s.reason or "—"))
    return "\n".join(lines)


def stats_text(stats: MemoryStats) -> str:
    kinds = sorted((t, n) for t, n in stats.by_type.items())
    types = ", ".join(text(f"n_{t}", n=n) if t in MEMORY_TYPES else f"{number(n)} {t}" for t, n in kinds) or text(
        "stats_none"
    )
    lines = [
        text(
            "stats_total",
            memories=text("n_memories", n=stats.total),
            types=types,
            pinned=text("n_pinned", n=stats.pinned),
            expired=text("n_expired", n=stats.expired),
            cap=number(stats.cap),
        ),
        text("stats_turns", turns=text("n_turns", n=stats.turns), degraded=number(stats.degraded_turns)),
        text("stats_never_semantic", n=stats.never_semantic),
        text("stats_pending", n=stats.pending_reflections),
    ]
    lines.append(
        text(
            "stats_followups",
            n=stats.followed_up,
            checkins=text("on" if stats.checkins else "off"),
            timezone=stats.checkins_timezone or text("followups_timezone_unknown"),
        )
    )
    if stats.consolidations:
        lines.append(text("stats_consolidations", n=stats.consolidations, members=number(stats.consolidated_members)))
    if stats.total >= stats.cap:
        lines.append(text("stats_cap_reached"))
    if stats.never_surfaced:
        lines.append(text("stats_never_surfaced", n=len(stats.never_surfaced)))
        lines.extend(
            text("stats_never_surfaced_line", id=m.id, text=clip(m.text, 90), times=number(m.times_candidate))
            for m in stats.never_surfaced[:10]
        )
    return "\n".join(lines)


def receipt_text(lines: Sequence[ReceiptLine]) -> str:
    """What one reflection changed, each memory as it is now (for the receipt)."""
    if not lines:
        return text("receipt_nothing")
    out = [text("receipt_head")]
    for line in lines:
        change, current = line.change, line.current
        if change.action == "added":
            out.append(text("receipt_added", id=change.memory_id, text=clip(change.text)))
        elif change.action == "replaced":
            out.append(
                text(
                    "receipt_replaced",
                    id=change.memory_id,
                    before=clip(change.before or "", 80),
                    text=clip(change.text),
                )
            )
        else:
            out.append(text("receipt_forgot", id=change.memory_id, text=clip(change.text)))
        if change.action != "forgotten":
            if current is None:
                out.append(text("receipt_forgotten_since", id=change.memory_id))
            elif current.text != change.text:
                out.append(text("receipt_now", text=clip(current.text)))
    if all(line.current is None for line in lines):
        out.append(text("receipt_all_gone"))
    return "\n".join(out)


def gone_memory(memory_id: int) -> str:
    return text("gone_memory", id=memory_id)
