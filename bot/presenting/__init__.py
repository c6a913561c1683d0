"""What a person reads, shared by the Discord cogs, the terminal chat and the owner's page: data
in, text out, every word from the catalogue (bot/i18n.py) in the language set for the request,
numbers and dates as that language writes them. Pure: no I/O, no discord; Discord markdown-safe
(no tables, short lines).

bot/presenting/memories.py: the memories, /history, /memory-stats, receipts;
bot/presenting/why.py: /why and the owner's turn page; bot/presenting/answers.py: the memory
commands' answers and a turn's. The names below are re-exported for the front ends.
"""

from bot.presenting.answers import REFUSALS, answer, cut_note, no_memory, notice_text, storage_failed, turn_text
from bot.presenting.memories import (
    RECEIPT_ICON,
    clip,
    edit_option,
    gone_memory,
    history_text,
    memory_line,
    memory_pages,
    memory_pages_with_spans,
    operation,
    receipt_text,
    stats_text,
)
from bot.presenting.why import LORE_HOW, LORE_LEFT_OUT, closeness, groups, lore_rows, prompt_lines, slot_score, why_text

__all__ = [
    "LORE_HOW",
    "LORE_LEFT_OUT",
    "RECEIPT_ICON",
    "REFUSALS",
    "answer",
    "clip",
    "closeness",
    "cut_note",
    "edit_option",
    "gone_memory",
    "groups",
    "history_text",
    "lore_rows",
    "memory_line",
    "memory_pages",
    "memory_pages_with_spans",
    "no_memory",
    "notice_text",
    "operation",
    "prompt_lines",
    "receipt_text",
    "slot_score",
    "stats_text",
    "storage_failed",
    "turn_text",
    "why_text",
]
