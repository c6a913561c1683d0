"""`python -m bot backup` while real `python -m bot chat` processes write, `restore` with them
stopped, and a backup killed halfway: the real commands, the real processes, a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.clients.backup import backup_and_rotate
from bot.clients.db import SQLiteDatabase
from tests.fakes.llm_server import FakeLLMServer, LLMRequest
from tests.reliability.process import chat_env

TIMEOUT = 60.0
FACT = re.compile(r"J'ai (\d+) chats")


def answer(request: LLMRequest) -> str:
    if request.json_schema is None:
        return "Noté."
    said = FACT.findall("\n".join(str(m.get("content", "")) for m in request.messages))
    memories = [{"text": f"L'utilisateur a {said[-1]} chats.", "type": "fact", "confidence": 0.95}] if said else []
    return json.dumps({"memories": memories})


class Chat:
    """One `python -m bot chat --user USER`, fed a line at a time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, env: dict[str, str], cwd: Path, user: str) -> Chat:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "chat",
            "--user",
            user,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
        return cls(proc)

    def send(self, *lines: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(line + "\n" for line in lines).encode())

    async def expect(self, marker: str, times: int = 1) -> None:
        assert self.proc.stdout is not None
        seen = 0
        while seen < times:
            line = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
            if not line:
                err = await self.proc.stderr.read() if self.proc.stderr else b""
                raise AssertionError(f"the chat ended before {marker!r}: {err.decode()[-2000:]}")
            seen += marker in line.decode()

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert await asyncio.wait_for(self.proc.wait(), TIMEOUT) == 0


async def command(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def exchanges(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM exchanges").fetchone()[0])
    finally:
        conn.close()


def integrity(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def exported(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop("exported_at")
    return data


async def test_a_backup_taken_while_two_chats_write_is_whole_and_restores_their_export(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.handler = answer
    database = tmp_path / "echo.sqlite3"
    env = chat_env(llm_server.url, database)
    # Created first: two processes starting on no file at all would both migrate it.
    await (await SQLiteDatabase.open(database)).close()
    alice, bob = await Chat.start(env, tmp_path, "alice"), await Chat.start(env, tmp_path, "bob")
    try:
        # Both write at once while the backup is taken.
        alice.send(*(f"J'ai {n} chats." for n in range(1, 21)))
        bob.send(*(f"J'ai {n} chats." for n in range(101, 121)))
        while exchanges(database) < 2:
            await asyncio.sleep(0.02)
        before = exchanges(database)
        code, out, err = await command(env, tmp_path, "backup", str(tmp_path / "during.sqlite3"))
        after = exchanges(database)
        assert code == 0, err
        assert "integrity_check ok" in out
        assert alice.proc.returncode is None and bob.proc.returncode is None
        assert integrity(tmp_path / "during.sqlite3") == ["ok"]
        # As of one moment between the start and the end of the command, while both still wrote.
        assert before <= exchanges(tmp_path / "during.sqlite3") <= after < 40
        await asyncio.gather(alice.expect("Noté.", 20), bob.expect("Noté.", 20))

        # A known moment: both idle. Their export, then the backup.
        alice.send(f"/export {tmp_path / 'alice-then.json'}")
        bob.send(f"/export {tmp_path / 'bob-then.json'}")
        await asyncio.gather(alice.expect("Written to"), bob.expect("Written to"))
        code, out, err = await command(env, tmp_path, "backup", str(tmp_path / "kept.sqlite3"))
        assert code == 0, err

        # Later writes, then a restore attempted while the chats still hold the database.
        alice.send("J'ai 50 chats.")
        bob.send("J'ai 150 chats.")
        await asyncio.gather(alice.expect("Noté."), bob.expect("Noté."))
        code, out, err = await command(env, tmp_path, "restore", str(tmp_path / "kept.sqlite3"))
        assert code == 1
        assert "a bot process is using" in err and "Nothing was changed" in err
        assert exchanges(database) == 42
    finally:
        for chat in (alice, bob):
            if chat.proc.returncode is None:
                await chat.close()

    code, out, err = await command(env, tmp_path, "restore", str(tmp_path / "kept.sqlite3"))
    assert code == 0, err
    kept_aside = next(tmp_path.glob("echo.sqlite3.before-restore-*"))
    assert exchanges(kept_aside) == 42, "the replaced database is kept, its last commits included"
    for user in ("alice", "bob"):
        reader = await Chat.start(env, tmp_path, user)
        reader.send(f"/export {tmp_path / f'{user}-now.json'}")
        await reader.expect("Written to")
        await reader.close()
        assert exported(tmp_path / f"{user}-now.json") == exported(tmp_path / f"{user}-then.json")
    texts = {m["text"] for m in exported(tmp_path / "alice-now.json")["memories"]}
    assert "L'utilisateur a 20 chats." in texts and "L'utilisateur a 50 chats." not in texts


async def _big_database(path: Path) -> None:
    db = await SQLiteDatabase.open(path)
    await db.close()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE ballast (b BLOB)")
    conn.executemany("INSERT INTO ballast VALUES (randomblob(1000000))", [()] * 60)
    conn.commit()
    conn.close()


async def test_a_backup_killed_halfway_leaves_nothing_under_its_name(tmp_path: Path) -> None:
    database, target = tmp_path / "echo.sqlite3", tmp_path / "backups" / "echo-backup.sqlite3"
    await _big_database(database)
    env = chat_env("http://127.0.0.1:9", database)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "backup",
        str(target),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + TIMEOUT
    while not list(target.parent.glob(".*.partial")) and proc.returncode is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)
    proc.send_signal(signal.SIGKILL)
    assert await proc.wait() == -signal.SIGKILL
    assert not target.exists()
    left = [p.name for p in target.parent.iterdir()]
    assert left and all(name.startswith(".echo-backup.sqlite3.") and ".partial" in name for name in left), left
    assert integrity(database) == ["ok"]

    # The next backup under that name is whole.
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "backup",
        str(target),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    _out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 0, err.decode()
    assert integrity(target) == ["ok"]


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"", "not an SQLite database"), (b"SQLite format 3\x00" + b"\x00" * 200, "not a usable SQLite database")],
)
async def test_restore_refuses_a_file_that_is_not_a_backup_and_changes_nothing(
    tmp_path: Path, content: bytes, said: str
) -> None:
    database = tmp_path / "echo.sqlite3"
    db = await SQLiteDatabase.open(database)
    await db.close()
    before = database.read_bytes()
    (tmp_path / "bad.sqlite3").write_bytes(content)
    code, _out, err = await command(chat_env("http://127.0.0.1:9", database), tmp_path, "restore", "bad.sqlite3")
    assert code == 1 and said in err
    assert database.read_bytes() == before
    assert not list(tmp_path.glob("*before-restore*"))


async def test_scheduled_backups_keep_the_newest_and_touch_no_other_file(tmp_path: Path) -> None:
    database, folder = tmp_path / "echo.sqlite3", tmp_path / "backups"
    db = await SQLiteDatabase.open(database)
    await db.close()
    folder.mkdir()
    (folder / "mine.sqlite3").write_bytes(b"an operator's own file")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for hour in range(5):
        report, _removed = backup_and_rotate(database, folder, keep=3, now=start + timedelta(hours=hour))
        assert integrity(report.path) == ["ok"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "echo-20260101T020000Z.sqlite3",
        "echo-20260101T030000Z.sqlite3",
        "echo-20260101T040000Z.sqlite3",
        "mine.sqlite3",
    ]


async def test_a_failing_scheduled_backup_logs_once_and_counts_each_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from bot.clients import backup
    from bot.clients.metrics import Metrics

    def scraped() -> dict[str, float]:
        text = Metrics().exposition().decode()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if "backup" in s.name}

    database = tmp_path / "echo.sqlite3"
    await (await SQLiteDatabase.open(database)).close()
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the backup folder should be", encoding="utf-8")
    before = scraped()
    with caplog.at_level("INFO", logger="bot.clients.backup"):
        await backup.scheduled_backup(database, blocked / "backups", 7)
        await backup.scheduled_backup(database, blocked / "backups", 7)
        failed = scraped()
        assert failed["echo_backup_failures_total"] - before["echo_backup_failures_total"] == 2
        assert (
            failed["echo_backup_last_success_timestamp_seconds"] == before["echo_backup_last_success_timestamp_seconds"]
        )
        assert len([r for r in caplog.records if "scheduled backup failed" in r.getMessage()]) == 1
        blocked.unlink()
        started = time.time()
        await backup.scheduled_backup(database, blocked / "backups", 7)
    assert not backup.scheduled_failures.down
    assert scraped()["echo_backup_last_success_timestamp_seconds"] >= started
    assert "scheduled backups work again after 2 failure(s)" in caplog.text
    (kept,) = (blocked / "backups").iterdir()
    assert integrity(kept) == ["ok"]


