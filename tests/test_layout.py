"""Static check of the rooms by role, by folder, read from the source with `ast`:

- the core (bot/engine/, bot/characters/, bot/memory/, bot/presenting/, and bot/i18n.py)
  never imports discord, a front end or the composition root;
- the clients (bot/clients/) never import the core, a front end or the composition;
- the engine, the memory core and the characters never import the catalogue or the
  presentation (bot/i18n.py, bot/presenting/): they answer with data;
- the front ends (cogs/, bot/terminal/, bot/web/) reach memory through the engine only: never
  the database, a store, the indexer, or the composition root;
- SQL lives under bot/memory/stores/ (and the database drivers in bot/clients/): a module that
  runs or holds a statement anywhere else fails, so does a store placed outside stores/;
- no two modules import each other, directly or in a loop;
- under bot/memory/stores/, the only types are rows (dataclasses of column values) and the stores;
- bot/memory/ by path: its root holds the shared vocabulary and imports none of its folders;
  read/ and write/ never import each other; cache/ imports no path that uses it; the reference
  oracles (bot/memory/reference/ and their stable re-exports) are imported by no product module;
- bot/ holds at most 8 modules at its root; no module is longer than 450 lines;
- the engine opens few doors (its ports), none onto its parts, and no test reaches behind them;
  the Discord front end reads its own section of the settings.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Rooms, by folder (a trailing slash) or module file.
CORE = ("bot/engine/", "bot/characters/", "bot/memory/", "bot/presenting/", "bot/i18n.py")
CLIENTS = ("bot/clients/",)
FRONT_ENDS = ("cogs/", "bot/terminal/", "bot/web/")
COMPOSITION = ("bot/__init__.py", "bot/__main__.py", "bot/app.py", "bot/config/", "bot/doctor/", "bot/importer.py")
LEAVES = ("bot/errors.py",)
ROOMS = {"core": CORE, "clients": CLIENTS, "front end": FRONT_ENDS, "composition": COMPOSITION, "leaf": LEAVES}

STORES = "bot/memory/stores/"
# Where SQL may be: the stores, and the drivers that run their statements and the migrations.
SQL_HOMES = (STORES, "bot/clients/")
# bot/'s root holds the composition and the leaves every room shares; a feature is a package.
ROOT_MODULES_MAX = 8
MEMORY = "bot/memory/"
# Stable import paths kept for outside users and benchmarks: they re-export, nothing imports them.
MEMORY_REEXPORTS = ("bot/memory/selection.py", "bot/memory/scoring.py", "bot/memory/dedup.py")
REFERENCE = ("bot.memory.reference", *(p.removesuffix(".py").replace("/", ".") for p in MEMORY_REEXPORTS))
MEMORY_PATHS = ("read", "write", "cache", "story", "consolidation", "reports", "reference")
# What each folder of bot/memory/ may not import: the read and the write path are independent, and
# the cache serves both without knowing either (what it must tell the write path goes through its
# `Follower` protocol).
MEMORY_FOLDER_FORBIDDEN = {
    "bot/memory/read/": ("bot.memory.write", "bot.memory.consolidation", "bot.memory.reports"),
    "bot/memory/write/": ("bot.memory.read", "bot.memory.reports"),
    "bot/memory/cache/": tuple(f"bot.memory.{p}" for p in MEMORY_PATHS if p != "cache"),
    "bot/memory/story/": ("bot.memory.read", "bot.memory.write", "bot.memory.cache", "bot.memory.reports"),
    # Stores run the story's own rules inside their transaction (bot/memory/stores/stories.py).
    "bot/memory/stores/": tuple(f"bot.memory.{p}" for p in MEMORY_PATHS if p != "story"),
}
FACADE = "bot/engine/facade.py"
# The engine's doors: its ports and what every front end needs beside them (start, close, the
# listeners, the cast, the clock, the settings). A part of the engine is never one of them.
ENGINE_PUBLIC_MAX = 20
ENGINE_PARTS = frozenset({"db", "cache", "recall", "store", "tasks", "reflections", "turns", "exchanges", "indexer"})
PORTS = ("bot/engine/conversation.py", "bot/engine/memories.py", "bot/engine/privacy.py", "bot/engine/operator.py")


def _dotted(prefix: str) -> str:
    return prefix.removesuffix("/").removesuffix(".py").replace("/", ".")


# What each room may not import (a module, or any module under it).
FRONT_END_MODULES = ("discord", *map(_dotted, FRONT_ENDS))
COMPOSITION_MODULES = ("bot.app", "bot.__main__")
CORE_FORBIDDEN = (*FRONT_END_MODULES, *COMPOSITION_MODULES)
CLIENT_FORBIDDEN = (*FRONT_END_MODULES, *COMPOSITION_MODULES, "bot.config", *map(_dotted, CORE))
FRONT_END_FORBIDDEN = (
    "bot.clients.db",
    "bot.clients.postgres",
    "bot.clients.databases",
    _dotted(STORES),
    "bot.memory.read.indexing",
    *COMPOSITION_MODULES,
)

SQL_CALLS = frozenset(
    {"fetch_all", "fetch_one", "inserted_id", "execute", "executemany", "execute_fetchall", "executescript"}
)
SQL_TEXT = re.compile(
    r"^\s*(SELECT\b.*\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b", re.DOTALL
)


def _rel(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).as_posix()


def _modules(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in ("bot", "cogs") for p in (root / folder).rglob("*.py"))


def _in(rel: str, room: tuple[str, ...]) -> bool:
    return any(rel.startswith(prefix) if prefix.endswith("/") else rel == prefix for prefix in room)


def _room_files(room: tuple[str, ...]) -> list[Path]:
    return [p for p in _modules() if _in(_rel(p), room)]


def _module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """Every module the file imports, with its line: `import a.b`, `from a.b import c` (as
    a.b and a.b.c, since c may be a module), relative imports resolved from the file's package.
    Imports under `if TYPE_CHECKING:` are annotations only and left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = path.relative_to(root).with_suffix("").parts[:-1]
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typing_only.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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


