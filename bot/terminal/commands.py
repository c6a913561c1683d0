"""The memory commands in plain text, for the terminal chat: same engine, same wording as Discord."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from bot.errors import InvalidMemory, StorageError
from bot.engine import Engine, export_json
from bot.memory.model import MEMORY_TYPES
from bot.memory.story_store import story_history
from bot.presenting import (
    STORAGE_FAILED,
    edit_result,
    forget_result,
    history_text,
    memory_pages,
    not_edited,
    not_remembered,
    pin_result,
    remembered,
    restore_result,
    sharing_text,
    stats_text,
    why_text,
)

HELP = """\
Commands:
  /memories [type]   what I remember about you (type: fact, preference, promise, episode)
  /remember <text>   remember something you tell me explicitly
  /pin <id>          always keep a memory in context      /unpin <id>
  /forget <id>       forget a memory (archived, restorable)
  /edit <id> <text>  rewrite a memory (the old text is archived, restorable)
  /history           archived versions and anchor removals /restore <history id>
  /why               the memories chosen for your last message, and why
  /stats             memory statistics (never-surfaced memories, degraded turns)
  /share on|off      use memories from other places (DMs, other servers) here
  /export <file>     write everything I store about you to a JSON file
  /erase-me yes      delete everything about you, for real
  /quit"""


@dataclass(frozen=True, slots=True)
class Session:
    user_id: str
    user_name: str
    story_id: str
    place: str


# SQLite's largest rowid: a bigger id names nothing, and cannot even be bound to a statement.
MAX_ROW_ID = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,30}")


def _memory_id(arg: str) -> int | None:
    """The id written after a command, or None when it is not a number of ASCII digits."""
    arg = arg.strip().lstrip("#h")
    return int(arg) if _DIGITS.fullmatch(arg) else None


async def run_command(engine: Engine, session: Session, line: str) -> str:
    """Run one `/command` line and return the text to show."""
    try:
        return await _run_command(engine, session, line)
    except StorageError:
        return STORAGE_FAILED


async def _run_command(engine: Engine, session: Session, line: str) -> str:
    try:
        parts = shlex.split(line.strip())
    except ValueError:
        parts = line.strip().split()
    if not parts:
        return HELP
    name, args = parts[0].lstrip("/").lower(), parts[1:]
    user = session.user_id
    if name in ("help", "?"):
        return HELP
    if name == "memories":
        wanted = [a for a in args if a in MEMORY_TYPES]
        memories = await engine.store.list(user, types=wanted or None)
        # One page: a terminal has no message size limit.
        return memory_pages(memories, now=engine.clock(), per_page=len(memories) or 1, max_chars=sys.maxsize)[0]
    if name == "remember":
        # The raw rest of the line: shlex would eat the apostrophes of "J'aime l'été".
        text = (line.split(maxsplit=1) + [""])[1]
        try:
            memory_id = await engine.remember(user, text, story_id=session.story_id, place=session.place)
        except InvalidMemory as exc:
            return not_remembered(exc)
        return remembered(memory_id)
    if name in ("pin", "unpin", "forget", "restore"):
        target = _memory_id(args[0]) if args else None
        if target is None:
            return f"Usage: /{name} <id>"
        exists = target <= MAX_ROW_ID  # a larger id is answered like any id that is not there
        if name == "restore":
            return restore_result(target, await engine.restore(user, target) if exists else None)
        if name == "forget":
            return forget_result(target, exists and await engine.forget(user, target))
        return pin_result(target, name == "pin", exists and await engine.pin(user, target, name == "pin"))
    if name == "edit":
        # The raw rest of the line, as for /remember.
        _, target_arg, text = (line.split(maxsplit=2) + ["", ""])[:3]
        target = _memory_id(target_arg)
        if target is None or not text.strip():
            return "Usage: /edit <id> <text>"
        if target > MAX_ROW_ID:
            return edit_result(target, None)
        try:
            return edit_result(target, await engine.edit_memory(user, target, text))
        except InvalidMemory as exc:
            return not_edited(exc)
    if name == "history":
        entries = await engine.store.history(user)
        return history_text(entries, await story_history(engine.db, user, None, operations=("anchor_removed",)))
    if name == "why":
        return why_text(await engine.why(user, session.story_id))
    if name in ("stats", "memory-stats"):
        return stats_text(await engine.stats(user))
    if name == "share":
        if not args or args[0] not in ("on", "off"):
            return sharing_text(await engine.sharing(user), changed=False)
        await engine.set_sharing(user, args[0] == "on")
        return sharing_text(args[0] == "on", changed=True)
    if name == "export":
        if not args:
            return "Usage: /export <file.json>"
        path = Path(args[0]).expanduser()
        data = export_json(await engine.export(user))
        try:
            path.write_text(data, encoding="utf-8")
        except OSError as exc:
            return f"Cannot write {path}: {exc.strerror or exc}. Nothing was exported; give a file in an existing folder."
        return f"Exported to {path}."
    if name in ("erase-me", "erase"):
        if args != ["yes"]:
            return "This deletes every memory and all history about you, for real. Type /erase-me yes to confirm."
        report = await engine.erase(user)
        return f"Erased: {report.memories} memories and {report.history} archived versions."
    return f"Unknown command /{name}.\n{HELP}"