async def test_restore_into_a_folder_it_cannot_write_says_so_and_changes_nothing(tmp_path: Path) -> None:
    database = tmp_path / "data" / "echo.sqlite3"
    await (await SQLiteDatabase.open(database)).close()
    code, _out, err = await command(chat_env("http://127.0.0.1:9", database), tmp_path, "backup", "kept.sqlite3")
    assert code == 0, err
    blocked = tmp_path / "file"
    blocked.write_text("not a folder", encoding="utf-8")
    env = chat_env("http://127.0.0.1:9", blocked / "echo.sqlite3")
    code, _out, err = await command(env, tmp_path, "restore", "kept.sqlite3")
    assert code == 1 and "Nothing was restored: cannot write in" in err and "Traceback" not in err
    assert blocked.read_text(encoding="utf-8") == "not a folder"


def test_the_next_scheduled_backup_follows_the_newest_one_on_disk_so_restarts_do_not_skip_it(tmp_path: Path) -> None:
    from bot.clients.backup import FIRST_BACKUP_DELAY, next_due, scheduled_name

    now = datetime(2026, 1, 2, 12, tzinfo=UTC)
    day = timedelta(hours=24)
    assert next_due(tmp_path / "none-yet", day, now) == now + FIRST_BACKUP_DELAY
    (tmp_path / scheduled_name(now - timedelta(hours=5))).write_bytes(b"")
    (tmp_path / "echo-notatime.sqlite3").write_bytes(b"")
    assert next_due(tmp_path, day, now) == now + timedelta(hours=19)
    assert next_due(tmp_path, timedelta(hours=2), now) == now + FIRST_BACKUP_DELAY, "overdue: soon after start-up"
