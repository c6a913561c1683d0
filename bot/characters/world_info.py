"""SillyTavern's lorebooks, read as SillyTavern reads them: a World Info file (its `entries`
keyed by uid, or listed, as some exporters write them), a card's `character_book` (V2 and V3),
a `lorebook_v3` file, and the three formats SillyTavern converts on import (Agnai's memory book,
NovelAI's lorebook, Risu's). One entry reader serves them all.

Every field SillyTavern or a common exporter writes is accepted, under its World Info name
(`keysecondary`, `matchWholeWords`), its card name (`secondary_keys`, `insertion_order`,
`extensions.match_whole_words`) or the snake_case spelling some exporters use: the name is
compared without case and underscores. A field Écho does not act on is ignored, never refused:
its name is logged once per file and `make doctor` lists it (README, "Lore": the table of what is
supported). Empty entries and entries without keys are skipped, as they never fire.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bot.characters.lore import CHARS_PER_TOKEN, DEFAULT_DEPTH, LOGICS, LoreEntry, Position
from bot.characters.lore_entries import MAX_ENTRIES, Reading, build_entry, compile_keys, depth_of, keys_of
from bot.characters.lorebook import Lorebook
from bot.errors import LoreError

log = logging.getLogger(__name__)

# SillyTavern's insertion positions (world_info_position) → where Écho's prompt puts them: before
# the character's description; in the lore block after the character (after its description,
# the example messages' two places, and the author's note's two places, which Écho does not
# have); at a depth among the recent messages. 7 (an outlet) has no place: never inserted.
_POSITIONS: dict[int, Position] = {0: "before", 1: "after", 2: "depth", 3: "depth", 4: "depth", 5: "after", 6: "after"}
_CARD_POSITIONS: dict[str, Position] = {"before_char": "before", "after_char": "after"}
# SillyTavern's author's note sits this deep in the chat by default: its two positions go there.
_AUTHORS_NOTE_DEPTH = 4
_OUTLET = 7
# Entry fields that change nothing in the prompt, in SillyTavern either.
_INERT = frozenset({"uid", "id", "displayindex", "addmemo", "extensions", "comment", "name", "memo"})
# Fields read, under every spelling (lower case, no underscore).
_READ = frozenset({
    "key", "keys", "keysecondary", "secondarykeys", "content", "constant", "selective", "selectivelogic",
    "order", "insertionorder", "priority", "position", "depth", "disable", "enabled", "probability",
    "useprobability", "group", "groupoverride", "groupweight", "scandepth", "casesensitive",
    "matchwholewords", "excluderecursion", "preventrecursion", "delayuntilrecursion", "sticky",
    "cooldown", "delay", "characterfilter", "triggers", "ignorebudget", "role", "useregex",
    "matchcharacterdescription", "matchcharacterpersonality", "matchscenario",
    "matchcharacterdepthprompt", "matchcreatornotes", "usegroupscoring",
})  # fmt: skip
# Fields with an effect in SillyTavern that Écho has not: ignored (named) when set.
_UNSUPPORTED = {
    "vectorized": "vectorized (matching by embeddings)",
    "automationid": "automationId (Quick Reply scripts)",
    "outletname": "outletName (outlets)",
    "matchpersonadescription": "matchPersonaDescription (Écho has no persona)",
}
_SOURCES = {
    "matchcharacterdescription": "description",
    "matchcharacterpersonality": "personality",
    "matchscenario": "scenario",
    "matchcharacterdepthprompt": "depth_prompt",
    "matchcreatornotes": "creator_notes",
}
_BOOK_READ = frozenset({"entries", "scandepth", "tokenbudget", "recursivescanning"})
_BOOK_INERT = frozenset({"name", "description", "originaldata", "extensions", "spec", "specversion"})


def is_world_info(document: Mapping[str, Any]) -> bool:
    """A SillyTavern lorebook (any of the forms above), not Écho's own format (a list of
    entries with `name` and `keys`, and `budget_chars`)."""
    if document.get("spec") == "lorebook_v3" or document.get("kind") == "memory" or document.get("type") == "risu":
        return True
    if "lorebookVersion" in document:
        return True
    entries = document.get("entries")
    if isinstance(entries, Mapping):
        return True
    return isinstance(entries, list) and any(isinstance(e, Mapping) and ("key" in e or "uid" in e) for e in entries)


def book_from_world_info(reading: Reading, document: Mapping[str, Any]) -> Lorebook:
    """A World Info file (or one of the forms SillyTavern converts) as a Lorebook."""
    if document.get("spec") == "lorebook_v3" and isinstance(document.get("data"), Mapping):
        return book_from_card(reading, document["data"], where="data")
    document = _converted(document)
    return _book(reading, document, document.get("entries"), "entries")


def book_from_card(reading: Reading, book: Any, *, where: str = "data.character_book") -> Lorebook:
    """A card's `character_book` as a Lorebook."""
    if not isinstance(book, Mapping):
        raise LoreError(f"{reading.file}: {where} must be a mapping.")
    return _book(reading, book, book.get("entries"), f"{where}.entries")


