"""The memory commands as `/` lines of the terminal chat: parsed here, run by the command layer
every front end uses (bot/engine/memory_commands.py), told by bot/presenting/ in the chat's
language, as Discord tells them."""

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
from bot.i18n import text
from bot.memory.model import MEMORY_TYPES, OwnerKey, StoryId
from bot.presenting import answer, memory_pages, storage_failed


@dataclass(frozen=True, slots=True)
class Session:
    user_id: OwnerKey
    user_name: str
    story_id: StoryId
    place: str


_DIGITS = re.compile(r"[0-9]{1,30}")


def help_text() -> str:
    return text("terminal_help")


def _memory_id(arg: str) -> int | None:
    """The id written after a command, or None when it is not a number of ASCII digits."""
    arg = arg.strip().lstrip("#h")
    return int(arg) if _DIGITS.fullmatch(arg) else None


async def run_command(engine: Engine, session: Session, line: str) -> str:
    """Run one `/command` line and return the text to show."""
    try:
        return await _run_command(engine, session, line)
    except StorageError:
        return storage_failed()


async def _run_command(engine: Engine, session: Session, line: str) -> str:
    try:
        parts = shlex.split(line.strip())
    except ValueError:
        parts = line.strip().split()
    if not parts:
        return help_text()
    name, args = parts[0].lstrip("/").lower(), parts[1:]
    user = session.user_id
    run = MemoryCommands(engine)
    if name in ("help", "?"):
        return help_text()
    if name == "memories":
        memories = await run.memories(user, [a for a in args if a in MEMORY_TYPES])
        # One page: a terminal has no message size limit.
        return memory_pages(memories, now=engine.clock(), per_page=len(memories) or 1, max_chars=sys.maxsize)[0]
    if name == "remember":
        # The raw rest of the line: shlex would eat the apostrophes of "J'aime l'été".
        said = ([*line.split(maxsplit=1), ""])[1]
        return answer(await run.remember(user, said, story_id=session.story_id, place=session.place))
    if name in ("pin", "unpin", "forget", "restore"):
        target = _memory_id(args[0]) if args else None
        if target is None:
            return text("terminal_usage", usage=f"/{name} <id>")
        if name == "restore":
            return answer(await run.restore(user, target))
        if name == "forget":
            return answer(await run.forget(user, target))
        return answer(await run.pin(user, target, name == "pin"))
    if name == "edit":
        # The raw rest of the line, as for /remember.
        _, target_arg, said = ([*line.split(maxsplit=2), "", ""])[:3]
        target = _memory_id(target_arg)
        if target is None or not said.strip():
            return text("terminal_usage", usage="/edit <id> <text>")
        return answer(await run.edit(user, target, said))
    if name == "history":
        return answer(await run.history(user))
    if name == "why":
        return answer(await run.why(user, session.story_id))
    if name in ("stats", "memory-stats"):
        return answer(await run.stats(user))
    if name == "share":
        return answer(await run.share(user, args[0] == "on" if args and args[0] in ("on", "off") else None))
    if name == "followups":
        on = args[0] == "on" if args and args[0] in ("on", "off") else None
        zone = next((a for a in args if a not in ("on", "off")), None)
        return answer(await run.followups(engine.cast.user_of_key(user), on, zone))
    if name == "export":
        if not args:
            return text("terminal_usage", usage="/export <file.json>")
        path = Path(args[0]).expanduser()
        exported = await run.export(engine.cast.user_of_key(user))
        try:
            # Everything stored about the user: a new file readable by them only, whatever the umask.
            with os.fdopen(
                os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "w", encoding="utf-8"
            ) as file:
                file.write(export_json(exported.data))
        except OSError as exc:
            return text("terminal_export_failed", path=str(path), reason=exc.strerror or str(exc))
        return f"{answer(exported)}\n{text('terminal_exported', path=str(path))}"
    if name in ("erase-me", "erase"):
        if args != ["yes"]:
            return text("terminal_erase_confirm")
        return answer(await run.erase(engine.cast.user_of_key(user)))
    return text("terminal_unknown", name=name) + "\n" + help_text()
