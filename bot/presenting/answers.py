"""What a person reads after a memory command (bot/engine/memory_commands.py's answers, the
same in Discord and the terminal), and after a turn: the reply, or why there is none."""

from __future__ import annotations

from functools import singledispatch
from typing import TYPE_CHECKING

from bot.engine.memory_commands import (
    Edited,
    Erased,
    Exported,
    FollowupsAnswer,
    Forgotten,
    History,
    Pinned,
    Refused,
    Remembered,
    Restored,
    Sharing,
    Why,
)
from bot.i18n import number, text
from bot.memory.reports.stats import MemoryStats
from bot.presenting.memories import history_text, stats_text
from bot.presenting.why import why_text

if TYPE_CHECKING:
    from bot.engine import TurnResult

# Why an InvalidMemory refused a memory, by its code: the others are the program's own mistakes.
REFUSALS = ("empty", "too_long", "rule", "cap")
# What the front end says after a turn's reply, once (bot/engine/followups.py, `take_notice`).
NOTICES = ("checkins_blocked",)


def notice_text(notice: str) -> str:
    return text(f"notice_{notice}") if notice in NOTICES else ""


@singledispatch
def answer(result: object) -> str:
    """What a person reads after a memory command (bot/engine/memory_commands.py)."""
    raise TypeError(f"no wording for {type(result).__name__}")


@answer.register
def _(result: Refused) -> str:
    if result.code in REFUSALS:
        reason = text(
            f"refusal_{result.code}", **{k: number(v) if isinstance(v, int) else v for k, v in result.values.items()}
        )
    else:
        reason = text("refusal_invalid")
    return text("not_edited" if result.action == "edit" else "not_remembered", reason=reason)


@answer.register
def _(result: Remembered) -> str:
    return text("remembered", id=result.memory_id)


@answer.register
def _(result: Pinned) -> str:
    if not result.done:
        return no_memory(result.memory_id)
    return text("pinned" if result.pinned else "unpinned", id=result.memory_id)


@answer.register
def _(result: Forgotten) -> str:
    return text("forgot", id=result.memory_id) if result.done else no_memory(result.memory_id)


@answer.register
def _(result: Restored) -> str:
    if result.memory_id is None:
        return text("no_history_entry", id=result.history_id)
    return text("restored", id=result.memory_id)


@answer.register
def _(result: Edited) -> str:
    if result.history_id is None:
        return no_memory(result.memory_id)
    return text("edited", id=result.memory_id, history_id=result.history_id)


@answer.register
def _(result: History) -> str:
    return history_text(result.entries, result.removals, result.consolidations)


@answer.register
def _(result: Why) -> str:
    return why_text(result.selection)


@answer.register
def _(result: MemoryStats) -> str:
    return stats_text(result)


@answer.register
def _(result: Sharing) -> str:
    state = text("on" if result.on else "off")
    return text("sharing_now" if result.changed else "sharing_is", state=state)


@answer.register
def _(result: FollowupsAnswer) -> str:
    status = result.status
    lines = []
    if result.bad_timezone is not None:
        lines.append(text("followups_bad_timezone", name=result.bad_timezone))
    lines.append(
        text("followups_now" if result.changed else "followups_is", state=text("on" if status.enabled else "off"))
    )
    if status.timezone is None:
        lines.append(text("followups_timezone_unknown_hint"))
    else:
        lines.append(
            text("followups_timezone_learned" if status.learned else "followups_timezone", timezone=status.timezone)
        )
    if not status.offered:
        lines.append(text("followups_not_offered"))
    lines.append(text("followups_what"))
    return "\n".join(lines)


@answer.register
def _(result: Exported) -> str:
    data = result.data
    return text(
        "export_done",
        memories=text("n_memories", n=len(data["memories"])),
        history=text("n_versions", n=len(data["history"])),
        messages=text("n_messages", n=len(data["exchanges"])),
    )


@answer.register
def _(result: Erased) -> str:
    return text(
        "erased",
        memories=text("n_memories", n=result.report.memories),
        history=text("n_versions", n=result.report.history),
    )


def no_memory(memory_id: int) -> str:
    # Another user's id and a missing id get the same answer: ids reveal nothing.
    return text("no_memory", id=memory_id)


def storage_failed() -> str:
    return text("storage_failed")


def turn_text(result: TurnResult) -> str:
    """What a person reads for a turn, in every front end: the reply (marked when the stream
    was cut), or why there is none."""
    if result.reply is None:
        if result.failure == "context_too_small":
            return text("turn_context_too_small", needed=number(result.needed), context=number(result.context))
        return text(f"turn_{result.failure}")
    return f"{result.reply}\n\n{cut_note()}" if result.cut else result.reply


def cut_note() -> str:
    return text("turn_cut")
