"""Static check: every SQL statement in bot/ and cogs/ that touches a user table is scoped by user.

The SQL is found with `ast`, the way the code writes it: a literal (implicit concatenation is one
literal to `ast`), a module constant assembled with `+`, a local name built with `=` then `+=`,
the loop variable of a `for` over a tuple of statements, an f-string over module constants, and
both texts of an `Sql(sqlite, postgresql=...)` statement (each checked on its own). An
argument that cannot be resolved to text is reported as unresolved: dynamic SQL must be
reviewed, it cannot slip past the check.

A statement is scoped when every query block (each UNION branch and subquery, taken alone) that
names a user table compares `user_id` with a bound parameter in its WHERE/ON condition, and
every INSERT into a user table lists `user_id` among its columns. The user tables are read from
the migrated schema itself, so a new table with a `user_id` column is covered without touching
this file, and a new table without one fails `test_every_table_of_the_schema_is_classified`
until someone decides how it is scoped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from bot.clients.db import SQLiteDatabase

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("bot", "cogs")
# write_one: Database's one statement that is a write transaction of its own, (sql, params).
EXECUTE_METHODS = frozenset({"execute", "executemany", "execute_fetchall", "executescript", "write_one"})
# bot.clients.db's statement helpers, each (conn, sql, params): fetch_all, fetch_one, and
# inserted_id for an INSERT … RETURNING id; fetch_pages (conn, sql, params, size) for a long read.
READ_HELPERS = frozenset({"fetch_all", "fetch_one", "inserted_id", "fetch_pages"})

# Tables with no user_id column whose rows are nonetheless one user's: they are scoped through
# their owner table. memories_fts is the external-content FTS index of memories (rowid =
# memories.id): a statement on it must join memories and filter memories.user_id, as
# lexical_matches does; it is written only by the migration triggers, row by row, following
# the memories row that changed. Read from the schema (the table's content= option), checked by
# test_every_table_of_the_schema_is_classified.
_FTS_CONTENT = re.compile(r"USING\s+fts5\s*\(.*content\s*=\s*'(\w+)'", re.IGNORECASE | re.DOTALL)
# SQLite's own tables, and the shadow tables FTS5 keeps for each index: no user data of their
# own, never named by the code.
_FTS_SHADOWS = ("data", "idx", "docsize", "config", "content")

# Tables without user_id that hold no user's data, each with why.
NO_USER_DATA: Mapping[str, str] = {
    "erasures": "each erase as a SHA-256 of the person's id and its time (bot/clients/erasures.py): "
    "no id, no text; what a restore compares with the erasure ledger",
}

# Statements that legitimately span all users. Keyed by (file, function, normalised SQL, or
# "<unresolved: expr>" for an argument that is not static text); each with its reason.
ALLOWED: Mapping[tuple[str, str, str], str] = {
    (
        "bot/memory/stores/exchanges.py",
        "users_pending_reflection",
        "SELECT DISTINCT user_id FROM exchanges WHERE reflected_at IS NULL AND reply IS NOT NULL",
    ): "start-up sweep: reads only which users have unreflected exchanges, then schedules each "
    "user's own worker, whose statements are scoped",
    (
        "bot/memory/stores/exchanges.py",
        "users_with_open_exchanges",
        "SELECT DISTINCT user_id FROM exchanges WHERE settled_at IS NULL AND reply IS NOT NULL",
    ): "start-up: reads only which users have exchanges left open by the previous run, then "
    "settles each user's own, with scoped statements",
    (
        "bot/memory/stores/exchanges.py",
        "recent_speakers",
        (
            "SELECT user_id, place FROM exchanges WHERE created_at >= ? "
            "GROUP BY user_id, place ORDER BY MAX(id) DESC LIMIT ?"
        ),
    ): "start-up warm-up: reads only who spoke lately and where, then loads each user's own "
    "memories with scoped statements",
    (
        "bot/memory/stores/followups.py",
        "checkin_people",
        "SELECT user_id FROM checkin_settings WHERE enabled = 1",
    ): "the check-in sweep: reads only who turned check-ins on, then reads each person's own "
    "memories, follow-ups and times with scoped statements",
    (
        "bot/memory/stores/imports.py",
        "live_turn_waiting",
        (
            "SELECT 1 FROM exchanges WHERE reply IS NULL AND last_error IS NULL AND created_at >= ? "
            "AND (message_id IS NULL OR message_id NOT LIKE 'import:%') LIMIT 1"
        ),
    ): "an import's model budget: reads only whether some live turn waits for the model (live "
    "turns first), no user's data",
    (
        "bot/memory/stores/edits.py",
        "message_owner",
        "SELECT user_id FROM exchange_messages WHERE message_id = ? LIMIT 1",
    ): "a deleted message reaches the bot without its author (Discord's raw delete event): only "
    "the owner of that one message id is read, every later statement is scoped by that owner",
    (
        "bot/memory/stores/vectors.py",
        "stale_memories",
        (
            "SELECT m.id, m.user_id, m.text, m.content_hash FROM memories AS m "
            "LEFT JOIN memory_vectors AS v ON v.memory_id = m.id AND v.model = ? "
            "WHERE (v.memory_id IS NULL OR v.content_hash != m.content_hash) "
            "AND (m.expires_at IS NULL OR m.expires_at > ?) ORDER BY m.id DESC LIMIT ?"
        ),
    ): "the indexer's work list across users; each vector is then stored with its memory's own "
    "user_id (store_vectors selects the memory WHERE id = ? AND user_id = ?)",
    (
        "bot/memory/stores/vectors.py",
        "delete_all_vectors",
        "DELETE FROM memory_vectors",
    ): "index maintenance: vectors are derived data of every user, rebuilt by the indexer",
    (
        "bot/memory/stores/vectors.py",
        "delete_vectors_of_other_models",
        "DELETE FROM memory_vectors WHERE model != ?",
    ): "index maintenance after a model switch, once the new model covers every memory",
    (
        "bot/memory/stores/memories.py",
        "erase_user_memories",
        "INSERT INTO memories_fts (memories_fts) VALUES ('optimize')",
    ): "index maintenance after an erase: merges the full-text index's segments so the erased "
    "user's words leave its shadow tables; reads and returns no row of anyone",
    (
        "bot/memory/stores/reports.py",
        "bot_turn_log",
        (
            "SELECT user_id, story_id, outcome, memory_ms, reply_ms, prompt_tokens, completion_tokens, "
            "context_tokens, context_full, created_at FROM turn_log WHERE created_at >= ? "
            "ORDER BY created_at LIMIT ?"
        ),
    ): "the owner's page and its charts of the whole bot: read-only, shown only behind WEB_TOKEN",
    (
        "bot/memory/stores/reports.py",
        "user_summaries",
        (
            "SELECT user_id, COUNT(*) AS turns, SUM(CASE WHEN outcome = 'degraded' THEN 1 ELSE 0 END) AS degraded, "
            "SUM(CASE WHEN outcome = 'failed' THEN 1 ELSE 0 END) AS failed, MAX(created_at) AS last "
            "FROM turn_log GROUP BY user_id"
        ),
    ): "the owner's page lists every user with their turn counts: read-only, behind WEB_TOKEN",
    (
        "bot/memory/stores/reports.py",
        "user_summaries",
        "SELECT user_id, COUNT(*) AS memories FROM memories WHERE type != 'rule' GROUP BY user_id",
    ): "the owner's page lists every user with their memory count: read-only, behind WEB_TOKEN",
    (
        "bot/memory/stores/reports.py",
        "user_summaries",
        "SELECT user_id, MAX(created_at) AS last FROM exchanges GROUP BY user_id",
    ): "the owner's page lists every user who talked, with when: read-only, behind WEB_TOKEN",
    (
        "bot/memory/stores/reports.py",
        "user_summaries",
        (
            "SELECT e.user_id, e.user_name FROM exchanges e "
            "JOIN (SELECT user_id, MAX(id) AS id FROM exchanges GROUP BY user_id) last ON e.id = last.id"
        ),
    ): "the owner's page names every user by their display name in their last message: read-only, behind WEB_TOKEN",
    (
        "bot/memory/stores/reports.py",
        "bot_memory_types",
        "SELECT type, COUNT(*) AS held FROM memories WHERE type != 'rule' GROUP BY type ORDER BY type",
    ): "counts per type over every user, no row content: the owner's page",
    (
        "bot/memory/stores/reports.py",
        "bot_backlog",
        (
            "SELECT COUNT(*) FILTER (WHERE reflected_at IS NULL AND reply IS NOT NULL) AS pending, "
            "COUNT(*) FILTER (WHERE reflected_at IS NOT NULL AND last_error IS NOT NULL) AS set_aside FROM exchanges"
        ),
    ): "two counts over every user, no row content: the reflection backlog of /metrics and the page",
    (
        "bot/memory/stores/reports.py",
        "bot_never_surfaced",
        (
            "SELECT id, user_id, text, type, scope, story_id, place, confidence, pinned, created_at, "
            "updated_at, expires_at, source, content_hash, times_candidate, times_served, times_semantic "
            "FROM memories WHERE type != 'rule' AND times_served = 0 AND times_candidate >= ? "
            "ORDER BY times_candidate DESC, id LIMIT ?"
        ),
    ): "the owner's page: memories of any user that never surface, each shown with its owner, "
    "read-only, behind WEB_TOKEN",
    (
        "bot/memory/stores/reports.py",
        "bot_recent_turns",
        "SELECT user_id, id, story_id, query, degraded, created_at, detail FROM turns ORDER BY id DESC LIMIT ?",
    ): "the owner's page: the latest turns of anyone, each with its owner (and the names the turn "
    "recorded) and a link to that user's scoped turn view; read-only, behind WEB_TOKEN",
    (
        "bot/clients/db.py",
        "apply_migrations",
        "<unresolved: script>",
    ): "migrations: schema changes read from migrations/*.sql, applied to the whole database",
    (
        "bot/clients/storage.py",
        "fetch_all",
        "<unresolved: sql>",
    ): "the read helper itself: each of its callers' SQL is checked at the call (READ_HELPERS)",
    **{
        ("bot/memory/stores/move.py", function, f"<unresolved: {argument}>"): (
            "migrate-store moves the whole database, every user's rows: statements assembled from "
            "the constant table and column lists of bot.memory.stores.move, never from input"
        )
        for function, argument in (
            ("_checksum", "_SELECT_ORDERED[table]"),
            ("move", "_EMPTY[table]"),
            ("move", "_SELECT_CHUNK[table]"),
            ("move", "_MAX_ID[table]"),
            ("move", "statement"),
        )
    },
    (
        "bot/clients/backup.py",
        "_row_counts",
        "<unresolved: _count_sql(name)>",
    ): "a backup is checked by counting every table's rows, whoever's they are: table names read "
    "from the file's own sqlite_master, never from input; no row is read",
    (
        "bot/clients/backup.py",
        "migrated_schema",
        "<unresolved: path.read_text(encoding='utf-8')>",
    ): "Écho's migrations applied to an empty in-memory database, to know the schema a backup of "
    "Écho must have (restore refuses any other SQLite file)",
    (
        "bot/clients/erasures.py",
        "_tables_with_users",
        "<unresolved: 'PRAGMA table_info(' + _quoted(t) + ')'>",
    ): "a restored copy's own schema, read to find its tables with a user_id column",
    (
        "bot/clients/erasures.py",
        "apply_erasures",
        "<unresolved: _keys_sql(table)>",
    ): "a restore, before the copy takes the database's place: which keys each table holds, to "
    "find by hash the people erased after the backup was taken (table names from the copy's own "
    "sqlite_master)",
    (
        "bot/clients/erasures.py",
        "apply_erasures",
        "<unresolved: _erase_sql(table)>",
    ): "the same restore erasing those people again: DELETE … WHERE user_id = ? on each table that "
    "has the column, table names from the copy's own sqlite_master",
    (
        "bot/clients/erasures.py",
        "apply_erasures",
        "INSERT INTO memories_fts (memories_fts) VALUES ('optimize')",
    ): "index maintenance after those erasures, as after an erase: the erased words leave the "
    "full-text index's shadow tables; reads and returns no row of anyone",
    (
        "bot/clients/postgres.py",
        "_run",
        "<unresolved: translated.text>",
    ): "the PostgreSQL connection running a store's statement, translated: each store's SQL, "
    "both texts of an Sql, is checked at its call",
    (
        "bot/clients/postgres.py",
        "apply_migrations",
        "<unresolved: body>",
    ): "migrations: schema changes read from migrations/postgresql/*.sql, applied to the whole database",
    (
        "bot/clients/storage.py",
        "fetch_one",
        "<unresolved: sql>",
    ): "the read helper itself, over fetch_all: its callers' SQL is checked at the call",
    (
        "bot/clients/storage.py",
        "fetch_pages",
        "<unresolved: sql>",
    ): "the paged read helper itself: each of its callers' SQL is checked at the call (READ_HELPERS)",
    (
        "bot/clients/storage.py",
        "inserted_id",
        "<unresolved: sql>",
    ): "the insert helper itself, over fetch_one: its callers' SQL is checked at the call",
    **{
        ("bot/clients/db.py", f"SQLiteConnection.{method}", "<unresolved: _sqlite_text(sql)>"): (
            "the SQLite connection running a store's statement (an Sql's SQLite text): each store's "
            "SQL is checked at its call"
        )
        for method in ("execute", "execute_fetchall")
    },
    ("bot/clients/db.py", "SQLiteDatabase.write_one", "<unresolved: _sqlite_text(sql)>"): (
        "the SQLite database running a store's one statement: each store's SQL is checked at its call"
    ),
    ("bot/clients/postgres.py", "PostgresDatabase.write_one", "<unresolved: sql>"): (
        "the PostgreSQL database running a store's one statement in `write()`: each store's SQL is checked at its call"
    ),
}


@dataclass(frozen=True, slots=True)
class Statement:
    path: str
    function: str
    line: int
    sql: str | None  # None: the argument is not static text
    argument: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.path, self.function, self.sql if self.sql is not None else f"<unresolved: {self.argument}>")

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}: {self.key[2]}"


@dataclass(frozen=True, slots=True)
class Finding:
    statement: Statement
    problem: str

    def __str__(self) -> str:
        return f"{self.statement}\n    -> {self.problem}"


# --- finding the statements ------------------------------------------------------------------

Scope = dict[str, list[ast.stmt]]


def _bindings(body: list[ast.stmt]) -> Scope:
    """Assignments, `+=` and `for` targets of plain names in one scope, in source order
    (nested functions and classes have their own scope)."""
    found: Scope = {}

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                visit(child)

    for statement in body:
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            visit(statement)
    return found


class _Resolver:
    """Turns an expression into the SQL texts it can hold, or None when it is not static."""

    def __init__(self, scopes: list[Scope]) -> None:
        self.scopes = scopes  # innermost first; the module's scope last

    def texts(self, node: ast.expr) -> list[str] | None:
        both = self._dialects(node)
        if both is not None:
            return both
        if isinstance(node, ast.Tuple | ast.List):
            out: list[str] = []
            for element in node.elts:
                text = self.text(element)
                if text is None:
                    return None
                out.append(text)
            return out
        if isinstance(node, ast.Name):
            binding = self._binding(node.id)
            if binding is not None and len(binding) == 1 and isinstance(binding[0], ast.For | ast.AsyncFor):
                return self.texts(binding[0].iter)
            if binding is not None and len(binding) == 1 and isinstance(binding[0], ast.Assign | ast.AnnAssign):
                value = binding[0].value
                if isinstance(value, ast.Tuple | ast.List):
                    return self.texts(value)
        text = self.text(node)
        return None if text is None else [text]

    def text(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else str(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.text(node.left), self.text(node.right)
            return None if left is None or right is None else left + right
        if isinstance(node, ast.JoinedStr):
            parts = [self.text(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
            return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
        if isinstance(node, ast.Name):
            return self._name_text(node.id)
        return None

    def _dialects(self, node: ast.expr) -> list[str] | None:
        """The SQLite and PostgreSQL texts of an `Sql(...)` call, or of a name bound once to one;
        None when the node is not one (a PostgreSQL text of None is no statement to check)."""
        if isinstance(node, ast.Name):
            binding = self._binding(node.id)
            if binding is None or len(binding) != 1 or not isinstance(binding[0], ast.Assign | ast.AnnAssign):
                return None
            node = binding[0].value  # type: ignore[assignment]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Sql"):
            return None
        sqlite = self.text(node.args[0]) if node.args else None
        out = [sqlite] if sqlite is not None else []
        for keyword in node.keywords:
            if keyword.arg == "postgresql" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is None
            ):
                text = self.text(keyword.value)
                if text is None:
                    return None
                out.append(text)
        return out if sqlite is not None else None

    def _binding(self, name: str) -> list[ast.stmt] | None:
        for scope in self.scopes:
            if name in scope:
                return scope[name]
        return None

    def _name_text(self, name: str) -> str | None:
        """A name bound once, then possibly extended with `+=`: the statement with every
        optional clause appended (each clause is checked; none can remove the scoping)."""
        binding = self._binding(name)
        if not binding or not isinstance(binding[0], ast.Assign | ast.AnnAssign) or binding[0].value is None:
            return None
        text = self.text(binding[0].value)
        for extension in binding[1:]:
            if not (isinstance(extension, ast.AugAssign) and isinstance(extension.op, ast.Add)):
                return None
            more = self.text(extension.value)
            if text is None or more is None:
                return None
            text += more
        return text


def _normalise(sql: str) -> str:
    return " ".join(sql.split())


def _sql_argument(node: ast.AST) -> ast.expr | None:
    """The SQL argument of an execute-like method call or of a read helper call, if it is one."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Attribute) and node.func.attr in EXECUTE_METHODS and node.args:
        return node.args[0]
    if isinstance(node.func, ast.Name) and node.func.id in READ_HELPERS and len(node.args) >= 2:
        return node.args[1]
    return None


