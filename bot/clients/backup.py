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
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bot.clients.db import hold_database, list_migrations, lock_file
from bot.clients.outage import Outage
from bot.errors import BackupError

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
# Scheduled backups are named echo-<UTC time>.sqlite3; rotation only ever deletes such names.
SCHEDULED_PREFIX = "echo-"
SCHEDULED_SUFFIX = ".sqlite3"
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

    def describe(self) -> str:
        kept = f" The database it replaced is kept as {self.replaced}." if self.replaced else ""
        return f"Restored {self.database} ({sum(self.tables.values())} rows checked).{kept}"


def scheduled_name(now: datetime | None = None) -> str:
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{SCHEDULED_PREFIX}{moment.strftime('%Y%m%dT%H%M%SZ')}{SCHEDULED_SUFFIX}"


def next_due(folder: Path, every: timedelta, now: datetime | None = None) -> datetime:
    """When the next scheduled backup is due: `every` after the newest one in `folder`, or soon
    when there is none or it is overdue. Read from the files, so that a bot restarted more often
    than `every` still backs up."""
    moment = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    taken = []
    for path in folder.glob(f"{SCHEDULED_PREFIX}*{SCHEDULED_SUFFIX}") if folder.is_dir() else ():
        stamp = path.name.removeprefix(SCHEDULED_PREFIX).removesuffix(SCHEDULED_SUFFIX)
        try:
            taken.append(datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc))
        except ValueError:
            continue  # not one of ours
    if not taken:
        return moment + FIRST_BACKUP_DELAY
    return max(max(taken) + every, moment + FIRST_BACKUP_DELAY)


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
        target.parent.mkdir(parents=True, exist_ok=True)
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
        os.replace(partial, target)
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


def backup_and_rotate(database: Path, folder: Path, keep: int, now: datetime | None = None) -> tuple[BackupReport, list[Path]]:
    """A scheduled backup into `folder`, then the oldest scheduled ones beyond `keep` deleted
    (and .partial files left by a killed backup a day ago). Returns the report and what was deleted."""
    report = backup(database, folder / scheduled_name(now))
    ours = sorted(
        p for p in folder.iterdir() if p.name.startswith(SCHEDULED_PREFIX) and p.name.endswith(SCHEDULED_SUFFIX)
    )
    removed = ours[: max(0, len(ours) - keep)]
    cutoff = time.time() - STALE_PARTIAL_SECONDS
    removed += [
        p for p in folder.glob(f".{SCHEDULED_PREFIX}*{PARTIAL_SUFFIX}*") if p.stat().st_mtime < cutoff
    ]
    for path in removed:
        path.unlink(missing_ok=True)
    return report, removed


def _schema_version(path: Path) -> int:
    conn = _connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def check_backup(path: Path) -> dict[str, int]:
    """Row counts of a backup file fit to be restored; BackupError saying why it is not."""
    if not path.is_file():
        raise BackupError(f"there is no backup file at {path}")
    with path.open("rb") as file:
        if file.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
            raise BackupError(f"{path} is not an SQLite database")
    counts = _check(path, None)
    if "memories" not in counts:
        raise BackupError(f"{path} is an SQLite database, but not one of Écho (it has no memories table)")
    version, known = _schema_version(path), len(list_migrations())
    if version > known:
        raise BackupError(
            f"{path} was written by a newer Écho (schema {version}, this one knows {known}): update Écho first"
        )
    return counts


def restore(path: Path, database: Path, now: datetime | None = None) -> RestoreReport:
    """Put the backup `path` in place of `database`, with no process using it. The replaced
    database is renamed "<name>.before-restore-<UTC time>" (with its -wal), never deleted."""
    counts = check_backup(path)
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
            _fsync(partial)
            replaced: Path | None = None
            if database.exists():
                stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
                replaced = database.with_name(f"{database.name}.before-restore-{stamp}")
                # The -wal may hold the last commits of a bot killed hard: it goes with its file.
                for suffix in ("-wal", "-shm", ""):
                    old = database.with_name(database.name + suffix)
                    if old.exists():
                        os.replace(old, replaced.with_name(replaced.name + suffix))
            os.replace(partial, database)
            _fsync(database.parent)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise BackupError(f"the restore into {database} failed ({exc.strerror or exc})") from exc
    finally:
        os.close(lock)
    return RestoreReport(database, replaced, counts)


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