def _violations(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    found: dict[str, str] = {}
    for path in paths:
        for line, module in _imports(path):
            name = _named(module, forbidden)
            if name is not None:
                found.setdefault(f"{_rel(path)}:{line}", f"imports {module} ({name})")
    return sorted(f"{where} {what}" for where, what in found.items())


def test_the_core_imports_no_front_end_and_no_composition() -> None:
    assert _violations(_room_files(CORE), CORE_FORBIDDEN) == []


def test_the_engine_memory_and_characters_say_nothing_to_a_person() -> None:
    """What a person reads is bot/presenting/'s, in the request's language: the engine answers
    with data (codes, results), never with a text of the catalogue or one of its own."""
    speakers = ("bot/engine/", "bot/memory/", "bot/characters/")
    assert _violations(_room_files(speakers), ("bot.i18n", "bot.presenting")) == []


def test_the_clients_import_neither_the_core_nor_front_ends_nor_composition() -> None:
    assert _violations(_room_files(CLIENTS), CLIENT_FORBIDDEN) == []


def test_the_front_ends_reach_memory_through_the_engine_only() -> None:
    assert _violations(_room_files(FRONT_ENDS), FRONT_END_FORBIDDEN) == []


def test_every_module_has_exactly_one_room() -> None:
    """A new module must be placed in a room, or the rules above would not look at it."""
    placed = {_rel(p): [name for name, room in ROOMS.items() if _in(_rel(p), room)] for p in _modules()}
    assert not [m for m, rooms in placed.items() if not rooms], "modules in no room: add a folder or file to ROOMS"
    assert not [m for m, rooms in placed.items() if len(rooms) > 1], "modules in two rooms"


def test_the_memory_root_is_vocabulary_and_imports_none_of_its_folders() -> None:
    root = [p for p in (ROOT / MEMORY).glob("*.py") if _rel(p) not in MEMORY_REEXPORTS]
    assert _violations(root, tuple(f"bot.memory.{p}" for p in MEMORY_PATHS)) == []


@pytest.mark.parametrize("folder", sorted(MEMORY_FOLDER_FORBIDDEN))
def test_each_memory_path_imports_only_what_its_path_may(folder: str) -> None:
    assert (ROOT / folder).is_dir(), f"{folder} is gone: say in MEMORY_FOLDER_FORBIDDEN where its rule went"
    assert _violations(_room_files((folder,)), MEMORY_FOLDER_FORBIDDEN[folder]) == []


def test_no_product_module_imports_the_reference_oracles() -> None:
    product = [
        p for p in _modules() if not _rel(p).startswith(f"{MEMORY}reference/") and _rel(p) not in MEMORY_REEXPORTS
    ]
    assert _violations(product, REFERENCE) == []


def test_bot_holds_few_modules_at_its_root() -> None:
    at_root = sorted(p.name for p in (ROOT / "bot").glob("*.py"))
    assert len(at_root) <= ROOT_MODULES_MAX, f"bot/ has {len(at_root)} modules at its root: {at_root}"


# --- SQL only under stores ----------------------------------------------------------------------


def sql_in(source: str) -> list[str]:
    """Where a module runs SQL (a statement helper or a connection's execute) or holds an SQL
    statement's text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in SQL_CALLS:
                found.append(f"line {node.lineno}: {name}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.match(node.value):
            found.append(f"line {node.lineno}: {node.value.split()[0]} statement")
    return found


def sql_outside_stores(root: Path = ROOT) -> list[str]:
    problems = []
    for path in _modules(root):
        rel = _rel(path, root)
        if _in(rel, SQL_HOMES):
            continue
        problems += [f"{rel} {where}" for where in sql_in(path.read_text(encoding="utf-8"))]
    return problems


def test_sql_lives_only_under_stores() -> None:
    assert sql_outside_stores() == []


def test_a_store_placed_outside_stores_or_sql_in_the_engine_fails(tmp_path: Path) -> None:
    store = 'async def forget(conn, user_id):\n    await conn.execute("DELETE FROM memories WHERE user_id = ?", (user_id,))\n'
    statement = 'PENDING = (\n    "SELECT id FROM exchanges WHERE user_id = ? AND reflected_at IS NULL"\n)\n'
    for rel, source in (
        ("bot/memory/stores/forgetting.py", store),  # at home: fine
        ("bot/memory/forgetting_store.py", store),
        ("bot/engine/pending.py", statement),
        ("cogs/helpers.py", "async def f(db):\n    return await fetch_all(db.reader, QUERY)\n"),
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source, encoding="utf-8")
    found = sql_outside_stores(tmp_path)
    assert sorted({line.split()[0] for line in found}) == [
        "bot/engine/pending.py",
        "bot/memory/forgetting_store.py",
        "cogs/helpers.py",
    ], found


# --- under stores/, rows only ---------------------------------------------------------------------

# What a row's fields may hold: column values as Python reads them (a JSON column as a dict, or
# as the chat messages it holds; a vector as an array), and the memory vocabulary's types
# (bot/memory/model.py, bot/memory/choice.py) a column decodes to.
ROW_VALUES = frozenset(
    {
        "int",
        "float",
        "str",
        "bool",
        "bytes",
        "datetime",
        "None",
        "Any",
        "list",
        "tuple",
        "dict",
        "np",
        "ndarray",
        "ChatMessage",
    }
)


def types_that_are_not_rows(source: str) -> list[str]:
    """The classes of a store module that are not rows: a row is a dataclass or NamedTuple with
    no behaviour whose fields hold column values. The one other type a store module may define
    is its store (`…Store`), whose methods each run their statements in one transaction."""
    tree = ast.parse(source)
    vocabulary = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("bot.memory.model", "bot.memory.choice")
        for alias in node.names
    }
    problems = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name.endswith("Store"):
            continue
        dataclass = any(
            "dataclass" in ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list
        )
        named_tuple = any(ast.unparse(b) == "NamedTuple" for b in node.bases)
        if not (dataclass or named_tuple):
            problems.append(f"{node.name}: not a row (a dataclass or NamedTuple)")
            continue
        methods = [n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if methods:
            problems.append(f"{node.name}: a row with behaviour ({', '.join(methods)})")
        for field in (n for n in node.body if isinstance(n, ast.AnnAssign)):
            names = {n.id for n in ast.walk(field.annotation) if isinstance(n, ast.Name)}
            names |= {n.attr for n in ast.walk(field.annotation) if isinstance(n, ast.Attribute)}
            if strange := sorted(names - ROW_VALUES - vocabulary):
                problems.append(
                    f"{node.name}.{ast.unparse(field.target)}: holds {', '.join(strange)}, not a column value"
                )
    return problems


def test_stores_define_rows_and_their_store_only() -> None:
    problems = [
        f"{_rel(path)}: {problem}"
        for path in _room_files((STORES,))
        for problem in types_that_are_not_rows(path.read_text(encoding="utf-8"))
    ]
    assert problems == []


def test_the_row_check_names_what_it_should() -> None:
    source = (
        "from bot.memory.model import Cause\n"
        "from bot.memory.story.plans import AnchorPlan\n"
        "@dataclass(frozen=True, slots=True)\n"
        "class Row:\n    id: int\n    payload: dict[str, Any] | None\n    cause: Cause\n    vector: np.ndarray\n"
        "class Refused(Exception):\n    pass\n"
        "@dataclass\nclass Report:\n    anchors: AnchorPlan\n"
        "@dataclass\nclass Valid:\n    text: str\n    def validated(self): return self\n"
        "class Stale(NamedTuple):\n    id: int\n"
        "class MemoryStore:\n    def get(self): ...\n"
    )
    assert types_that_are_not_rows(source) == [
        "Refused: not a row (a dataclass or NamedTuple)",
        "Report.anchors: holds AnchorPlan, not a column value",
        "Valid: a row with behaviour (validated)",
    ]


def public_names(source: str, class_name: str) -> set[str]:
    """The public names of a class: its methods and properties, and what its `__init__` sets
    on `self`, but the names starting with an underscore."""
    [cls] = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == class_name]
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in ast.walk(cls):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in (t for t in targets for t in (t.elts if isinstance(t, ast.Tuple) else [t])):
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                names.add(target.attr)
    return {n for n in names if not n.startswith("_")}


def engine_public_names() -> set[str]:
    return public_names((ROOT / FACADE).read_text(encoding="utf-8"), "Engine")


def test_the_engine_opens_few_doors_and_none_onto_its_parts() -> None:
    names = engine_public_names()
    assert len(names) <= ENGINE_PUBLIC_MAX, sorted(names)
    assert names & ENGINE_PARTS == set()
    assert {"conversation", "memories", "privacy", "operator"} <= names


@pytest.mark.parametrize("port", PORTS)
def test_a_port_holds_its_parts_privately(port: str) -> None:
    source = (ROOT / port).read_text(encoding="utf-8")
    classes = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]
    for cls in classes:
        methods = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert public_names(source, cls.name) <= methods, f"{cls.name} shows a part"


def test_the_door_check_sees_a_part_left_open() -> None:
    source = "class Engine:\n    def __init__(self, db):\n        self.db = db\n        self._cache = 1\n    async def turn(self): ...\n"
    assert public_names(source, "Engine") == {"db", "turn"}


# --- no import cycles ---------------------------------------------------------------------------


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the project it imports: `from a import b` imports a.b when b is
    a module of the project, else a; `import a.b` imports a.b."""
    paths = _modules(root)
    known = {_module_name(p, root) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        name = _module_name(path, root)
        edges = graph.setdefault(name, set())
        imported = [m for _, m in _imports(path, root)]
        for module in imported:
            if module not in known or module == name:
                continue
            # `from a import b` yields a and a.b: a alone counts when some name of it is no module.
            parent_only = [m for m in imported if m.startswith(module + ".")]
            if parent_only and all(m in known for m in parent_only) and module not in _plain_imports(path):
                continue
            edges.add(module)
    return graph


def _plain_imports(path: Path) -> set[str]:
    """Modules imported as such (`import a.b`), not through a `from a import …`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other_directly_or_in_a_loop() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_loop_of_three(tmp_path: Path) -> None:
    for name, imports in (("a", "from bot import b\n"), ("b", "import bot.c\n"), ("c", "from bot.a import x\n")):
        path = tmp_path / "bot" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(imports + "x = 1\n", encoding="utf-8")
    (tmp_path / "bot" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "cogs").mkdir()
    assert cycles(import_graph(tmp_path)) == [["bot.a", "bot.b", "bot.c"]]


@pytest.mark.parametrize(
    ("module", "forbidden", "expected"),
    [
        ("bot.memory.stores.stories", FRONT_END_FORBIDDEN, True),
        ("bot.memory.model", FRONT_END_FORBIDDEN, False),
        ("bot.clients.db", FRONT_END_FORBIDDEN, True),
        ("bot.clients.dbx", FRONT_END_FORBIDDEN, False),
        ("discord.ext.commands", CORE_FORBIDDEN, True),
        ("bot.memory.read.recall", CLIENT_FORBIDDEN, True),
        ("bot.engine", CLIENT_FORBIDDEN, True),
        ("bot.errors", CLIENT_FORBIDDEN, False),
    ],
)
def test_the_check_names_what_it_should(module: str, forbidden: tuple[str, ...], expected: bool) -> None:
    assert (_named(module, forbidden) is not None) is expected


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    # A front end writing `from ..memory import stores` is caught like the absolute import.
    sample = tmp_path / "bot" / "web" / "sample.py"
    sample.parent.mkdir(parents=True)
    sample.write_text("from ..memory import stores\nfrom . import views\n", encoding="utf-8")
    assert [m for _, m in _imports(sample, tmp_path)] == ["bot.memory", "bot.memory.stores", "bot.web", "bot.web.views"]


def test_no_front_end_schedules_a_reflection() -> None:
    # The turn schedules its own: a front end that forgot to would leave memories unwritten.
    calls = []
    for path in _room_files(FRONT_ENDS):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "schedule_reflection":
                calls.append(f"{_rel(path)}:{node.lineno}")
    assert calls == []


def whole_settings_read(source: str) -> list[int]:
    """Lines where Discord code reads the services' settings but through their Discord section."""
    tree = ast.parse(source)
    sections = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "discord"}
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "settings" and id(node) not in sections
        and isinstance(node.value, (ast.Name, ast.Attribute))
        and (node.value.id if isinstance(node.value, ast.Name) else node.value.attr) == "services"
    ]  # fmt: skip


