"""Static check of the rooms by role: who may import whom, read from the source with `ast`.

- the core (the engine and its parts, prompting, characters, presenting, lore, cast, i18n and
  bot/memory/) never imports discord, a front end or the composition root;
- the clients (bot/clients/) never import the core, a front end or the composition;
- the front ends (cogs/, bot/terminal/, bot/web/) reach memory through the engine only: never
  the database client, a store, the indexer, or the composition root;
- bot/engine.py stays a small facade: under 400 lines, and no SQL call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CORE_FILES = (
    "bot/engine.py",
    "bot/prompting.py",
    "bot/character.py",
    "bot/presenting.py",
    "bot/lore.py",
    "bot/cast.py",
    "bot/i18n.py",
    "bot/quoting.py",
    # The engine's parts.
    "bot/context.py",
    "bot/events.py",
    "bot/llm_calls.py",
    "bot/consolidation_worker.py",
    "bot/turn.py",
    "bot/open_exchanges.py",
    "bot/reflection_worker.py",
    "bot/memory_commands.py",
)
CORE_DIRS = ("bot/memory",)
CLIENT_DIRS = ("bot/clients",)
FRONT_END_DIRS = ("cogs", "bot/terminal", "bot/web")
COMPOSITION = ("bot.app", "bot.__main__", "bot.config")
FRONT_ENDS = ("discord", "cogs", "bot.terminal", "bot.web")

# What each room may not import (a module, or any module under it).
CORE_FORBIDDEN = (*FRONT_ENDS, "bot.app", "bot.__main__")
CLIENT_FORBIDDEN = (
    *FRONT_ENDS,
    *COMPOSITION,
    "bot.memory",
    *(f"bot.{Path(f).stem}" for f in CORE_FILES),
)
FRONT_END_FORBIDDEN = ("bot.clients.db", "bot.memory.indexing", "bot.app", "bot.__main__")
SQL_CALLS = frozenset({"fetch_all", "fetch_one", "execute", "executemany", "executescript", "to_db"})
ENGINE_MAX_LINES = 400


def _files(dirs: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> list[Path]:
    found = [ROOT / f for f in files]
    for folder in dirs:
        found += sorted((ROOT / folder).rglob("*.py"))
    return found


def _imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """Every module the file imports, with its line: `import a.b`, `from a.b import c` (as
    a.b and a.b.c, since c may be a module), relative imports resolved from the file's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = path.relative_to(root).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ((node.module,) if node.module else ()))
            else:
                base = node.module or ""
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _named(module: str, forbidden: tuple[str, ...]) -> str | None:
    for name in forbidden:
        if module == name or module.startswith(name + "."):
            return name
    return None


def _is_store(module: str) -> bool:
    """bot.memory.<something>_store, or bot.memory.store itself."""
    parts = module.split(".")
    return len(parts) >= 3 and parts[:2] == ["bot", "memory"] and (parts[2] == "store" or parts[2].endswith("_store"))


def _violations(paths: list[Path], forbidden: tuple[str, ...], *, stores: bool = False) -> list[str]:
    found: dict[str, str] = {}
    for path in paths:
        for line, module in _imports(path):
            name = _named(module, forbidden)
            if name is None and stores and _is_store(module):
                name = "a store"
            if name is not None:
                found.setdefault(f"{path.relative_to(ROOT)}:{line}", f"imports {module} ({name})")
    return sorted(f"{where} {what}" for where, what in found.items())


def test_the_core_imports_no_front_end_and_no_composition() -> None:
    assert _violations(_files(CORE_DIRS, CORE_FILES), CORE_FORBIDDEN) == []


def test_the_clients_import_neither_the_core_nor_front_ends_nor_composition() -> None:
    assert _violations(_files(CLIENT_DIRS), CLIENT_FORBIDDEN) == []


def test_the_front_ends_reach_memory_through_the_engine_only() -> None:
    assert _violations(_files(FRONT_END_DIRS), FRONT_END_FORBIDDEN, stores=True) == []


