"""Plain-text renderings of memory data, shared by the Discord cogs and the terminal chat.

Pure: takes engine data, returns strings (Discord markdown-safe: no tables, short lines).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.memory.model import HistoryEntry, Memory
from bot.memory.recall import TurnSelection
from bot.memory.story_store import StoryHistoryEntry

if TYPE_CHECKING:
    from bot.engine import MemoryStats

REASON_LABELS = {
    "pinned": "pinned",
    "global": "global",
    "semantic": "recalled by the message",
    "type_quota": "type quota",
    "backfill": "backfill",
}


STORAGE_FAILED = (
    "Not done: the bot cannot write to its database right now (its log says why). Nothing was "
    "changed; try again later."
)


def clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _date(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%d") if dt else "—"


def memory_line(m: Memory, *, now: datetime) -> str:
    flags = []
    if m.pinned:
        flags.append("📌")
    if m.expires_at is not None:
        flags.append(("expired " if m.is_expired(now) else "until ") + _date(m.expires_at))
    if m.scope == "story":
        flags.append("this story")
    suffix = f" ({', '.join(flags)})" if flags else ""
    return f"#{m.id} [{m.type}] {clip(m.text)}{suffix}"


def memory_pages(
    memories: Sequence[Memory], *, now: datetime, per_page: int = 10, max_chars: int = 1_900
) -> list[str]:
    """Pages of at most `per_page` memory lines and `max_chars` characters, header included
    (a Discord message holds 2,000); one page saying so when there is nothing."""
    if not memories:
        return ["No memories yet."]
    lines = [memory_line(m, now=now) for m in memories]
    total = len(lines)

    def header(first: int, last: int) -> str:
        return f"Memories {first}–{last} of {total}:\n"

    # The longest header any page can have: its numbers are at most `total`.
    room = max_chars - len(header(total, total))
    if room < 1:
        raise ValueError("max_chars leaves no room for a memory line")
    pages: list[str] = []
    start = 0
    while start < total:
        chunk = [clip(lines[start], room)]
        used = len(chunk[0])
        for line in lines[start + 1 : start + per_page]:
            if used + 1 + len(line) > room:
                break
            chunk.append(line)
            used += 1 + len(line)
        pages.append(header(start + 1, start + len(chunk)) + "\n".join(chunk))
        start += len(chunk)
    return pages


def why_text(selection: TurnSelection | None) -> str:
    if selection is None:
        return "No turn of yours in this channel yet: talk to me first, then ask /why."
    head = (
        f"Last turn ({selection.created_at:%Y-%m-%d %H:%M} UTC), message: “{clip(selection.query, 80)}”\n"
        f"{_count(len(selection.slots), 'memory', 'memories')} chosen out of "
        f"{_count(selection.candidates, 'candidate')}"
    )
    if selection.degraded:
        head += "\n⚠️ Degraded turn: the embedder did not answer in time, no semantic scores (lexical matches only)."
    lines = [head, ""]
    for n, slot in enumerate(selection.slots, 1):
        score = f" score {slot.score:.3f}" if slot.score is not None else (" lexical match" if slot.lexical else "")
        pin = " 📌" if slot.pinned else ""
        lines.append(f"{n:>2}. #{slot.id} [{slot.type}] {REASON_LABELS.get(slot.reason, slot.reason)}{score}{pin} — {clip(slot.text, 100)}")
    if selection.rules:
        lines.append("")
        lines.append("Rules, always in context (outside the 24-slot budget):")
        lines.extend(f"- {clip(r, 100)}" for r in selection.rules)
    if selection.lore:
        lines.append("")
        lines.append("Lore entries that fired (outside the 24-slot budget, their own budget):")
        for hit in selection.lore:
            fate = f"{hit['cost']} chars" if hit["kept"] else f"{hit['cost']} chars, left out: over the lore budget"
            lines.append(f"- {clip(hit['name'], 60)} — on “{clip(hit['keyword'], 40)}” ({fate})")
    lines.extend(_story_lines(selection.story))
    return "\n".join(lines)


def _story_lines(story: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    anchors = story.get("anchors") or []
    positions = story.get("positions") or []
    state = story.get("state") or {}
    if anchors:
        lines += ["", "Anchors (key story facts):"] + [f"- [{a['id']}] {clip(a['text'], 100)}" for a in anchors]
    if story.get("summary"):
        lines += ["", f"Story summary: {clip(story['summary'], 300)}"]
    if positions:
        lines += ["", "Character positions served:"] + [
            f"- {p['subject']}: {clip(p['stance'], 100)}" for p in positions
        ]
    if state:
        lines += ["", "State: " + ", ".join(f"{k} {v:g}" for k, v in state.items())]
    return lines


def history_text(entries: Sequence[HistoryEntry], story_entries: Sequence[StoryHistoryEntry] = ()) -> str:
    removals = [s for s in story_entries if s.operation == "anchor_removed"]
    if not entries and not removals:
        return "History is empty: nothing was replaced, merged or forgotten."
    lines: list[str] = []
    if entries:
        lines.append("Archived versions (restore one with /restore <history id>):")
        for e in entries:
            restored = " (restored)" if e.restored else ""
            lines.append(
                f"h{e.id}: #{e.memory_id} {e.operation} on {_date(e.archived_at)} by {e.cause}{restored}"
                f" — was “{clip(e.text, 100)}”"
            )
    if removals:
        if lines:
            lines.append("")
        lines.append("Anchor removals:")
        for s in removals:
            text = s.payload.get("text", "") if isinstance(s.payload, dict) else ""
            lines.append(f"- {_date(s.at)} “{clip(text, 80)}” — reason: {s.reason or '—'}")
    return "\n".join(lines)


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def stats_text(stats: "MemoryStats") -> str:
    types = ", ".join(f"{n} {t}" for t, n in sorted(stats.by_type.items())) or "none"
    lines = [
        f"{_count(stats.total, 'memory', 'memories')} ({types}); {stats.pinned} pinned; "
        f"{stats.expired} expired (kept, not served).",
        f"Turns: {stats.turns}, of which degraded (no semantic recall): {stats.degraded_turns}.",
        f"Memories never recalled by meaning: {stats.never_semantic}.",
        f"Reflections waiting: {stats.pending_reflections}.",
    ]
    if stats.never_surfaced:
        lines.append(f"Never surfaced although candidate often ({len(stats.never_surfaced)}):")
        lines.extend(f"- #{m.id} {clip(m.text, 90)} (candidate {m.times_candidate}×)" for m in stats.never_surfaced[:10])
    return "\n".join(lines)


# --- answers to the memory commands (one wording for Discord and the terminal) ------------------


def remembered(memory_id: int) -> str:
    return f"Remembered as #{memory_id}."


def not_remembered(reason: object) -> str:
    return f"Not remembered: {reason}."


def pin_result(memory_id: int, pinned: bool, done: bool) -> str:
    if not done:
        return no_memory(memory_id)
    return f"{'Pinned' if pinned else 'Unpinned'} #{memory_id}."


def forget_result(memory_id: int, done: bool) -> str:
    return f"Forgot #{memory_id} (see /history to restore it)." if done else no_memory(memory_id)


def restore_result(history_id: int, restored: int | None) -> str:
    if restored is None:
        return f"No history entry h{history_id} of yours."
    return f"Restored memory #{restored}."


def no_memory(memory_id: int) -> str:
    # Another user's id and a missing id get the same answer: ids reveal nothing.
    return f"You have no memory #{memory_id}."


def sharing_text(on: bool, *, changed: bool) -> str:
    state = "on" if on else "off"
    if changed:
        return f"Sharing across places is now {state}."
    return f"Sharing across places is {state}. Usage: /share on|off"
