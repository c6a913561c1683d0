"""The erasure ledger: every `/erase-me` recorded outside the database, so that a restored backup
never brings an erased person back.

An erase writes one line, `{"person": <hash>, "at": <UTC time>}`, to `<database>.erasures.jsonl`
beside the SQLite database and in BACKUP_DIR (the backups' folder survives a lost data folder),
before its transaction; the transaction writes the same pair into the database's `erasures`
table. A backup taken after the erase holds that pair; one taken before does not, and
`python -m bot restore` erases the person from the restored copy again (every row of every table
with a `user_id` of theirs: their own id and each `<id>@<character>` key) before it takes the
database's place, then records the pair in it.

The ledger keeps a SHA-256 of the person's id, not the id: whoever holds an id can tell it was
erased, and nothing else of the person is kept. It is never rotated: its lines are what make old
backups safe to restore.

Blocking code (the stdlib sqlite3 module and file appends): the engine writes through a thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bot.clients.outage import Outage
from bot.clients.outside_files import ERASURE_LEDGER, read_text
from bot.clients.storage import to_db
from bot.errors import BackupError

log = logging.getLogger(__name__)

LEDGER_SUFFIX = ".erasures.jsonl"
# A person's own id and the keys of characters with a memory of their own (bot/characters/cast.py).
KEY_SEPARATOR = "@"
_HASHED = "écho erasure:"

# An erase whose ledger line cannot be written still erases (the database is what the person
# asked about): the failure is logged once per outage and counted.
failures = Outage(log, level=logging.ERROR)


def person_hash(person: str) -> str:
    return hashlib.sha256((_HASHED + person).encode()).hexdigest()


@dataclass(frozen=True, slots=True, order=True)
class Erasure:
    person_hash: str
    at: str  # as the database stores dates (bot.clients.db.to_db)

    @classmethod
    def of(cls, person: str, at: datetime) -> Erasure:
        return cls(person_hash(person), to_db(at) or "")


def ledger_paths(database: Path, *folders: Path) -> list[Path]:
    """The erasure ledgers of `database`: beside it, and in each of `folders` (the backups'),
    each once."""
    name = database.name + LEDGER_SUFFIX
    paths: dict[Path, Path] = {}
    for folder in (database.parent, *folders):
        paths.setdefault((folder / name).resolve(), folder / name)
    return list(paths.values())


class ErasureLedger:
    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def append(self, erasure: Erasure) -> None:
        """One line in every ledger, made durable (private to this user, whatever the umask)."""
        line = (json.dumps({"person": erasure.person_hash, "at": erasure.at}) + "\n").encode()
        for path in self.paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    os.fchmod(fd, 0o600)
                    os.write(fd, line)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                failures.failed(
                    "the erasure ledger %s cannot be written (%s): restores may bring erased people back", path, exc
                )
                continue
            failures.recovered("the erasure ledger can be written again after %d failure(s)")


def read_ledgers(paths: Iterable[Path]) -> set[Erasure]:
    """Every erasure the ledgers that exist hold; a damaged line stops the restore, named."""
    found: set[Erasure] = set()
    for path in paths:
        if not path.exists() and not path.is_symlink():
            continue
        for number, line in enumerate(read_text(path, ERASURE_LEDGER).splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                found.add(Erasure(str(record["person"]), str(record["at"])))
            except (ValueError, KeyError, TypeError):
                raise BackupError(f"{path}: line {number} is not an erasure; correct or remove that line") from None
    return found


def _quoted(name: str) -> str:
    # A table name cannot be a bound parameter; these come from the file's own sqlite_master.
    return '"' + name.replace('"', '""') + '"'


def _keys_sql(table: str) -> str:
    return "SELECT DISTINCT user_id FROM " + _quoted(table)


def _erase_sql(table: str) -> str:
    return "DELETE FROM " + _quoted(table) + " WHERE user_id = ?"


def _tables_with_users(conn: sqlite3.Connection) -> list[str]:
    tables = [
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
        )
    ]
    with_users = [
        t for t in tables if any(c[1] == "user_id" for c in conn.execute("PRAGMA table_info(" + _quoted(t) + ")"))
    ]
    # The memories first: their deletion writes version rows (triggers), deleted after them.
    return sorted(with_users, key=lambda t: (t not in ("memories", "memory_vectors"), t))


def apply_erasures(path: Path, erasures: set[Erasure]) -> int:
    """Erase from the SQLite file `path` every person an erasure names that the file does not
    record yet (the file predates that erase), in one transaction; the number of keys erased."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA secure_delete = ON")
        held = {Erasure(str(h), str(a)) for h, a in conn.execute("SELECT person_hash, erased_at FROM erasures")}
        missing = erasures - held
        if not missing:
            return 0
        wanted = {e.person_hash for e in missing}
        tables = _tables_with_users(conn)
        keys: set[str] = set()
        for table in tables:
            for (key,) in conn.execute(_keys_sql(table)):
                if person_hash(str(key).split(KEY_SEPARATOR, 1)[0]) in wanted:
                    keys.add(str(key))
        conn.execute("BEGIN IMMEDIATE")
        for key in sorted(keys):
            for table in tables:
                conn.execute(_erase_sql(table), (key,))
        for erasure in sorted(missing):
            conn.execute(
                "INSERT OR IGNORE INTO erasures (person_hash, erased_at) VALUES (?, ?)",
                (erasure.person_hash, erasure.at),
            )
        # The erased words leave the full-text index's shadow tables too, as after an erase.
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")
        conn.execute("COMMIT")
        return len(keys)
    finally:
        conn.close()
