"""SillyTavern World Info files (`{"entries": {"0": {"key": [...], "content": ...}}}`), read as
a character's `lore:` file: each entry becomes an entry of Écho's own lore format, with the
fields a card's character_book gives (keys, name, content, constant, order, case, whole words),
and bot/characters/lore.py then reads it like any lore file.

A field Écho cannot honour (secondary keys, probability, inclusion groups, timed effects, ...)
is refused with its name when the entry uses it: dropping it in silence would fire the entry
where its author meant it not to, or never. Fields that only say where SillyTavern inserts the
text (Écho has one lore block) or how it recurses (Écho never scans lore for more lore) are inert.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.errors import LoreError

# Fields read into Écho's entry.
_READ = frozenset({"key", "keysecondary", "selective", "comment", "content", "constant", "order", "disable",
                   "caseSensitive", "matchWholeWords", "probability", "useProbability"})
# Fields with nothing to do here, whatever they hold.
_INERT = frozenset({"uid", "displayIndex", "addMemo", "position", "depth", "role", "automationId",
                    "excludeRecursion", "preventRecursion", "selectiveLogic", "groupWeight", "extensions"})
# Features Écho does not have, refused when used.
_FEATURES = {
    "vectorized": "vector matching",
    "group": "inclusion groups",
    "groupOverride": "inclusion groups",
    "useGroupScoring": "inclusion groups",
    "scanDepth": "a scan depth per entry",
    "sticky": "timed effects",
    "cooldown": "timed effects",
    "delay": "timed effects",
    "delayUntilRecursion": "recursion",
    "characterFilter": "character filters",
    "triggers": "generation-type triggers",
    "ignoreBudget": "entries outside the budget",
    "outletName": "outlets",
}
# The book's own keys: the entries, and metadata SillyTavern keeps beside them (originalData is
# the card form of a book imported from a card: the entries are the book).
_BOOK_KEYS = frozenset({"entries", "name", "description", "originalData"})


def is_world_info(document: Mapping[str, Any]) -> bool:
    """World Info keys its entries by uid; Écho's format lists them."""
    return isinstance(document.get("entries"), Mapping)


def _unused(value: Any) -> bool:
    """The value a feature holds when the entry does not use it."""
    if isinstance(value, Mapping):
        return all(_unused(v) for k, v in value.items() if k != "isExclude")
    return value is None or value == 0 or value in ("", [])


def lore_from_world_info(file: Path, document: Mapping[str, Any]) -> dict[str, Any]:
    """The World Info `document` as a lore document of Écho's format; LoreError naming the
    entry and the field Écho cannot honour."""
    extra = sorted(str(k) for k, v in document.items() if k not in _BOOK_KEYS and not _unused(v))
    if extra:
        raise LoreError(f"{file}: unknown World Info key {extra[0]!r}; a World Info file holds entries.")
    entries = []
    for uid, raw in document["entries"].items():
        where = f"{file}: entries[{uid!r}]"
        if not isinstance(raw, Mapping):
            raise LoreError(f"{where} must be a mapping.")
        if raw.get("selective") and raw.get("keysecondary"):
            raise LoreError(
                f"{where}: secondary keys (keysecondary, selective) are not supported: Écho fires an entry "
                "on its keys alone; move them to key, or clear keysecondary."
            )
        if raw.get("useProbability") and raw.get("probability") not in (None, 100):
            raise LoreError(f"{where}: probability {raw.get('probability')} is not supported: an entry fires whenever its keys appear.")
        for name, value in raw.items():
            if name in _READ or name in _INERT or _unused(value):
                continue
            if name in _FEATURES:
                raise LoreError(f"{where}: {name} ({_FEATURES[name]}) is not supported; clear it for Écho.")
            raise LoreError(f"{where}: unknown World Info field {name!r}; clear it for Écho.")
        case, whole = raw.get("caseSensitive"), raw.get("matchWholeWords")
        entries.append(
            {
                "name": raw.get("comment") or f"entry {raw.get('uid', uid)}",
                "keys": raw.get("key") or [],
                "content": raw.get("content"),
                # Empty in World Info: SillyTavern's global setting; Écho's defaults, as for a card.
                "case_sensitive": bool(case) if case is not None else False,
                "whole_words": bool(whole) if whole is not None else True,
                "constant": bool(raw.get("constant") or False),
                "order": raw.get("order", 100),
                "enabled": raw.get("disable") is not True,
            }
        )
    return {"entries": entries}
