"""A character's `lore:` file: Écho's own format (YAML), or a SillyTavern lorebook (JSON, read
by bot/characters/world_info.py).

Écho's format names the same semantics as SillyTavern's, in its own words; every key is
optional but `content`, and an entry needs `keys` or `constant: true`. A misspelt key is refused
by name: this is Écho's format, a typo must be seen.

    budget_chars: 6000        # LORE_BUDGET_CHARS when absent
    scan_depth: 4             # recent messages besides the one answered; LORE_SCAN_DEPTH when absent
    recursive: true           # entries' contents fire other entries (SillyTavern's default)
    entries:
      - name: The harbour
        keys: [harbour, port, "/quai(s)? d'orsay/i"]   # "/.../flags" is a regular expression
        secondary_keys: [winter]   # with logic: and_any (default), and_all, not_any, not_all
        content: The harbour of Vellmar freezes every winter.
        case_sensitive: false   # default false
        whole_words: true       # default true
        constant: false         # true: always in, keywords or not
        order: 100              # lower first in the block
        priority: 0             # higher kept first when the budget is short
        position: after         # before (the character's description), after, depth
        depth: 4                # with position: depth, messages from the end
        probability: 100        # percent of the turns it fires on
        group: weather          # inclusion groups, comma-separated
        sticky: 0               # turns it stays in after firing; cooldown, delay likewise
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bot.characters.lore import LoreEntry
from bot.characters.lore_entries import (
    MAX_ENTRIES,
    MAX_SCAN_DEPTH,
    Reading,
    build_entry,
    compile_keys,
    keys_of,
)
from bot.characters.lorebook import Lorebook
from bot.characters.world_info import book_from_world_info, is_world_info, log_ignored
from bot.clients.outside_files import LORE_FILE, parse_json, parse_yaml, read_text
from bot.errors import LoreError

ENTRY_KEYS = (
    "name", "keys", "secondary_keys", "logic", "content", "case_sensitive", "whole_words", "constant", "order",
    "priority", "enabled", "position", "depth", "probability", "scan_depth", "group", "group_override",
    "group_weight", "group_scoring", "sticky", "cooldown", "delay", "exclude_recursion", "prevent_recursion",
    "delay_until_recursion", "ignore_budget",
)  # fmt: skip
BOOK_KEYS = ("budget_chars", "scan_depth", "recursive", "entries")
_POSITIONS = ("before", "after", "depth")


def load_lore_file(path: str | Path, *, reading: Reading | None = None) -> Lorebook:
    """The lorebook in `path`; `reading` carries what the character gives it (its name...)."""
    file = Path(path)
    reading = reading or Reading(file)
    reading.file = file
    document = _parse(file)
    if isinstance(document, list):
        document = {"entries": document}
    if not isinstance(document, Mapping):
        raise LoreError(f"{file}: expected a mapping with entries (or a list of entries).")
    if is_world_info(document):
        book = book_from_world_info(reading, document)
        log_ignored(reading)
        return book
    return _native(reading, document)


def _parse(file: Path) -> Any:
    """Read by the one guarded reader (bot/clients/outside_files.py), as the character file that
    names it: a FIFO or a device refused, the size and what the document expands to bounded."""
    # Line endings normalised first: a file saved on Windows reads as the same file.
    text = read_text(file, LORE_FILE).replace("\r\n", "\n").replace("\r", "\n")
    if file.suffix.lower() == ".json":
        return parse_json(file, text, LORE_FILE)
    return parse_yaml(file, text, LORE_FILE)


def _native(reading: Reading, document: Mapping[str, Any]) -> Lorebook:
    file = reading.file
    unknown = [str(k) for k in document if k not in BOOK_KEYS]
    if unknown:
        raise LoreError(f"{file}: unknown key {unknown[0]!r}; the keys are {', '.join(BOOK_KEYS)}.")
    raw_entries = document.get("entries") or []
    if not isinstance(raw_entries, list):
        raise LoreError(f"{file}: entries must be a list.")
    if len(raw_entries) > MAX_ENTRIES:
        raise LoreError(f"{file}: {len(raw_entries)} entries, at most {MAX_ENTRIES}.")
    entries = []
    for index, raw in enumerate(raw_entries):
        where = f"{file}: entries[{index}]"
        if not isinstance(raw, Mapping):
            raise LoreError(f"{where} must be a mapping (keys, content, ...).")
        extra = [str(k) for k in raw if k not in ENTRY_KEYS]
        if extra:
            raise LoreError(f"{where}: unknown key {extra[0]!r}; the keys are {', '.join(ENTRY_KEYS)}.")
        if raw.get("enabled") is False:
            continue
        entries.append(native_entry(where, reading, raw, index))
    scan_depth = _optional_int(file, document, "scan_depth")
    recursive = document.get("recursive", True)
    if not isinstance(recursive, bool):
        raise LoreError(f"{file}: recursive must be true or false.")
    return Lorebook(
        entries,
        budget_chars=_optional_int(file, document, "budget_chars"),
        scan_depth=min(scan_depth + 1, MAX_SCAN_DEPTH) if scan_depth is not None else None,
        recursive=recursive,
    )


def native_entry(where: str, reading: Reading, raw: Mapping[str, Any], index: int) -> LoreEntry:
    """One entry of Écho's format."""
    case_sensitive = bool(raw.get("case_sensitive", False))
    position = raw.get("position", "after")
    if position not in _POSITIONS:
        raise LoreError(f"{where}: position must be one of {', '.join(_POSITIONS)}.")
    group = raw.get("group") or ""
    if not isinstance(group, str):
        raise LoreError(f"{where}: group must be a text.")
    scan_depth = raw.get("scan_depth")
    if scan_depth is not None and (not isinstance(scan_depth, int) or isinstance(scan_depth, bool) or scan_depth < 0):
        raise LoreError(f"{where}: scan_depth must be a whole number ≥ 0.")
    keys = keys_of(where, raw.get("keys"))
    return build_entry(
        where,
        reading,
        # Unnamed, an entry is named by its first key.
        name=str(raw.get("name") or (keys[0] if keys else f"#{index}")),
        content=raw.get("content"),
        keys=compile_keys(where, keys, case_sensitive=case_sensitive, st=False, reading=reading),
        secondary=compile_keys(
            where, keys_of(where, raw.get("secondary_keys")), case_sensitive=case_sensitive, st=False, reading=reading
        ),
        logic=raw.get("logic", "and_any"),
        case_sensitive=case_sensitive,
        whole_words=bool(raw.get("whole_words", True)),
        constant=bool(raw.get("constant", False)),
        order=raw.get("order", 100),
        priority=raw.get("priority", 0),
        position=position,
        depth=raw.get("depth", 4),
        probability=raw.get("probability", 100),
        scan_depth=scan_depth + 1 if scan_depth is not None else None,
        groups=tuple(g.strip() for g in group.split(",") if g.strip()),
        group_override=bool(raw.get("group_override", False)),
        group_weight=raw.get("group_weight", 100),
        group_scoring=bool(raw.get("group_scoring", False)),
        sticky=raw.get("sticky", 0),
        cooldown=raw.get("cooldown", 0),
        delay=raw.get("delay", 0),
        exclude_recursion=bool(raw.get("exclude_recursion", False)),
        prevent_recursion=bool(raw.get("prevent_recursion", False)),
        delay_until_recursion=int(raw.get("delay_until_recursion", 0) or 0),
        ignore_budget=bool(raw.get("ignore_budget", False)),
    )


def _optional_int(file: Path, document: Mapping[str, Any], key: str) -> int | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LoreError(f"{file}: {key} must be a whole number ≥ 0.")
    return value
