"""A restore never brings back an erased person, through the commands an operator runs: the real
`python -m bot chat` (where `/erase-me yes` is typed), `python -m bot backup` and `python -m bot
restore`, on a real SQLite file.

Alice and Bob talk; a backup is taken; Alice erases herself; the backup is restored. Alice is in
no row of any table of the restored database (nor her words), Bob is whole. The same when the
data folder was lost with its ledger (the one in BACKUP_DIR is enough). And exactly that: a
backup taken after the erase, once Alice came back and talked again, restores what she said since.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, LLMRequest
from tests.reliability.process import chat_env, run_chat, run_module

ALICE_WORD = "Zorglubine"
ALICE_AGAIN = "Plimbarude"
BOB_WORD = "Quaxolotl"


def answer(request: LLMRequest) -> str:
    if request.json_schema is None:
        return "Noté."
    said = " ".join(str(m.get("content", "")) for m in request.messages)
    memories = [
        {"text": f"L'utilisateur aime le {word}.", "type": "preference", "confidence": 0.95}
        for word in (ALICE_WORD, ALICE_AGAIN, BOB_WORD)
        if f"J'aime le {word}" in said
    ]
    return json.dumps({"memories": memories})


def rows_of(database: Path, user: str, words: list[str]) -> list[str]:
    """Every row of every table that belongs to `user` (or one of their character keys) or holds
    one of `words`, by raw SQL."""
    found = []
    conn = sqlite3.connect(database)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                values = dict(zip(columns, row, strict=True))
                text = " ".join(str(v) for v in row).lower()
                owner = str(values.get("user_id", ""))
                if owner == user or owner.startswith(f"{user}@") or any(w.lower() in text for w in words):
                    found.append(f"{table}: {row!r}")
    finally:
        conn.close()
    return found


async def _talk(env: dict[str, str], folder: Path, user: str, *lines: str) -> str:
    run = await run_chat(env, folder, "".join(f"{line}\n" for line in lines).encode(), user=user)
    assert run.code == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    return run.stdout


async def test_a_restore_never_brings_back_an_erased_person(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.handler = answer
    database, backups = tmp_path / "data" / "echo.sqlite3", tmp_path / "backups"
    env = chat_env(llm_server.url, database, BACKUP_DIR=str(backups))
    await _talk(env, tmp_path, "alice", f"J'aime le {ALICE_WORD}.")
    await _talk(env, tmp_path, "bob", f"J'aime le {BOB_WORD}.")
    assert rows_of(database, "alice", [ALICE_WORD]) and rows_of(database, "bob", [BOB_WORD])
    run = await run_module(env, tmp_path, ["bot", "backup"])
    assert run.code == 0, run.stderr
    (taken,) = backups.glob("echo-*.sqlite3")

    out = await _talk(env, tmp_path, "alice", "/erase-me yes")
    assert "Erased:" in out
    assert rows_of(database, "alice", [ALICE_WORD]) == []

    # The backup predates the erase: restored, Alice is erased from it again.
    run = await run_module(env, tmp_path, ["bot", "restore", str(taken)])
    assert run.code == 0 and "Restored" in run.stdout, run.stderr
    assert rows_of(database, "alice", [ALICE_WORD]) == []
    assert rows_of(database, "bob", [BOB_WORD]), "Bob's data must come back with the backup"
    assert "erased from it again" in run.stdout

    # The data folder lost with the ledger beside it: the ledger in BACKUP_DIR is enough.
    shutil.rmtree(database.parent)
    run = await run_module(env, tmp_path, ["bot", "restore", str(taken)])
    assert run.code == 0, run.stderr
    assert rows_of(database, "alice", [ALICE_WORD]) == []
    assert rows_of(database, "bob", [BOB_WORD])

    # And exactly that: Alice comes back; a backup taken after her erase keeps what she says since.
    await _talk(env, tmp_path, "alice", f"J'aime le {ALICE_AGAIN}.")
    run = await run_module(env, tmp_path, ["bot", "backup", str(backups / "after.sqlite3")])
    assert run.code == 0, run.stderr
    run = await run_module(env, tmp_path, ["bot", "restore", str(backups / "after.sqlite3")])
    assert run.code == 0, run.stderr
    again = rows_of(database, "alice", [ALICE_AGAIN])
    assert any(ALICE_AGAIN in row for row in again), "what Alice said after her erase is hers to keep"
    assert rows_of(database, "alice", [ALICE_WORD]) == []
    # Once the bot runs on it, nothing of the erased words comes back either.
    out = await _talk(env, tmp_path, "alice", "/memories")
    assert ALICE_WORD not in out and ALICE_AGAIN in out


async def test_the_ledger_holds_no_id_and_is_private(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.handler = answer
    database, backups = tmp_path / "echo.sqlite3", tmp_path / "backups"
    env = chat_env(llm_server.url, database, BACKUP_DIR=str(backups))
    await _talk(env, tmp_path, "alice", f"J'aime le {ALICE_WORD}.", "/erase-me yes")
    ledgers = [database.with_name("echo.sqlite3.erasures.jsonl"), backups / "echo.sqlite3.erasures.jsonl"]
    for ledger in ledgers:
        text = ledger.read_text(encoding="utf-8")
        assert "alice" not in text.lower() and ALICE_WORD not in text
        assert len(text.splitlines()) >= 1 and all(
            set(json.loads(line)) == {"person", "at"} for line in text.splitlines()
        )
        assert ledger.stat().st_mode & 0o077 == 0
