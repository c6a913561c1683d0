"""What every lore reader shares: the bounds, keys compiled, content decorators, one entry built.

Both readers (bot/characters/lore_files.py for Écho's own format, bot/characters/world_info.py
for SillyTavern's) hand `build_entry` the fields they read; it checks them, compiles the keys
and gives the `LoreEntry`. A lorebook comes from anywhere: every size is bounded here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from bot.characters.lore import DEFAULT_DEPTH, LOGICS, LoreEntry, Position
from bot.characters.macros import at_load
from bot.errors import LoreError

# A lorebook of a few thousand entries is already a large world; these stop a file built to
# make each turn's scan or the start-up slow (its bytes: bot.clients.outside_files.LORE_FILE).
MAX_ENTRIES = 5_000
MAX_KEYS_PER_ENTRY = 200
MAX_KEY_CHARS = 500
# Recent messages an entry may scan (SillyTavern's own limit is 1,000).
MAX_SCAN_DEPTH = 1_000

# Écho's own keys: "/pattern/flags", Python's flags; case from the entry.
_ECHO_REGEX = re.compile(r"^/(?P<pattern>.+)/(?P<flags>[imsux]*)$", re.DOTALL)
# SillyTavern's: "/pattern/flags", JavaScript's flags, no unescaped "/" inside; the flags alone
# decide the case (SillyTavern's parseRegexFromString).
_ST_REGEX = re.compile(r"^/(?P<pattern>[\w\W]+?)/(?P<flags>[dgimsuyv]*)$")
_ST_UNESCAPED_SLASH = re.compile(r"(^|[^\\])/")
_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL, "x": regex.VERBOSE}
_DECORATOR = re.compile(r"^@@(?P<fallback>@?)(?P<name>[a-z_]+)\s*(?P<value>.*)$")


@dataclass(slots=True)
class Reading:
    """One lore file being read: what the character gives it, and what was ignored in it."""

    file: Path
    char: str = ""  # the character's name, for {{char}}
    char_key: str = ""  # the character's key (file stem), for SillyTavern's character filter
    # The character's texts an entry may scan besides the messages, by SillyTavern's names.
    sources: Mapping[str, str] = field(default_factory=dict)
    ignored: dict[str, None] = field(default_factory=dict)

    def ignore(self, what: str) -> None:
        self.ignored.setdefault(what, None)


def keys_of(where: str, raw: Any, *, split_commas: bool = False) -> list[str]:
    """A list of key texts; a text alone is one key (or, `split_commas`, a comma list, as
    SillyTavern's plain-text key field)."""
    if raw is None:
        return []
    if isinstance(raw, str):
        if split_commas and not _ST_REGEX.match(raw.strip()):
            return [k.strip() for k in raw.split(",") if k.strip()]
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise LoreError(f"{where}: keys must be a list of texts.")
    if len(raw) > MAX_KEYS_PER_ENTRY:
        raise LoreError(f"{where}: {len(raw)} keys, at most {MAX_KEYS_PER_ENTRY}.")
    keys = [k.strip() for k in raw if k.strip()]
    for key in keys:
        if len(key) > MAX_KEY_CHARS:
            raise LoreError(f"{where}: a key of {len(key)} characters, at most {MAX_KEY_CHARS}.")
    return keys


def compile_keys(
    where: str,
    keys: list[str],
    *,
    case_sensitive: bool,
    st: bool,
    use_regex: bool = False,
    reading: Reading | None = None,
) -> tuple[tuple[str, ...], tuple[regex.Pattern[str], ...]]:
    """(plain keys, regex keys). Écho's "/…/imsux" keys follow the entry's case, and an invalid
    one is refused; SillyTavern's "/…/gimsuy" keys only their flags, and an invalid one is a
    plain key, as in SillyTavern (named in `reading`); a V3 book's `use_regex` makes every key a
    pattern."""
    plain: list[str] = []
    patterns: list[regex.Pattern[str]] = []
    for key in keys:
        if "{{" in key and reading is not None:
            # SillyTavern puts a key's macros in before matching: `{{char}}` is known at load;
            # one that depends on the turn (`{{user}}`) cannot be looked for ahead of it.
            key, _ = at_load(key, char=reading.char)
            if "{{" in key:
                reading.ignore(f"key {key!r} (a macro of the turn: matched as written)")
        written = (_ST_REGEX if st else _ECHO_REGEX).match(key)
        if st and written is not None and _ST_UNESCAPED_SLASH.search(written["pattern"]):
            written = None
        if written is None and not use_regex:
            plain.append(key)
            continue
        source, letters = (written["pattern"].replace("\\/", "/"), written["flags"]) if written else (key, "")
        flags = 0 if st or case_sensitive else regex.IGNORECASE
        for letter in letters:
            flags |= _FLAGS.get(letter, 0)
        try:
            patterns.append(regex.compile(source, flags))
        except (regex.error, OverflowError, RecursionError) as exc:
            if not st or reading is None:
                raise LoreError(f"{where}: invalid regular expression {key!r}: {exc}.") from None
            reading.ignore(f"key {key!r} (not a valid regular expression: matched as plain text)")
            plain.append(key)
    return tuple(plain), tuple(patterns)


def decorators(content: str, reading: Reading) -> tuple[str, dict[str, str]]:
    """The content without its leading `@@decorator` lines, and the decorators Écho reads
    (activate, dont_activate, depth, scan_depth, position); a `@@@` line is the fallback of the
    one above it, read when that one is not."""
    lines = content.split("\n")
    found: dict[str, str] = {}
    known = ("activate", "dont_activate", "depth", "scan_depth", "position")
    previous_read = True
    at = 0
    for at, line in enumerate(lines):  # noqa: B007 (`at` is the first content line after the loop)
        parsed = _DECORATOR.match(line.strip())
        if parsed is None:
            break
        if parsed["fallback"] and previous_read:
            continue
        name = parsed["name"]
        previous_read = name in known
        if previous_read:
            found.setdefault(name, parsed["value"].strip())
        else:
            reading.ignore(f"@@{name}")
    else:
        at = len(lines)
    return "\n".join(lines[at:]), found


def build_entry(
    where: str,
    reading: Reading,
    *,
    name: str,
    content: Any,
    keys: tuple[tuple[str, ...], tuple[regex.Pattern[str], ...]],
    secondary: tuple[tuple[str, ...], tuple[regex.Pattern[str], ...]] = ((), ()),
    **fields: Any,
) -> LoreEntry:
    """The entry, its content read for macros and decorators; LoreError naming `where`."""
    if not isinstance(content, str) or not content.strip():
        raise LoreError(f"{where}: content must be a non-empty text.")
    text, found = decorators(content, reading)
    text, unknown = at_load(text, char=reading.char)
    for macro in sorted(unknown):
        reading.ignore(f"{{{{{macro}}}}}")
    if found.get("depth", "").lstrip("-").isdigit():
        fields["position"], fields["depth"] = "depth", max(0, int(found["depth"]))
    if found.get("scan_depth", "").isdigit():
        fields["scan_depth"] = int(found["scan_depth"])
    if found.get("position") in ("before_desc", "after_desc"):
        fields["position"] = "before" if found["position"] == "before_desc" else "after"
    plain, patterns = keys
    if not plain and not patterns and not fields.get("constant") and "activate" not in found:
        raise LoreError(f"{where}: an entry needs keys, or constant: true.")
    for number in ("order", "priority", "depth", "probability", "group_weight", "sticky", "cooldown", "delay"):
        value = fields.get(number)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise LoreError(f"{where}: {number} must be a whole number.")
    if fields.get("logic", "and_any") not in LOGICS:
        raise LoreError(f"{where}: logic must be one of {', '.join(LOGICS)}.")
    position: Position = fields.pop("position", "after")
    scan_depth = fields.pop("scan_depth", None)
    return LoreEntry(
        name=" ".join(name.split()) or "?",
        content=" ".join(text.split()),
        keys=plain,
        regexes=patterns,
        secondary=secondary[0],
        secondary_regexes=secondary[1],
        position=position,
        scan_depth=min(scan_depth, MAX_SCAN_DEPTH) if isinstance(scan_depth, int) and scan_depth >= 0 else None,
        always="activate" in found,
        never="dont_activate" in found and "activate" not in found,
        **{k: v for k, v in fields.items() if v is not None},
    )


def depth_of(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else DEFAULT_DEPTH