def _book(reading: Reading, book: Mapping[str, Any], raw_entries: Any, where: str) -> Lorebook:
    if isinstance(raw_entries, Mapping):
        raw_entries = list(raw_entries.items())
    elif isinstance(raw_entries, list):
        raw_entries = list(enumerate(raw_entries))
    elif raw_entries is None:
        raw_entries = []
    else:
        raise LoreError(f"{reading.file}: {where} must be a list or a mapping of entries.")
    if len(raw_entries) > MAX_ENTRIES:
        raise LoreError(f"{reading.file}: {len(raw_entries)} entries, at most {MAX_ENTRIES}.")
    fields = _spellings(book)
    for name, spelled in fields.items():
        if name not in _BOOK_READ and name not in _BOOK_INERT:
            reading.ignore(spelled)
    entries = []
    for uid, raw in raw_entries:
        entry = _entry(reading, f"{reading.file}: {where}[{uid!r}]", raw, uid)
        if entry is not None:
            entries.append(entry)
    budget = _value(book, fields, "tokenbudget")
    depth = _value(book, fields, "scandepth")
    recursive = _value(book, fields, "recursivescanning")
    return Lorebook(
        entries,
        budget_chars=budget * CHARS_PER_TOKEN if _whole(budget) and budget > 0 else None,
        scan_depth=depth if _whole(depth) and depth >= 0 else None,
        recursive=recursive if isinstance(recursive, bool) else True,
        ignored=tuple(reading.ignored),
    )


def _entry(reading: Reading, where: str, raw: Any, uid: object) -> LoreEntry | None:
    """One entry in any of SillyTavern's vocabularies; None when it can never fire."""
    if not isinstance(raw, Mapping):
        raise LoreError(f"{where} must be a mapping.")
    # A card's entry keeps SillyTavern's own fields in `extensions`; the entry's own win.
    extensions: Mapping[str, Any] = raw["extensions"] if isinstance(raw.get("extensions"), Mapping) else {}
    merged = {**extensions, **{k: v for k, v in raw.items() if k != "extensions"}}
    fields = _spellings(merged)

    def get(name: str, default: Any = None) -> Any:
        value = _value(merged, fields, name)
        return default if value is None else value

    for name, spelled in fields.items():
        if name in _UNSUPPORTED:
            if _set(merged[spelled]):
                reading.ignore(_UNSUPPORTED[name])
        elif name not in _READ and name not in _INERT:
            reading.ignore(spelled)
    if get("disable") is True or (fields.get("disable") is None and get("enabled") is False):
        return None
    content = get("content", "")
    if not isinstance(content, str):
        raise LoreError(f"{where}: content must be a non-empty text.")
    if not content.strip():
        return None
    position = _position(get("position"), reading)
    if (
        position is None
        or not _for_this_character(get("characterfilter"), reading)
        or not _triggered(get("triggers"), reading)
    ):
        return None
    case = get("casesensitive")
    case_sensitive = bool(case) if case is not None else False
    whole = get("matchwholewords")
    use_regex = get("useregex") is True
    keys = compile_keys(
        where,
        keys_of(where, get("keys", get("key")), split_commas=True),
        case_sensitive=case_sensitive,
        st=True,
        use_regex=use_regex,
        reading=reading,
    )
    selective = get("selective", True) is not False
    secondary_raw = keys_of(where, get("secondarykeys", get("keysecondary")), split_commas=True) if selective else []
    secondary = compile_keys(
        where, secondary_raw, case_sensitive=case_sensitive, st=True, use_regex=use_regex, reading=reading
    )
    constant = get("constant") is True
    if not constant and not keys[0] and not keys[1] and not content.lstrip().startswith("@@"):
        return None
    name = get("comment") or get("name") or get("memo")
    role = get("role")
    if role not in (None, 0, "system"):
        reading.ignore("role (lore goes in as the system's text)")
    groups = get("group", "")
    probability = get("probability")
    depth = depth_of(get("depth"))
    if get("position") in (2, 3):
        depth = _AUTHORS_NOTE_DEPTH
    return build_entry(
        where,
        reading,
        name=str(name) if isinstance(name, (str, int)) and str(name).strip() else _first_key(keys, uid),
        content=content,
        keys=keys,
        secondary=secondary,
        logic=_logic(get("selectivelogic")),
        case_sensitive=case_sensitive,
        whole_words=bool(whole) if whole is not None else True,
        constant=constant,
        order=_int(get("order", get("insertionorder")), 100),
        priority=_int(get("priority"), 0),
        position=position,
        depth=depth if position == "depth" else DEFAULT_DEPTH,
        probability=max(0, min(100, _int(probability, 100))) if get("useprobability", True) is not False else 100,
        scan_depth=get("scandepth") if _whole(get("scandepth")) else None,
        groups=tuple(g.strip() for g in groups.split(",") if g.strip()) if isinstance(groups, str) else (),
        group_override=get("groupoverride") is True,
        group_weight=_int(get("groupweight"), 100),
        group_scoring=get("usegroupscoring") is True,
        sticky=max(0, _int(get("sticky"), 0)),
        cooldown=max(0, _int(get("cooldown"), 0)),
        delay=max(0, _int(get("delay"), 0)),
        exclude_recursion=get("excluderecursion") is True,
        prevent_recursion=get("preventrecursion") is True,
        delay_until_recursion=_recursion_level(get("delayuntilrecursion")),
        ignore_budget=get("ignorebudget") is True,
        sources=tuple(
            reading.sources.get(source, "")
            for name, source in _SOURCES.items()
            if get(name) is True and reading.sources.get(source)
        ),
    )


