"""Backups of the SQLite database, safe while the bot runs, and their restore with the bot stopped.

A backup is SQLite's online backup API run inside one read transaction of the source: the copy
is the database as of one moment, whatever other processes commit meanwhile (WAL mode lets
them write during the copy). It is written under a temporary name beside the target, checked
(`integrity_check`, and every table's row count against the source's, counted in that same
read transaction), made durable, and only then renamed: a backup under its final name is
always whole; a process killed during one leaves at most a `.partial` file.

A restore refuses while any process holds the database (the lock of `bot.clients.db`), checks
the backup first, and moves the replaced database, with its -wal, aside instead of deleting it.

Blocking code (the stdlib sqlite3 module): the bot runs it in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.clients.db import MIGRATIONS_DIR, hold_database, list_migrations, lock_file
from bot.clients.erasures import apply_erasures, read_ledgers
from bot.clients.outage import Outage
from bot.clients.outside_files import BACKUP_FILE, check_regular, read_head
from bot.errors import BackupError

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
# Scheduled backups are named echo-<UTC time>.sqlite3, the time to the second: rotation only ever
# deletes a file whose whole name is one of these, ordered by the time read from it, and never
# the one it has just written. Any other file in BACKUP_DIR is the operator's.
SCHEDULED_PREFIX = "echo-"
SCHEDULED_SUFFIX = ".sqlite3"
_STAMP = "%Y%m%dT%H%M%SZ"
_SCHEDULED = re.compile(r"echo-(\d{8}T\d{6}Z)\.sqlite3")
_PARTIAL = re.compile(r"\.echo-\d{8}T\d{6}Z\.sqlite3\..+\.partial")
# A .partial file this old is left by a backup that was killed: the next scheduled one removes it.
STALE_PARTIAL_SECONDS = 24 * 3600
# An overdue backup waits this long after start-up, so that it does not compete with the warm-up.
FIRST_BACKUP_DELAY = timedelta(seconds=60)
_SQLITE_MAGIC = b"SQLite format 3\x00"

# The running bot's scheduled backups: a failure (disk full, folder gone) is logged once per
# outage and counted; /metrics reads both figures (echo_backup_failures_total and the time of
# the last success, 0 before the first).
scheduled_failures = Outage(log, level=logging.ERROR)
last_success: float = 0.0


@dataclass(frozen=True, slots=True)
class BackupReport:
    path: Path
    tables: dict[str, int]
    size: int
    seconds: float

    def describe(self) -> str:
        rows = sum(self.tables.values())
        return (
            f"Backup written to {self.path} ({self.size / 1e6:.1f} MB, {len(self.tables)} tables, {rows} rows, "
            f"{self.seconds:.1f} s): integrity_check ok, every table's row count matches the database at that moment."
        )


@dataclass(frozen=True, slots=True)
class RestoreReport:
    database: Path
    replaced: Path | None
    tables: dict[str, int]
    # Owner keys erased from the restored copy: people erased after the backup was taken.
    erased: int = 0

    def describe(self) -> str:
        kept = f" The database it replaced is kept as {self.replaced}." if self.replaced else ""
        erased = (
            f" {self.erased} key(s) of people erased since this backup was taken were erased from it again (erasure ledger)."
            if self.erased
            else ""
        )
        return f"Restored {self.database} ({sum(self.tables.values())} rows checked).{erased}{kept}"


def scheduled_name(now: datetime | None = None) -> str:
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{SCHEDULED_PREFIX}{moment.strftime(_STAMP)}{SCHEDULED_SUFFIX}"


def scheduled_time(name: str) -> datetime | None:
    """When the scheduled backup `name` was taken, or None when the name is not one of ours."""
    match = _SCHEDULED.fullmatch(name)
    if match is None:
        return None
    try:
        return datetime.strptime(match.group(1), _STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None  # "echo-99999999T999999Z.sqlite3" is not a time: not one of ours


def scheduled_backups(folder: Path) -> list[tuple[datetime, Path]]:
    """The scheduled backups in `folder`, oldest first: regular files named as ours, by their time."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        taken = scheduled_time(path.name)
        if taken is not None and path.is_file() and not path.is_symlink():
            found.append((taken, path))
    return sorted(found)


