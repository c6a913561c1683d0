"""The memory commands in plain text, for the terminal chat: same engine, same wording as Discord."""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from bot.engine import Engine, export_json
from bot.engine.memory_commands import MemoryCommands
from bot.errors import StorageError
from bot.memory.model import MEMORY_TYPES
from bot.presenting import STORAGE_FAILED, memory_pages

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
    run = MemoryCommands(engine)
    if name in ("help", "?"):
        return HELP
    if name == "memories":
        wanted = [a for a in args if a in MEMORY_TYPES]
        memories = await engine.memories(user, types=wanted or None)
        # One page: a terminal has no message size limit.
        return memory_pages(memories, now=engine.clock(), per_page=len(memories) or 1, max_chars=sys.maxsize)[0]
    if name == "remember":
        # The raw rest of the line: shlex would eat the apostrophes of "J'aime l'été".
        text = (line.split(maxsplit=1) + [""])[1]
        return await run.remember(user, text, story_id=session.story_id, place=session.place)
    if name in ("pin", "unpin", "forget", "restore"):
        target = _memory_id(args[0]) if args else None
        if target is None:
            return f"Usage: /{name} <id>"
        if name == "restore":
            return await run.restore(user, target)
        if name == "forget":
            return await run.forget(user, target)
        return await run.pin(user, target, name == "pin")
    if name == "edit":
        # The raw rest of the line, as for /remember.
        _, target_arg, text = (line.split(maxsplit=2) + ["", ""])[:3]
        target = _memory_id(target_arg)
        if target is None or not text.strip():
            return "Usage: /edit <id> <text>"
        return await run.edit(user, target, text)
    if name == "history":
        return await run.history(user)
    if name == "why":
        return await run.why(user, session.story_id)
    if name in ("stats", "memory-stats"):
        return await run.stats(user)
    if name == "share":
        return await run.share(user, args[0] == "on" if args and args[0] in ("on", "off") else None)
    if name == "export":
        if not args:
            return "Usage: /export <file.json>"
        path = Path(args[0]).expanduser()
        data = export_json(await engine.export(user))
        try:
            # Everything stored about the user: a new file readable by them only, whatever the umask.
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "w", encoding="utf-8") as file:
                file.write(data)
        except OSError as exc:
            return f"Cannot write {path}: {exc.strerror or exc}. Nothing was exported; give a file in an existing folder."
        return f"Exported to {path}."
    if name in ("erase-me", "erase"):
        if args != ["yes"]:
            return "This deletes every memory and all history about you, for real. Type /erase-me yes to confirm."
        report = await engine.erase(user)
        return f"Erased: {report.memories} memories and {report.history} archived versions."
    return f"Unknown command /{name}.\n{HELP}"