# --- the fields -----------------------------------------------------------------------------


def _spellings(raw: Mapping[str, Any]) -> dict[str, str]:
    """Each field's name as compared (lower case, no underscore) → as written."""
    names: dict[str, str] = {}
    for written in raw:
        names.setdefault(str(written).lower().replace("_", ""), str(written))
    return names


def _value(raw: Mapping[str, Any], fields: Mapping[str, str], name: str) -> Any:
    written = fields.get(name)
    return raw.get(written) if written is not None else None


def _set(value: Any) -> bool:
    """Whether a field holds something other than its neutral value."""
    return value not in (None, False, 0, "", [], {})


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, default: int) -> int:
    if _whole(value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return default


def _logic(value: Any) -> Any:
    number = _int(value, 0)
    return LOGICS[number] if 0 <= number < len(LOGICS) else LOGICS[0]


def _recursion_level(value: Any) -> int:
    if value is True:
        return 1
    number = _int(value, 0) if value is not False else 0
    return max(0, number)


def _position(value: Any, reading: Reading) -> Position | None:
    if isinstance(value, str) and value in _CARD_POSITIONS:
        return _CARD_POSITIONS[value]
    number = _int(value, 0) if value is not None else 0
    if number == _OUTLET:
        reading.ignore("position 7 (an outlet: entries never inserted)")
        return None
    return _POSITIONS.get(number, "after")


def _for_this_character(value: Any, reading: Reading) -> bool:
    """SillyTavern's character filter, by the character's key (its file's name) or name."""
    if not isinstance(value, Mapping):
        return True
    if value.get("tags"):
        reading.ignore("characterFilter.tags (Écho has no tags)")
    names = value.get("names")
    if not isinstance(names, list) or not names:
        return True
    named = reading.char_key in names or reading.char in names
    return not named if value.get("isExclude") is True else named


def _triggered(value: Any, reading: Reading) -> bool:
    """SillyTavern's generation types: Écho's turns are normal ones."""
    if not isinstance(value, list) or not value:
        return True
    if "normal" not in value:
        reading.ignore("triggers without normal (such entries never fire in Écho)")
        return False
    return True


def _first_key(keys: tuple[tuple[str, ...], tuple[Any, ...]], uid: object) -> str:
    """An unnamed entry is named by its first key, as SillyTavern's "Fill empty memos" does."""
    plain, patterns = keys
    if plain:
        return plain[0]
    if patterns:
        return f"/{patterns[0].pattern}/"
    return f"#{uid}"


def _converted(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """Agnai's, NovelAI's and Risu's lorebooks as the World Info SillyTavern converts them into
    on import (world-info.js, convertAgnaiMemoryBook, convertNovelLorebook, convertRisuLorebook)."""
    if document.get("kind") == "memory" and isinstance(document.get("entries"), list):
        return {
            "entries": [
                {
                    "key": e.get("keywords"),
                    "comment": e.get("name"),
                    "content": e.get("entry"),
                    "order": e.get("weight"),
                    "disable": not e.get("enabled", True),
                    "selective": False,
                }
                for e in document["entries"]
                if isinstance(e, Mapping)
            ]
        }
    if "lorebookVersion" in document and isinstance(document.get("entries"), list):
        return {
            "entries": [
                {
                    "key": e.get("keys"),
                    "comment": e.get("displayName") or "",
                    "content": e.get("text"),
                    "order": (e.get("contextConfig") or {}).get("budgetPriority", 0)
                    if isinstance(e.get("contextConfig"), Mapping)
                    else 0,
                    "disable": not e.get("enabled", True),
                    "selective": False,
                }
                for e in document["entries"]
                if isinstance(e, Mapping)
            ]
        }
    if document.get("type") == "risu" and isinstance(document.get("data"), list):
        return {
            "entries": [
                {
                    "key": e.get("key") or "",
                    "keysecondary": e.get("secondkey") or "",
                    "comment": e.get("comment"),
                    "content": e.get("content"),
                    "constant": e.get("alwaysActive") is True,
                    "selective": e.get("selective") is True,
                    "order": e.get("insertorder"),
                    "probability": e.get("activationPercent", 100),
                }
                for e in document["data"]
                if isinstance(e, Mapping)
            ]
        }
    return document


def log_ignored(reading: Reading) -> None:
    """One line per file naming what it holds that Écho does not act on."""
    if reading.ignored:
        log.info("lore %s: ignored (Écho does not act on them): %s", reading.file, ", ".join(reading.ignored))
