"""The list of outside files, walked both ways: each kind of file the guarded reader
(bot/clients/outside_files.py) reads is a row of the table in docs/security.md with its bounds,
each module that reads one is named in its row, and no module of bot/ or cogs/ reads a file
around the reader (but the few listed here, each with its reason). And the reader's own bound:
what YAML aliases expand to is counted on the file, in milliseconds."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from bot.clients import outside_files
from bot.clients.outside_files import KINDS, MAX_DEPTH, MiB
from tests.reliability.test_outside_files import laughs

ROOT = Path(__file__).resolve().parents[2]
SECURITY = ROOT / "docs" / "security.md"


# --- the list, walked both ways -----------------------------------------------------------------

# Reading primitives: a call of one of these in bot/ or cogs/ outside the reader reads a file.
# (object, name): the object a call is made on, "" for a plain name, "*" for any object.
PRIMITIVES = frozenset({
    ("", "open"), ("os", "open"), ("os", "fdopen"), ("io", "open"), ("*", "read_text"), ("*", "read_bytes"),
    ("yaml", "safe_load"), ("yaml", "load"), ("yaml", "full_load"), ("yaml", "unsafe_load"), ("json", "load"),
    ("pickle", "load"), ("", "dotenv_values"), ("", "load_dotenv"), ("sqlite3", "connect"), ("aiosqlite", "connect"),
    ("shutil", "copyfile"), ("shutil", "copy"), ("shutil", "copy2"), ("jinja2", "FileSystemLoader"),
    ("zipfile", "ZipFile"), ("*", "open_text"),
})  # fmt: skip
# The reader's functions, and which argument names the kind.
READERS = frozenset(
    {"read_bytes", "read_text", "read_document", "check_regular", "parse_json", "parse_yaml", "read_head"}
)
# Reads that are not of an outside file, each with why. (module, primitive): the reason.
NOT_OUTSIDE = {
    ("bot/i18n.py", "open"): "the message catalogues of Écho itself (bot/locales/)",
    ("bot/clients/db.py", "read_text"): "the migrations of Écho itself (migrations/)",
    ("bot/clients/backup.py", "read_text"): "the migrations of Écho itself, to know its schema (migrations/)",
    ("bot/clients/postgres.py", "read_text"): "the migrations of Écho itself (migrations/postgresql/)",
    ("bot/clients/db.py", "connect"): "the database Écho writes (DATABASE_PATH), opened by SQLite",
    ("bot/clients/db.py", "open"): "the database's lock file, Écho's own",
    ("bot/clients/backup.py", "connect"): "the database and a backup, opened by SQLite once the reader "
    "found a regular file (BACKUP_FILE)",
    ("bot/clients/backup.py", "open"): "fsync of a file or folder the backup wrote",
    ("bot/clients/backup.py", "copyfile"): "a backup copied once the reader found a regular file (BACKUP_FILE)",
    ("bot/clients/erasures.py", "open"): "the erasure ledger appended to (written, not read)",
    ("bot/terminal/commands.py", "open"): "/export written to the file the user names (written, not read)",
    ("bot/terminal/commands.py", "fdopen"): "the same /export file, written",
    ("bot/clients/erasures.py", "connect"): "a restored copy, opened by SQLite to re-apply erasures",
    ("bot/web/server.py", "FileSystemLoader"): "the page's templates, Écho's own (bot/web/templates/)",
    ("bot/config/__init__.py", "dotenv_values"): "the .env file, once check_regular found it a regular file (ENV_FILE)",
}


def _modules() -> list[Path]:
    return sorted(p for top in ("bot", "cogs") for p in (ROOT / top).rglob("*.py"))


def _calls(path: Path) -> list[tuple[str, ast.Call]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            found.append((name, node))
    return found


def _reads(call: ast.Call, name: str) -> bool:
    """Whether the call is one of PRIMITIVES: `x.read_text()` on any object, `os.open(…)` on
    its module, `open(…)` as a plain name, `path.open("rb")` with a mode."""
    func = call.func
    if isinstance(func, ast.Name):
        return ("", name) in PRIMITIVES
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value.id if isinstance(func.value, ast.Name) else ""
    if name == "ZipFile" and call.args and isinstance(call.args[0], ast.Call):
        inner = call.args[0].func
        if isinstance(inner, ast.Attribute) and inner.attr == "BytesIO":
            return False  # a zip over bytes the reader already read (a CHARX card): parsing, not reading
    if (owner, name) in PRIMITIVES or ("*", name) in PRIMITIVES:
        return True
    # path.open("rb"): a file opened by its Path (a class's own `open` takes no mode).
    return (
        name == "open"
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    )


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _table() -> dict[str, tuple[str, str]]:
    """docs/security.md's table of outside files: kind -> (read by, bounds)."""
    text = SECURITY.read_text(encoding="utf-8")
    section = text.split("## Files Écho reads", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("file", "---") and not set(cells[0]) <= {"-", " "}:
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def _bounds(kind: outside_files.FileKind) -> list[str]:
    """What the table must say of a kind: its size bound (and, for parsed files, the counts)."""
    if not kind.max_bytes:
        return ["regular file"]
    size = f"{kind.max_bytes // MiB} MiB"
    return [size, "regular file"]


def test_every_kind_of_outside_file_is_a_row_of_the_security_table_with_its_bounds() -> None:
    table = _table()
    assert set(table) == {k.name for k in KINDS}, "docs/security.md's table and outside_files.KINDS differ"
    for kind in KINDS:
        _read_by, bounds = table[kind.name]
        for said in _bounds(kind):
            assert said in bounds, f"{kind.name}: the table's bounds do not say {said!r}: {bounds!r}"
    section = SECURITY.read_text(encoding="utf-8").split("## Files Écho reads", 1)[1]
    assert f"{MAX_DEPTH} levels" in section and "aliases" in section


def test_every_module_that_reads_an_outside_file_is_named_in_its_kind_s_row() -> None:
    table = _table()
    kinds = {k.name: k for k in KINDS}
    by_constant = {
        name: value.name for name, value in vars(outside_files).items() if isinstance(value, outside_files.FileKind)
    }
    used: dict[str, set[str]] = {}
    for path in _modules():
        if path.name == "outside_files.py":
            continue
        for name, call in _calls(path):
            if name not in READERS or not any(isinstance(a, ast.Name) and a.id in by_constant for a in call.args):
                continue
            (kind,) = {by_constant[a.id] for a in call.args if isinstance(a, ast.Name) and a.id in by_constant}
            used.setdefault(kind, set()).add(_rel(path))
    for kind, modules in used.items():
        for module in modules:
            assert module in table[kind][0], f"{module} reads a {kind} but docs/security.md's row does not name it"
    unused = set(kinds) - set(used)
    assert not unused, f"kinds no module reads: {sorted(unused)}"


def test_no_module_reads_a_file_around_the_guarded_reader() -> None:
    found = []
    for path in _modules():
        module = _rel(path)
        if module == "bot/clients/outside_files.py":
            continue
        for name, call in _calls(path):
            if not _reads(call, name) or (module, name) in NOT_OUTSIDE:
                continue
            found.append(f"{module}:{call.lineno}: {name}(…)")
    assert not found, (
        "files read around bot/clients/outside_files.py (route them through it, or list why not):\n" + "\n".join(found)
    )


def test_the_reasons_for_reads_that_are_not_outside_files_are_still_true() -> None:
    """A stale exemption would hide a new reader in that module: each must still be used."""
    for module, primitive in NOT_OUTSIDE:
        names = {name for name, _ in _calls(ROOT / module)}
        assert primitive in names, f"{module} no longer calls {primitive}: remove its exemption"


def test_a_yaml_file_whose_aliases_expand_is_refused_in_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(12), encoding="utf-8")  # 9**12 values if built
    started = time.perf_counter()
    with pytest.raises(outside_files.CharacterError, match="aliases expand"):
        outside_files.read_document(path, outside_files.CHARACTER_FILE)
    # The rule: counted on the file, not on what it expands to (a second, with headroom).
    assert time.perf_counter() - started < 1.0


def test_the_process_attacks_expect_the_reader_s_nesting_bound() -> None:
    from tests.reliability import test_outside_files

    assert test_outside_files.MAX_DEPTH == MAX_DEPTH


def test_the_walk_finds_a_reader_added_around_the_guarded_one(tmp_path: Path) -> None:
    """Not vacuous: the reads a new module might add are found; parsing text already read is not."""
    module = tmp_path / "new_reader.py"
    module.write_text(
        "import json, os, sqlite3, yaml, zipfile, io\n"
        "from pathlib import Path\n"
        "a = Path('x').read_text()\n"
        "b = open('x')\n"
        "c = yaml.safe_load(a)\n"
        "d = Path('x').open('rb')\n"
        "e = os.open('x', 0)\n"
        "f = zipfile.ZipFile('card.charx')\n"
        "g = json.loads(a)\n"
        "h = zipfile.ZipFile(io.BytesIO(b''))\n",
        encoding="utf-8",
    )
    found = sorted(name for name, call in _calls(module) if _reads(call, name))
    assert found == ["ZipFile", "open", "open", "open", "read_text", "safe_load"]