def next_due(folder: Path, every: timedelta, now: datetime | None = None) -> datetime:
    """When the next scheduled backup is due: `every` after the newest one in `folder`, or soon
    when there is none or it is overdue. Read from the files, so that a bot restarted more often
    than `every` still backs up."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    taken = scheduled_backups(folder)
    if not taken:
        return moment + FIRST_BACKUP_DELAY
    return max(taken[-1][0] + every, moment + FIRST_BACKUP_DELAY)


def _count_sql(table: str) -> str:
    # A table name cannot be a bound parameter; these come from the file's own sqlite_master.
    return 'SELECT COUNT(*) FROM "' + table.replace('"', '""') + '"'


def _row_counts(conn: sqlite3.Connection) -> dict[str, int]:
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
        )
    ]
    return {name: int(conn.execute(_count_sql(name)).fetchone()[0]) for name in names}


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")  # as the bot's own connections
    return conn


def _check(path: Path, expected: dict[str, int] | None) -> dict[str, int]:
    """The file's row counts once `integrity_check` passes (and they equal `expected`, if given)."""
    conn = _connect(path)
    try:
        conn.execute("PRAGMA query_only = ON")
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise BackupError(f"{path} fails SQLite's integrity_check: {'; '.join(problems[:5])}")
        counts = _row_counts(conn)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a usable SQLite database ({exc})") from exc
    finally:
        conn.close()
    if expected is not None and counts != expected:
        differ = sorted(
            f"{table}: {expected.get(table)} in the database, {counts.get(table)} in the copy"
            for table in expected.keys() | counts.keys()
            if expected.get(table) != counts.get(table)
        )
        raise BackupError(f"the copy of {path} does not hold the database's rows ({'; '.join(differ)})")
    return counts


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _partial(target: Path) -> Path:
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX)
    os.close(fd)
    return Path(name)


def backup(database: Path, target: Path) -> BackupReport:
    """A checked copy of `database`, as of one moment, at `target` (replaced if it exists)."""
    started = time.monotonic()
    if not database.is_file():
        raise BackupError(f"there is no SQLite database at {database} (DATABASE_PATH)")
    if target.resolve() == database.resolve():
        raise BackupError(f"{target} is the database itself; name another file")
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = _partial(target)
    except OSError as exc:
        raise BackupError(f"cannot write in {target.parent} ({exc.strerror or exc})") from exc
    try:
        source = _connect(database)
        try:
            source.execute("PRAGMA query_only = ON")
            # One read transaction for the counts and the copy: both see the same moment.
            source.execute("BEGIN")
            expected = _row_counts(source)
            copy = sqlite3.connect(partial, isolation_level=None)
            try:
                # The copy is checked, then made durable, before it gets its name: a journal of
                # its own would only leave one more file behind a killed backup.
                copy.execute("PRAGMA journal_mode = OFF")
                copy.execute("PRAGMA synchronous = OFF")
                source.backup(copy)
                # One self-contained file, without a -wal beside it.
                copy.execute("PRAGMA journal_mode = DELETE")
            finally:
                copy.close()
            source.execute("COMMIT")
        finally:
            source.close()
        _check(partial, expected)
        _fsync(partial)
        partial.replace(target)
        _fsync(target.parent)
    except sqlite3.Error as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(f"the backup of {database} failed ({exc}); nothing was written to {target}") from exc
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise BackupError(
            f"the backup of {database} could not be written ({exc.strerror or exc}); nothing was written to {target}"
        ) from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return BackupReport(target, expected, target.stat().st_size, time.monotonic() - started)


def backup_and_rotate(
    database: Path, folder: Path, keep: int, now: datetime | None = None
) -> tuple[BackupReport, list[Path]]:
    """A scheduled backup into `folder`, then the oldest scheduled ones beyond `keep` deleted
    (and .partial files left by a killed backup a day ago). Returns the report and what was deleted."""
    written = folder / scheduled_name(now)
    report = backup(database, written)
    # The one just written counts among the `keep`, and is never deleted.
    older = [path for _, path in scheduled_backups(folder) if path != written]
    removed = older[: max(0, len(older) - (keep - 1))]
    cutoff = time.time() - STALE_PARTIAL_SECONDS
    removed += [
        p for p in folder.iterdir() if _PARTIAL.fullmatch(p.name) and p.is_file() and p.stat().st_mtime < cutoff
    ]
    for path in removed:
        path.unlink(missing_ok=True)
    return report, removed


def schema_of(conn: sqlite3.Connection) -> set[tuple[str, str, str]]:
    """The (type, name, statement) of every table, index, trigger and view the file defines,
    statements with their spaces collapsed; SQLite's own objects left out."""
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    return {(str(kind), str(name), " ".join(str(sql or "").split())) for kind, name, sql in rows}