def test_the_engine_is_a_small_facade_without_sql() -> None:
    source = (ROOT / "bot/engine.py").read_text(encoding="utf-8")
    assert len(source.splitlines()) < ENGINE_MAX_LINES
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in SQL_CALLS:
                calls.append(f"line {node.lineno}: {name}")
    assert calls == []


@pytest.mark.parametrize(
    ("module", "forbidden", "stores", "expected"),
    [
        ("bot.memory.story_store", FRONT_END_FORBIDDEN, True, True),
        ("bot.memory.store", FRONT_END_FORBIDDEN, True, True),
        ("bot.memory.model", FRONT_END_FORBIDDEN, True, False),
        ("bot.clients.db", FRONT_END_FORBIDDEN, False, True),
        ("bot.clients.dbx", FRONT_END_FORBIDDEN, False, False),
        ("discord.ext.commands", CORE_FORBIDDEN, False, True),
        ("bot.memory.recall", CLIENT_FORBIDDEN, False, True),
        ("bot.engine", CLIENT_FORBIDDEN, False, True),
        ("bot.errors", CLIENT_FORBIDDEN, False, False),
    ],
)
def test_the_check_names_what_it_should(module: str, forbidden: tuple[str, ...], stores: bool, expected: bool) -> None:
    hit = _named(module, forbidden) is not None or (stores and _is_store(module))
    assert hit is expected


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    # A front end writing `from ..memory import story_store` is caught like the absolute import.
    sample = tmp_path / "bot" / "web" / "sample.py"
    sample.parent.mkdir(parents=True)
    sample.write_text("from ..memory import story_store\nfrom . import views\n", encoding="utf-8")
    assert [m for _, m in _imports(sample, tmp_path)] == ["bot.memory", "bot.memory.story_store", "bot.web", "bot.web.views"]


def test_no_front_end_schedules_a_reflection() -> None:
    # The turn schedules its own: a front end that forgot to would leave memories unwritten.
    calls = []
    for path in _files(FRONT_END_DIRS):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "schedule_reflection":
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert calls == []


# Modules of bot/ that are neither core, client nor front end, each with its room.
OTHER_ROOMS = {
    "bot/__init__.py": "package",
    "bot/__main__.py": "composition",
    "bot/app.py": "composition",
    "bot/config.py": "composition",
    "bot/kinds.py": "composition (leaf: the kinds of server a setting names)",
    "bot/errors.py": "errors (leaf)",
}


def test_every_module_has_a_room() -> None:
    """A new module must be placed in a room, or the rules above would not look at it."""
    rooms: dict[str, list[str]] = {}
    for path in _files(CORE_DIRS + CLIENT_DIRS + FRONT_END_DIRS, CORE_FILES):
        rooms.setdefault(str(path.relative_to(ROOT)), []).append("checked")
    for name in OTHER_ROOMS:
        rooms.setdefault(name, []).append("listed")
    every = {str(p.relative_to(ROOT)) for folder in ("bot", "cogs") for p in (ROOT / folder).rglob("*.py")}
    unplaced = sorted(every - rooms.keys())
    twice = sorted(name for name, found in rooms.items() if len(found) > 1)
    assert not unplaced, f"modules in no room (add them to CORE_FILES or OTHER_ROOMS): {unplaced}"
    assert not twice, f"modules in two rooms: {twice}"


MODULE_MAX_LINES = 450


def test_a_long_module_says_why_in_its_docstring() -> None:
    """Past ~450 lines a module is split at a natural seam, or its docstring says why not."""
    silent = []
    for folder in ("bot", "cogs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            if source.count("\n") <= MODULE_MAX_LINES:
                continue
            docstring = ast.get_docstring(ast.parse(source)) or ""
            if "on purpose" not in docstring:
                silent.append(f"{path.relative_to(ROOT)} ({source.count(chr(10))} lines)")
    assert not silent, f"long modules that do not say why (add 'Over 450 lines on purpose: …'): {silent}"