def _imported_constants(tree: ast.Module) -> Scope:
    """Module constants imported by name from a scanned package (`from bot.memory.stores.memories import
    MEMORY_COLUMNS`), bound as the text they hold in their own module: a column list has one home
    and the statements built from it elsewhere are still read and checked."""
    found: Scope = {}
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        if node.module.split(".")[0] not in SCANNED:
            continue
        file = ROOT / (node.module.replace(".", "/") + ".py")
        if not file.is_file():
            continue
        resolver = _Resolver([_bindings(ast.parse(file.read_text(encoding="utf-8")).body)])
        for alias in node.names:
            text = resolver._name_text(alias.name)
            if text is not None:
                name = alias.asname or alias.name
                constant = ast.Assign(targets=[ast.Name(id=name)], value=ast.Constant(value=text), lineno=node.lineno)
                found[name] = [constant]
    return found


def extract_statements(source: str, path: str) -> list[Statement]:
    """Every SQL argument of an execute-like call in one module."""
    tree = ast.parse(source)
    found: list[Statement] = []

    def walk(node: ast.AST, qualname: list[str], scopes: list[Scope]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(child, [*qualname, child.name], [_bindings(child.body), *scopes])
                continue
            if isinstance(child, ast.ClassDef):
                walk(child, [*qualname, child.name], scopes)
                continue
            argument = _sql_argument(child)
            if argument is not None:
                texts = _Resolver(scopes).texts(argument)
                function = ".".join(qualname) or "<module>"
                for sql in texts if texts is not None else [None]:
                    found.append(
                        Statement(
                            path=path,
                            function=function,
                            line=child.lineno,
                            sql=None if sql is None else _normalise(sql),
                            argument=ast.unparse(argument),
                        )
                    )
            walk(child, qualname, scopes)

    walk(tree, [], [{**_imported_constants(tree), **_bindings(tree.body)}])
    return found


@cache
def code_statements() -> tuple[Statement, ...]:
    """Read once per run: three tests read the same code."""
    statements: list[Statement] = []
    for folder in SCANNED:
        for file in sorted((ROOT / folder).rglob("*.py")):
            statements.extend(extract_statements(file.read_text(encoding="utf-8"), file.relative_to(ROOT).as_posix()))
    return tuple(statements)


# --- checking one statement ------------------------------------------------------------------

_STRING = re.compile(r"'(?:[^']|'')*'")
_TABLE_REF = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+([A-Za-z_]\w*)", re.IGNORECASE)
_FROM_LIST = re.compile(
    r"\bFROM\s+(.*?)(?=\b(?:WHERE|JOIN|LEFT|INNER|CROSS|NATURAL|ON|GROUP|ORDER|LIMIT|HAVING|WINDOW)\b|$)",
    re.IGNORECASE | re.DOTALL,
)
_SET_OPERATOR = re.compile(r"\b(?:UNION(?:\s+ALL)?|INTERSECT|EXCEPT)\b", re.IGNORECASE)
_CONDITION_START = re.compile(r"\bWHERE\b|\bON\b(?!\s+CONFLICT\b)", re.IGNORECASE)
_UPSERT = re.compile(r"\bON\s+CONFLICT\b", re.IGNORECASE)
_PARAMETER = r"(?:\?\d*|[:@$]\w+)"
_USER_ID_BOUND = re.compile(
    rf"(?:\b\w+\.)?\buser_id\s*==?\s*{_PARAMETER}|{_PARAMETER}\s*==?\s*(?:\w+\.)?user_id\b", re.IGNORECASE
)
_INSERT = re.compile(r"^\s*(?:INSERT|REPLACE)\b.*?\bINTO\s+(\w+)\s*(\(([^)]*)\))?", re.IGNORECASE | re.DOTALL)
_SELECT = re.compile(r"\bSELECT\b", re.IGNORECASE)


def _query_blocks(sql: str) -> list[str]:
    """Each statement, UNION branch and parenthesised subquery of `sql`, as separate texts
    (a subquery is replaced by `(…)` in the block around it)."""
    blocks: list[str] = []

    def strip_subqueries(text: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(text):
            if text[i] == "(" and re.match(r"\(\s*(SELECT|WITH)\b", text[i:], re.IGNORECASE):
                depth, j = 0, i
                while j < len(text):
                    depth += {"(": 1, ")": -1}.get(text[j], 0)
                    if depth == 0:
                        break
                    j += 1
                split(text[i + 1 : j])
                out.append("(…)")
                i = j + 1
            else:
                out.append(text[i])
                i += 1
        return "".join(out)

    def split(text: str) -> None:
        for part in _SET_OPERATOR.split(strip_subqueries(text)):
            if part.strip():
                blocks.append(part.strip())

    for statement in _STRING.sub("''", sql).split(";"):
        if statement.strip():
            split(statement)
    return blocks


def _tables(block: str) -> set[str]:
    names = set(_TABLE_REF.findall(block))
    for from_list in _FROM_LIST.findall(block):
        # FROM a, b: every item of the list is a table (or a table-valued function).
        names.update(m.group(1) for item in from_list.split(",") if (m := re.match(r"\s*([A-Za-z_]\w*)", item)))
    return {name.lower() for name in names}


def statement_problems(sql: str, user_tables: frozenset[str], scoped_through: Mapping[str, str]) -> list[str]:
    """Why `sql` is not scoped by user (empty when it is)."""
    problems: list[str] = []
    for block in _query_blocks(sql):
        insert = _INSERT.match(block)
        if insert is not None:
            table = insert.group(1).lower()
            columns = {c.strip().lower() for c in (insert.group(3) or "").split(",")}
            if table in user_tables and "user_id" not in columns:
                problems.append(f"INSERT INTO {table} without a user_id column")
            if table in scoped_through:
                problems.append(f"INSERT INTO {table}, which has no user_id (scoped through {scoped_through[table]})")
            select = _SELECT.search(block, insert.end())
            if select is None:
                continue
            block = block[select.start() :]
        block = _UPSERT.split(block)[0]
        touched = _tables(block)
        guarded = touched & user_tables
        for table in touched & set(scoped_through):
            if scoped_through[table] not in touched:
                problems.append(f"{table} read without joining {scoped_through[table]}, its owner table")
            guarded.add(table)
        if not guarded:
            continue
        start = _CONDITION_START.search(block)
        condition = block[start.start() :] if start else ""
        if not _USER_ID_BOUND.search(condition):
            problems.append(f"no `user_id = <parameter>` condition on {', '.join(sorted(guarded))} in: {block}")
    return problems


def find_unscoped(
    statements: Sequence[Statement], user_tables: frozenset[str], scoped_through: Mapping[str, str]
) -> list[Finding]:
    findings: list[Finding] = []
    for statement in statements:
        if statement.sql is None:
            findings.append(Finding(statement, "not static text: the SQL cannot be checked"))
            continue
        findings.extend(Finding(statement, p) for p in statement_problems(statement.sql, user_tables, scoped_through))
    return findings


# --- the schema ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Schema:
    user_tables: frozenset[str]
    scoped_through: Mapping[str, str]  # table without user_id -> the user table it belongs to
    unclassified: frozenset[str]


async def read_schema(db: SQLiteDatabase) -> Schema:
    async with db.reader.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name") as cur:
        tables = {r[0].lower(): r[1] or "" for r in await cur.fetchall()}
    user_tables: set[str] = set()
    for name in tables:
        async with db.reader.execute("SELECT name FROM pragma_table_info(?)", (name,)) as cur:
            if "user_id" in {r[0] for r in await cur.fetchall()}:
                user_tables.add(name)
    fts = {name: _FTS_CONTENT.search(sql) for name, sql in tables.items() if "fts5" in sql.lower()}
    internal = {n for n in tables if n.startswith("sqlite_")} | {f"{n}_{s}" for n in fts for s in _FTS_SHADOWS}
    scoped_through = {
        name: match.group(1).lower()
        for name, match in fts.items()
        if match is not None and match.group(1).lower() in user_tables
    }
    unclassified = set(tables) - user_tables - internal - set(scoped_through) - set(NO_USER_DATA)
    return Schema(frozenset(user_tables), scoped_through, frozenset(unclassified))


@pytest.fixture
async def schema(tmp_path) -> Schema:
    db = await SQLiteDatabase.open(tmp_path / "schema.sqlite3")
    try:
        return await read_schema(db)
    finally:
        await db.close()


# --- the tests -------------------------------------------------------------------------------


async def test_every_table_of_the_schema_is_classified(schema):
    assert {"memories", "memory_history", "turns", "turn_stats", "exchanges"} <= schema.user_tables
    assert schema.scoped_through == {"memories_fts": "memories"}
    assert not schema.unclassified, (
        f"tables without a user_id column: {sorted(schema.unclassified)}; give them one, or decide "
        "how their rows are scoped and classify them in this file"
    )


async def test_every_statement_on_a_user_table_is_scoped_by_user(schema):
    statements = code_statements()
    # Not vacuous: the extraction reaches every user table the code uses.
    touched = set().union(*(_tables(s.sql) for s in statements if s.sql is not None))
    assert schema.user_tables <= touched, f"no statement found on {sorted(schema.user_tables - touched)}"
    findings = [
        f
        for f in find_unscoped(statements, schema.user_tables, schema.scoped_through)
        if f.statement.key not in ALLOWED
    ]
    assert not findings, "statements not scoped by user_id:\n" + "\n".join(map(str, findings))


async def test_every_allowed_statement_still_exists_and_still_needs_its_exemption(schema):
    statements = {s.key: s for s in code_statements()}
    gone = [key for key in ALLOWED if key not in statements]
    assert not gone, f"allow-listed statements no longer in the code (remove them): {gone}"
    scoped = [key for key in ALLOWED if not find_unscoped([statements[key]], schema.user_tables, schema.scoped_through)]
    assert not scoped, f"allow-listed statements that are scoped now (remove them): {scoped}"


USER_TABLES = frozenset({"memories", "memory_history", "turns"})
SCOPED_THROUGH = {"memories_fts": "memories"}


def check(source: str) -> list[Finding]:
    return find_unscoped(extract_statements(source, "snippet.py"), USER_TABLES, SCOPED_THROUGH)


def test_the_checker_reports_a_delete_by_id_alone():
    findings = check(
        "async def forget(conn, memory_id):\n"
        '    await conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))\n'
    )
    assert [(f.statement.function, f.statement.line, f.statement.sql) for f in findings] == [
        ("forget", 2, "DELETE FROM memories WHERE id = ?")
    ]


def test_the_checker_accepts_the_same_delete_scoped_by_user():
    assert (
        check(
            "async def forget(conn, user_id, memory_id):\n"
            '    await conn.execute("DELETE FROM memories WHERE user_id = ? AND id = ?", (user_id, memory_id))\n'
        )
        == []
    )


@pytest.mark.parametrize(
    "source",
    [
        # implicit concatenation
        'def f(c):\n    c.execute("UPDATE memories SET pinned = 1 "\n              "WHERE id = ?", (1,))\n',
        # module constant assembled with +
        (
            'COLS = "id, text"\nQ = "SELECT " + COLS + " FROM memories WHERE id = ?"\n'
            "def f(c):\n    c.execute(Q, (1,))\n"
        ),
        # a for loop over a module tuple of statements, one of them unscoped
        (
            'ERASE = ("DELETE FROM turns WHERE user_id = ?", "DELETE FROM memory_history")\n'
            "def f(c, u):\n    for s in ERASE:\n        c.execute(s, (u,))\n"
        ),
        # a local statement extended with +=
        (
            'def f(c, u):\n    sql = "SELECT id FROM turns WHERE story_id = ?"\n    sql += " LIMIT ?"\n'
            "    c.execute(sql, ('s', 1))\n"
        ),
        # one UNION branch unscoped
        'def f(c):\n    c.execute("SELECT id FROM turns WHERE user_id = ? UNION SELECT id FROM memories")\n',
        # an unscoped subquery inside a scoped statement
        'def f(c):\n    c.execute("DELETE FROM turns WHERE user_id = ? AND id < (SELECT max(id) FROM turns)")\n',
        # user_id named but not bound to the caller's user
        'def f(c):\n    c.execute("UPDATE memories SET pinned = 0 WHERE user_id IS NOT NULL AND id = ?")\n',
        # an INSERT that does not say whose row it is
        'def f(c):\n    c.execute("INSERT INTO memory_history (memory_id, text) VALUES (?, ?)")\n',
        # a user table second in a FROM list
        'def f(c):\n    c.execute("SELECT m.id FROM json_each(?) AS j, memories AS m WHERE m.id = j.value")\n',
        # the FTS index read without going through memories.user_id
        'def f(c):\n    c.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?")\n',
        # SQL that is not static text cannot be checked
        'def f(c, table):\n    c.execute(f"DELETE FROM {table} WHERE user_id = ?")\n',
        # through bot.clients.db's read helper
        'async def f(c):\n    await fetch_all(c, "SELECT text FROM memories WHERE id = ?", (1,))\n',
    ],
    ids=[
        "implicit-concatenation",
        "module-constant",
        "for-over-statements",
        "augmented-local",
        "union-branch",
        "subquery",
        "user-id-not-bound",
        "insert-without-user-id",
        "comma-join",
        "fts-without-owner",
        "f-string",
        "read-helper",
    ],
)
def test_the_checker_finds_unscoped_sql_however_it_is_written(source):
    findings = check(source)
    # One statement per snippet is unscoped (the for-loop's other statement is not).
    assert len({f.statement for f in findings}) == 1, findings


def test_the_checker_reads_a_column_list_imported_from_a_store():
    # The statement is unscoped: it is found only if the imported constant is resolved to text.
    findings = check(
        "from bot.memory.stores.memories import MEMORY_COLUMNS\n"
        "async def f(c):\n"
        '    await fetch_all(c, "SELECT " + MEMORY_COLUMNS + " FROM memories WHERE id = ?", (1,))\n'
    )
    assert [f.statement.sql for f in findings] == [
        (
            "SELECT id, user_id, text, type, scope, story_id, place, confidence, pinned, created_at, "
            "updated_at, expires_at, source, content_hash, times_candidate, times_served, times_semantic "
            "FROM memories WHERE id = ?"
        )
    ]


def test_the_checker_accepts_the_scoped_forms_the_code_uses():
    source = (
        'COLS = "id, text"\n'
        'ERASE = ("DELETE FROM turns WHERE user_id = ?", "DELETE FROM memory_history WHERE user_id = ?")\n'
        "def f(c, u):\n"
        '    c.execute("SELECT " + COLS + " FROM memories WHERE user_id = ? AND id = ?", (u, 1))\n'
        "    for s in ERASE:\n"
        "        c.execute(s, (u,))\n"
        '    c.execute("INSERT INTO memory_history (memory_id, user_id) SELECT id, user_id FROM memories '
        'WHERE id = ? AND user_id = ? ON CONFLICT (memory_id) DO UPDATE SET user_id = excluded.user_id")\n'
        '    c.execute("SELECT m.id FROM memories_fts JOIN memories AS m ON m.id = memories_fts.rowid '
        'WHERE memories_fts MATCH ? AND m.user_id = ?")\n'
        '    c.execute("UPDATE memories SET n = n + (id IN (SELECT value FROM json_each(:ids))) '
        'WHERE user_id = :user_id")\n'
        '    c.execute(f"PRAGMA busy_timeout = {5000}")\n'
    )
    assert check(source) == []


def test_both_texts_of_a_dialect_statement_are_checked():
    findings = check(
        "ERASE = Sql('DELETE FROM turns WHERE user_id = ?', postgresql='DELETE FROM turns WHERE id = ?')\n"
        "def f(c, u):\n    c.execute(ERASE, (u,))\n"
    )
    assert [f.statement.sql for f in findings] == ["DELETE FROM turns WHERE id = ?"]
    # And the code's own PostgreSQL texts are among the statements checked.
    assert any("jsonb_array_elements_text" in (s.sql or "") for s in code_statements())