def test_the_discord_front_end_is_handed_its_section_of_the_settings() -> None:
    found = {
        _rel(p): lines for p in _room_files(("cogs/",)) if (lines := whole_settings_read(p.read_text(encoding="utf-8")))
    }
    assert found == {}
    assert whole_settings_read(
        "a = bot.services.settings.burst_seconds\nb = services.settings.discord.burst_seconds\n"
    ) == [1]


# A module holds one thing a reader takes in at once: past this, it is cut at a seam (a class that
# owns one concern, a section its callers use apart), never excused by a note.
MODULE_MAX_LINES = 450


def test_no_module_is_too_long_to_read_at_once() -> None:
    long = [
        f"{_rel(path)} ({lines} lines)"
        for path in _modules()
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MODULE_MAX_LINES
    ]
    assert long == [], "cut these at a seam"


# --- the tests' own shape -----------------------------------------------------------------------

TEST_BUILDERS = "tests/builders.py"


def _test_modules() -> list[Path]:
    return sorted((ROOT / "tests").rglob("*.py"))


def _is_fixture(node: ast.AST) -> bool:
    """A function decorated with pytest.fixture / pytest_asyncio.fixture, called or not."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
    return False


def _reaches_engine_insides(node: ast.AST, doors: set[str]) -> bool:
    """`engine.x`, `eng.x`, `services.engine.x`, `self.engine.x` where x is none of the engine's
    public names (`engine.store`, `engine.db`, `engine._ctx`…)."""
    if not (isinstance(node, ast.Attribute) and node.attr not in doors):
        return False
    owner = node.value
    if isinstance(owner, ast.Name):
        return owner.id in ("engine", "eng")
    if not (isinstance(owner, ast.Attribute) and owner.attr == "engine"):
        return False
    # `bot.engine.x` is a module of the engine's package, `settings.engine.x` a setting.
    below = ast.unparse(owner.value)
    return below != "bot" and not below.split("(")[0].endswith("settings")


def shape_problems(source: str, path: str, fixtures_of: dict[str, set[str]], doors: set[str]) -> list[str]:
    problems: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if _reaches_engine_insides(node, doors):
            problems.append(
                f"{path}:{node.lineno}: reaches behind the engine's doors (engine.{node.attr}): "  # type: ignore[attr-defined]
                "use its ports, the `store` fixture or tests/builders.py"
            )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Engine"
            and path != TEST_BUILDERS
        ):
            problems.append(f"{path}:{node.lineno}: builds Engine(...) by hand: use tests.builders.make_engine")
        if isinstance(node, ast.ImportFrom) and node.module in fixtures_of:
            imported = {alias.name for alias in node.names} & fixtures_of[node.module]
            if imported and path != "tests/conftest.py":
                problems.append(
                    f"{path}:{node.lineno}: imports fixture(s) {sorted(imported)}: fixtures come from conftest"
                )
    return problems


def test_tests_build_in_one_place_and_never_reach_around_the_engine() -> None:
    fixtures_of: dict[str, set[str]] = {}
    for path in _test_modules():
        if path.name == "conftest.py":
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        names = {n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if _is_fixture(n)}  # type: ignore[union-attr]
        if names:
            fixtures_of[module] = names
    doors = engine_public_names()
    problems = [
        problem
        for path in _test_modules()
        for problem in shape_problems(
            path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix(), fixtures_of, doors
        )
    ]
    assert not problems, "\n".join(problems)


def test_the_tests_shape_check_names_what_it_should() -> None:
    bad = (
        "from tests.fakes.llm_server import llm_server\n"
        "async def test_x(db, http, llm_server, tmp_path):\n"
        "    engine = Engine(db=db)\n"
        "    await engine.store.list('alice')\n"
        "    await services.engine.store.get('alice', 1)\n"
        "    engine.db.path, engine.cache.loads, self.engine.recall.timeout, eng._ctx\n"
    )
    doors = engine_public_names()
    problems = shape_problems(bad, "tests/test_x.py", {"tests.fakes.llm_server": {"llm_server"}}, doors)
    assert len(problems) == 8, problems
    good = "async def test_x(store, engine):\n    await engine.memories.list('alice')\n    await store.list('alice')\n"
    assert shape_problems(good, "tests/test_x.py", {"tests.fakes.llm_server": {"llm_server"}}, doors) == []