def migrated_schema(version: int, directory: Path = MIGRATIONS_DIR) -> set[tuple[str, str, str]]:
    """The schema Écho's migrations 1..`version` give a new database (built in memory)."""
    conn = sqlite3.connect(":memory:")
    try:
        for number, path in list_migrations(directory):
            if number > version:
                break
            conn.executescript(path.read_text(encoding="utf-8"))
        return schema_of(conn)
    finally:
        conn.close()


def check_backup(path: Path) -> dict[str, int]:
    """Row counts of a backup file fit to be restored; BackupError saying why it is not.

    Écho's database is told by its migration record (`PRAGMA user_version`, set by each
    migration) and its schema, which must be exactly the one Écho's migrations give at that
    version: another program's SQLite file with a `memories` table is not a backup."""
    if not path.exists() and not path.is_symlink():
        raise BackupError(f"there is no backup file at {path}")
    check_regular(path, BACKUP_FILE)
    if read_head(path, BACKUP_FILE, len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
        raise BackupError(f"{path} is not an SQLite database")
    counts = _check(path, None)
    conn = _connect(path)
    try:
        conn.execute("PRAGMA query_only = ON")
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        found = schema_of(conn)
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a usable SQLite database ({exc})") from exc
    finally:
        conn.close()
    known = len(list_migrations())
    if version > known:
        raise BackupError(
            f"{path} was written by a newer Écho (schema {version}, this one knows {known}): update Écho first"
        )
    if version < 1:
        raise BackupError(
            f"{path} is an SQLite database, but not one of Écho: no migration of Écho was ever applied to it"
        )
    expected = migrated_schema(version)
    if found != expected:
        differs = sorted({name for _, name, _ in found ^ expected})[:3]
        raise BackupError(
            f"{path} is an SQLite database, but not one of Écho: its schema is not the one of Écho's migration "
            f"{version} ({', '.join(differs)} differ{'s' if len(differs) == 1 else ''})"
        )
    return counts


def restore(path: Path, database: Path, now: datetime | None = None, *, ledgers: Sequence[Path] = ()) -> RestoreReport:
    """Put the backup `path` in place of `database`, with no process using it. The replaced
    database is renamed "<name>.before-restore-<UTC time>" (with its -wal), never deleted.
    Every erasure the `ledgers` hold that the backup predates is applied to the copy before it
    takes the database's place: a restore never brings an erased person back."""
    counts = check_backup(path)
    erasures = read_ledgers(ledgers)
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
        lock = hold_database(database, exclusive=True)
    except OSError as exc:
        raise BackupError(f"cannot write in {database.parent} ({exc.strerror or exc}); nothing was changed") from exc
    if lock is None:
        raise BackupError(
            f"a bot process is using {database} (it holds {lock_file(database)}): stop it "
            "(docker compose stop, systemctl stop, Ctrl-C), then restore again. Nothing was changed."
        )
    try:
        partial = _partial(database)
        try:
            shutil.copyfile(path, partial)
            _check(partial, counts)
            erased = apply_erasures(partial, erasures)
            if erased:
                _check(partial, None)
            _fsync(partial)
            replaced: Path | None = None
            if database.exists():
                stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
                replaced = database.with_name(f"{database.name}.before-restore-{stamp}")
                # The -wal may hold the last commits of a bot killed hard: it goes with its file.
                for suffix in ("-wal", "-shm", ""):
                    old = database.with_name(database.name + suffix)
                    if old.exists():
                        old.replace(replaced.with_name(replaced.name + suffix))
            partial.replace(database)
            _fsync(database.parent)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise BackupError(f"the restore into {database} failed ({exc.strerror or exc})") from exc
    except sqlite3.Error as exc:
        raise BackupError(
            f"the erasures could not be applied to the restored copy ({exc}); nothing was changed"
        ) from exc
    finally:
        os.close(lock)
    return RestoreReport(database, replaced, counts, erased)


async def scheduled_backup(database: Path, folder: Path, keep: int) -> None:
    """The job BACKUP_EVERY_HOURS runs: `backup_and_rotate` in a thread, its failure counted."""
    global last_success
    try:
        report, removed = await asyncio.to_thread(backup_and_rotate, database, folder, keep)
    except BackupError as exc:
        scheduled_failures.failed("scheduled backup failed, the previous ones are kept: %s", exc)
        return
    scheduled_failures.recovered("scheduled backups work again after %d failure(s)")
    last_success = time.time()
    log.info("%s%s", report.describe(), f" Deleted {len(removed)} older." if removed else "")
