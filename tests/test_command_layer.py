"""One command layer (bot/engine/memory_commands.py) for every front end: the terminal and the
Discord cog run the same calls, which return data; the words are the presentation's."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from bot.engine import memory_commands
from bot.engine.memory_commands import MemoryCommands
from bot.terminal.commands import Session, run_command

ROOT = Path(__file__).resolve().parent.parent
FRONT_ENDS = [*sorted((ROOT / "cogs").rglob("*.py")), *sorted((ROOT / "bot" / "terminal").glob("*.py"))]


# The engine's ports the command layer wraps.
PORTS = ("memories", "privacy")


def engine_calls_of_the_layer() -> set[str]:
    """The port methods the command layer calls (self.engine.<port>.<name>(...))."""
    tree = ast.parse((ROOT / "bot" / "engine" / "memory_commands.py").read_text(encoding="utf-8"))
    return {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func.value).split(".")[-2:-1] == ["engine"]
        and ast.unparse(node.func.value).split(".")[-1] in PORTS
    }


# What a front end may still read from the engine itself: the lists its menus are made of.
MENU_READS = {"list", "history", "get"}


def test_no_front_end_calls_what_the_command_layer_wraps():
    wrapped = (engine_calls_of_the_layer() | {"erase", "export"}) - MENU_READS
    assert {"erase_person", "export_person", "remember", "pin", "forget", "why", "stats"} <= wrapped
    found = []
    for path in FRONT_ENDS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in wrapped
                and ast.unparse(node.func.value).split(".")[-2:-1] in (["engine"], ["_engine"])
                and ast.unparse(node.func.value).split(".")[-1] in PORTS
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node.func)}")
    assert not found, "a front end goes round the command layer: " + ", ".join(found)


def test_both_front_ends_use_the_command_layer():
    for name in ("cogs/memory.py", "cogs/utils/views.py", "bot/terminal/commands.py"):
        assert "MemoryCommands" in (ROOT / name).read_text(encoding="utf-8"), name


def test_the_layer_returns_data_and_holds_no_words():
    source = (ROOT / "bot" / "engine" / "memory_commands.py").read_text(encoding="utf-8")
    assert "bot.i18n" not in source and "bot.presenting" not in source
    for answer in memory_commands.Answer.__args__:  # type: ignore[attr-defined]
        assert dataclasses.is_dataclass(answer), answer


class Recorder:
    """Records which command-layer method each terminal line runs, and runs it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in (
            "memories",
            "remember",
            "pin",
            "forget",
            "restore",
            "edit",
            "history",
            "why",
            "stats",
            "share",
            "export",
            "erase",
        ):
            original = getattr(MemoryCommands, name)

            async def recorded(self_, *args, __name=name, __original=original, **kwargs):
                self.calls.append(__name)
                return await __original(self_, *args, **kwargs)

            monkeypatch.setattr(MemoryCommands, name, recorded)


async def test_each_terminal_command_runs_the_layers_command(db, http, llm_server, tmp_path, monkeypatch):
    from tests.builders import make_engine

    engine = make_engine(db, http, llm_server, tmp_path)
    await engine.start()
    erased: list[str] = []
    erase_person = engine.privacy.erase_person

    async def spy(person: str):
        erased.append(person)
        return await erase_person(person)

    monkeypatch.setattr(engine.privacy, "erase_person", spy)
    recorder = Recorder(monkeypatch)
    session = Session(user_id="terminal:alice", user_name="alice", story_id="terminal:main", place="terminal")
    lines = {
        "/remember J'aime la mer.": "remember",
        "/memories": "memories",
        "/pin 1": "pin",
        "/forget 1": "forget",
        "/restore 1": "restore",
        "/edit 1 J'aime le vent.": "edit",
        "/history": "history",
        "/why": "why",
        "/memory-stats": "stats",
        "/share": "share",
        f"/export {tmp_path / 'me.json'}": "export",
        "/erase-me yes": "erase",
    }
    try:
        for line, command in lines.items():
            recorder.calls.clear()
            await run_command(engine, session, line)
            assert recorder.calls == [command], line
    finally:
        await engine.close(timeout=5)
    assert erased == ["terminal:alice"], "the terminal erases the person, as Discord's /erase-me does"
