"""A full disk and a read-only database: a clear error, no corruption, nothing acknowledged lost.

Disk full two ways: a real 1 MB tmpfs filled by another file (needs root with mount rights;
skipped otherwise), and SQLite's own page limit (PRAGMA max_page_count), which fails a write
with the same SQLITE_FULL wherever the suite runs. Read-only: a tmpfs remounted read-only as
root, or file permissions for any other user (root ignores them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.app import open_services
from bot.clients.db import SQLiteDatabase
from bot.config import load_settings
from bot.errors import StartupError
from bot.memory.stores.memory_store import MemoryStore
from bot.presenting import storage_failed
from bot.terminal.chat import session_for
from bot.terminal.commands import Session, run_command
from tests.builders import make_engine, msg
from tests.fakes.llm_server import FAKE_MODEL, LLMRequest

MAX_TURNS = 300
FACT = "L'utilisateur est allergique aux arachides."


def mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); the page-limit case covers disk full")


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    mount_tmpfs(where, size)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def reflection(request: LLMRequest) -> str:
    if request.json_schema is None:
        return "D'accord."
    if "arachides" in request.last_user.split("The exchange:", 1)[-1]:
        return json.dumps({"memories": [{"text": FACT, "type": "fact", "confidence": 0.95}]})
    return "{}"


class FullDisk:
    """Fills the database's disk, then frees it."""

    def __init__(self, kind: str, db: SQLiteDatabase, folder: Path) -> None:
        self.kind, self.db, self.filler = kind, db, folder / "filler"

    async def fill(self) -> None:
        if self.kind == "page_limit":
            async with self.db.reader.execute("PRAGMA page_count") as cur:
                (pages,) = await cur.fetchone()
            async with self.db.write() as conn:
                await conn.execute("PRAGMA max_page_count = " + str(int(pages)))
            return
        with self.filler.open("wb") as out, contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
                out.flush()

    async def free(self) -> None:
        if self.kind == "page_limit":
            async with self.db.write() as conn:
                await conn.execute("PRAGMA max_page_count = 1073741823")
        else:
            self.filler.unlink()


@pytest.mark.parametrize("kind", ["tmpfs", "page_limit"])
async def test_a_full_disk_refuses_clearly_and_loses_nothing_acknowledged(kind, http, llm_server, tmp_path, caplog):
    folder = tmp_path / "disk"
    with tmpfs(folder, "2m") if kind == "tmpfs" else contextlib.nullcontext(folder.mkdir()):
        db = await SQLiteDatabase.open(folder / "echo.sqlite3")
        try:
            engine = make_engine(db, http, llm_server, tmp_path)
            store = MemoryStore(db)
            llm_server.handler = reflection
            disk = FullDisk(kind, db, folder)
            await disk.fill()

            answered: list[str] = []
            refused = None
            for n in range(MAX_TURNS):
                text = f"Message {n} : " + "blabla " * 500
                result = await engine.conversation.turn(msg(text))
                if result.reply is None:
                    refused = result
                    break
                answered.append(text.strip())
                await engine.conversation.wait_recorded("alice")
            assert refused is not None, f"{MAX_TURNS} turns fitted on a full disk"
            assert refused.failure == "storage_down" and refused.error
            assert "full" in refused.error and str(folder) in refused.error
            # A command says so in plain words instead of failing with a traceback. A short
            # memory may still fit in a page's free space: the disk fills up a little more.
            session = Session("alice", "Alice", "chan-1", "guild-1")
            answers = []
            for n in range(MAX_TURNS):
                answers.append(
                    await run_command(engine, session, f"/remember J'habite au numéro {n} de la rue {'x' * 400}.")
                )
                if not answers[-1].startswith("Remembered"):
                    break
            assert answers[-1] == storage_failed()
            assert db.storage.failures >= 2
            logged = [r for r in caplog.records if r.name == "bot.clients.db" and r.levelno >= logging.ERROR]
            assert len(logged) == 1

            await disk.free()
            result = await engine.conversation.turn(msg("Je suis allergique aux arachides."))
            assert result.reply == "D'accord."
            engine.operator.schedule_reflection("alice")
            await engine.operator.wait_reflections("alice")
            kept = len(answers) - 1
            assert [m.text for m in await store.list("alice")][kept:] == [FACT]
            # Every message that got an answer is stored, whole.
            stored = [e["message"] for e in (await engine.privacy.export("alice"))["exchanges"]]
            assert stored == [*answered, "Je suis allergique aux arachides."]
            async with db.reader.execute("PRAGMA integrity_check") as cur:
                assert [tuple(r) for r in await cur.fetchall()] == [("ok",)]
        finally:
            await engine.operator.wait_background(10)
            await db.close()


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[str]:
    """Make `folder` read-only for this process; yields what the error must say."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield "read-only file system"
    else:
        for path in folder.iterdir():
            path.chmod(0o444)
        folder.chmod(0o555)
        try:
            yield "may not write"
        finally:
            folder.chmod(0o755)


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


async def test_a_read_only_database_stops_start_up_with_one_clear_reason(llm_server, tmp_path):
    folder = tmp_path / "data"
    settings = load_settings(
        _env_file=None,
        llm_base_url=llm_server.url,
        llm_model=FAKE_MODEL,
        database_path=folder / "echo.sqlite3",
        embeddings="local",
    )
    with tmpfs(folder, "8m") if os.geteuid() == 0 else contextlib.nullcontext(folder.mkdir()):
        async with open_services(settings) as services:
            await services.engine.memories.remember(
                session_for("Camille", "main").user_id, FACT, story_id="s", place="terminal"
            )
        before = digest(folder)
        with read_only(folder) as expected:
            with pytest.raises(StartupError) as raised:
                async with open_services(settings):
                    pass
            assert expected in str(raised.value) and "DATABASE_PATH" in str(raised.value)
            assert digest(folder) == before
            # immutable: a read-only mount has no room for the -shm file a normal open makes.
            with sqlite3.connect(f"file:{folder / 'echo.sqlite3'}?immutable=1", uri=True) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                assert conn.execute("SELECT text FROM memories WHERE type = 'fact'").fetchall() == [(FACT,)]
