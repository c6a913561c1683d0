"""What the database and its backups do with files that are not theirs, and with who may read
them, through what the operator runs:

- the scheduled backup job (`scheduled_backup`, what BACKUP_EVERY_HOURS runs in the bot) deletes
  only the backups it wrote, by their exact name and time, never the one it has just written
  (an operator's `echo-2026-11-30-before-upgrade.sqlite3` or `echo-keep-forever.sqlite3` in the
  same folder is kept, BACKUP_KEEP=1 included);
- `python -m bot restore` tells Écho's database by its migration record and schema: another
  program's SQLite file with a `memories` table is refused, the database untouched;
- the database, its -wal and -shm (and the terminal's /export) are created readable by this user
  only whatever the umask (`python -m bot chat` run under umask 000), and `python -m bot doctor`
  says when an existing database is open to other users.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.clients import backup
from bot.clients.db import SQLiteDatabase
from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_module

TIMEOUT = 60.0


def integrity(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


async def _database(path: Path) -> None:
    db = await SQLiteDatabase.open(path)
    await db.close()


# --- rotation ---------------------------------------------------------------------------------

OPERATORS = {
    "echo-2026-11-30-before-upgrade.sqlite3": b"before the upgrade",
    "echo-keep-forever.sqlite3": b"keep forever",
    "echo-99999999T999999Z.sqlite3": b"looks like ours, is no time",
    "echo-20260101T000000Z.sqlite3.bak": b"a copy the operator made",
    ".echo-notes.partial": b"not a partial of ours",
}


@pytest.mark.parametrize("keep", [1, 2])
async def test_the_scheduled_job_deletes_only_its_own_backups_and_never_the_one_it_just_wrote(
    tmp_path: Path, keep: int
) -> None:
    database, folder = tmp_path / "echo.sqlite3", tmp_path / "backups"
    await _database(database)
    folder.mkdir()
    for name, content in OPERATORS.items():
        (folder / name).write_bytes(content)
        os.utime(folder / name, (0, 0))  # old: a rotation by age would take them too
    # Hours before now: the job's own backup, at the real time, is the newest.
    start = datetime.now(UTC) - timedelta(hours=10)
    written = []
    for hour in range(4):
        report, _ = backup.backup_and_rotate(database, folder, keep, now=start + timedelta(hours=hour))
        written.append(report.path.name)
        assert report.path.exists() and integrity(report.path) == ["ok"], f"the backup of {hour}:00 deleted itself"
    # What the bot's job runs, at the real time: it reports success only with its backup kept.
    await backup.scheduled_backup(database, folder, keep)
    ours = sorted(p.name for p in folder.iterdir() if p.name not in OPERATORS)
    assert len(ours) == keep and ours[-1] not in written, ours
    if keep == 2:
        assert ours[0] == written[-1]
    for name, content in OPERATORS.items():
        assert (folder / name).read_bytes() == content, f"{name} was touched"
    assert backup.last_success > 0


# --- restore: Écho's database only --------------------------------------------------------------


def _foreign(path: Path, *, version: int = 0) -> None:
    """Another program's SQLite file: a `memories` table of its own, and maybe a user_version."""
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE memories (id INTEGER PRIMARY KEY, title TEXT, body TEXT);"
        "INSERT INTO memories (title, body) VALUES ('groceries', 'eggs');"
        f"PRAGMA user_version = {version};"
    )
    conn.commit()
    conn.close()


def _echo_with_a_stranger_table(path: Path) -> None:
    """An Écho database another program added a table to."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE their_notes (n TEXT)")
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    "kind", ["memories table, no migration", "memories table, user_version 9", "Écho's plus a table"]
)
async def test_restore_refuses_another_program_s_sqlite_file_and_changes_nothing(tmp_path: Path, kind: str) -> None:
    database, other = tmp_path / "echo.sqlite3", tmp_path / "other.sqlite3"
    await _database(database)
    before = database.read_bytes()
    if kind == "Écho's plus a table":
        await _database(other)
        _echo_with_a_stranger_table(other)
    else:
        _foreign(other, version=0 if "no migration" in kind else 9)
    run = await run_module(chat_env("http://127.0.0.1:9", database), tmp_path, ["bot", "restore", str(other)])
    assert run.code == 1, (run.stdout, run.stderr)
    assert "Nothing was restored" in run.stderr and "not one of Écho" in run.stderr, run.stderr
    assert database.read_bytes() == before
    assert not list(tmp_path.glob("*before-restore*"))


async def test_restore_still_takes_a_backup_of_echo(tmp_path: Path) -> None:
    database = tmp_path / "echo.sqlite3"
    await _database(database)
    run = await run_module(
        chat_env("http://127.0.0.1:9", database), tmp_path, ["bot", "backup", str(tmp_path / "b.sqlite3")]
    )
    assert run.code == 0, run.stderr
    run = await run_module(
        chat_env("http://127.0.0.1:9", database), tmp_path, ["bot", "restore", str(tmp_path / "b.sqlite3")]
    )
    assert run.code == 0 and "Restored" in run.stdout, run.stderr


# --- private files ------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_database_its_wal_and_shm_are_private_whatever_the_umask(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.handler = lambda r: "{}" if r.json_schema is not None else "Bonjour !"
    database = tmp_path / "data" / "echo.sqlite3"
    env = chat_env(llm_server.url, database)

    def open_umask() -> None:
        os.umask(0)

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat", "--user", "alice",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env, cwd=tmp_path, preexec_fn=open_umask,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"Bonjour\n")
        while b"Bonjour !" not in await asyncio.wait_for(proc.stdout.readline(), TIMEOUT):
            pass
        # The chat still holds the database: its -wal and -shm are there.
        files = [database, Path(f"{database}-wal"), Path(f"{database}-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: oct(_mode(f)) for f in files} == {f.name: "0o600" for f in files}
        assert _mode(database.parent) & 0o077 == 0, "the folder Écho created is open to others"
        # The terminal's /export holds everything stored about the user: private too.
        proc.stdin.write(b"/export mine.json\n")
        while b"Written to" not in await asyncio.wait_for(proc.stdout.readline(), TIMEOUT):
            pass
        assert oct(_mode(tmp_path / "mine.json")) == "0o600"
    finally:
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), TIMEOUT)


async def test_doctor_says_when_an_existing_database_is_readable_by_others(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    database = tmp_path / "echo.sqlite3"
    await _database(database)
    env = chat_env(llm_server.url, database)
    database.chmod(0o644)
    run = await run_module(env, tmp_path, ["bot", "doctor"])
    assert "✗ database privacy: echo.sqlite3 (644) can be read by other users" in run.stdout, run.stdout
    assert f"chmod 600 {database}*" in run.stdout
    for path in tmp_path.glob("echo.sqlite3*"):  # the fix it gives: chmod 600 <database>*
        path.chmod(0o600)
    run = await run_module(env, tmp_path, ["bot", "doctor"])
    assert "✓ database privacy: readable by this user only" in run.stdout, run.stdout
