"""What a careless operator or a terminal user can type, through the real `python -m bot chat`:
every mistake ends in a message (or the "Écho cannot start." paragraph), never a traceback, a
hang or a runaway read; and a short session ends without an ERROR.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_chat

CANNOT_START = "Écho cannot start."

STATE_MIN_ABOVE_MAX = "name: X\npersona: p\nstate:\n  mood: {min: 5, max: 1, default: 2, max_delta: 1}\n"
STATE_MISSING_MAX = "name: X\npersona: p\nstate:\n  mood: {min: 0, default: 2, max_delta: 1}\n"


def _fifo(folder: Path) -> str:
    path = folder / "fifo.yaml"
    os.mkfifo(path)
    return str(path)


def _dev_zero(folder: Path) -> str:
    path = folder / "zero.yaml"
    path.symlink_to("/dev/zero")
    return str(path)


def _oversized(folder: Path) -> str:
    path = folder / "big.yaml"
    path.write_text("name: X\npersona: |\n" + ("  " + "x" * 78 + "\n") * 30_000, encoding="utf-8")
    return str(path)


def _text(folder: Path, body: str) -> str:
    path = folder / "character.yaml"
    path.write_text(body, encoding="utf-8")
    return str(path)


# (setting, value or a function of the test's folder giving it, what the paragraph must say)
MISTAKES = [
    ("CHARACTER_FILE", lambda d: _text(d, STATE_MIN_ABOVE_MAX), "min (5) must be below max (1)"),
    ("CHARACTER_FILE", lambda d: _text(d, STATE_MISSING_MAX), "state.mood.max: missing"),
    ("CHARACTER_FILE", _fifo, "not a regular file"),
    ("CHARACTER_FILE", _dev_zero, "not a regular file"),
    ("CHARACTER_FILE", _oversized, "larger than 1 MiB"),
    ("LLM_BASE_URL", "http://127.0.0.1:99999", "LLM_BASE_URL"),
    ("LLM_BASE_URL", "http://127.0.0.1:0", "LLM_BASE_URL"),
    ("INDEX_INTERVAL_SECONDS", "inf", "INDEX_INTERVAL_SECONDS"),
    ("INDEX_INTERVAL_SECONDS", "nan", "INDEX_INTERVAL_SECONDS"),
    ("INDEX_INTERVAL_SECONDS", "-1", "INDEX_INTERVAL_SECONDS"),
    ("INDEX_INTERVAL_SECONDS", "1e300", "INDEX_INTERVAL_SECONDS"),
    ("DATABASE_PATH", ":memory:", "DATABASE_PATH"),
]


async def test_operator_mistakes_end_in_the_cannot_start_paragraph(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    """The table, a few processes at a time (each only starts Python and stops): every row
    must end in the paragraph, exit code 2, no traceback, within the timeout."""
    slots = asyncio.Semaphore(4)

    async def attempt(n: int, setting: str, value, said: str) -> str | None:
        folder = tmp_path / str(n)
        folder.mkdir()
        value = value(folder) if callable(value) else value
        env = chat_env(llm_server.url, folder / "echo.sqlite3", **{setting: value})
        async with slots:
            run = await run_chat(env, folder, b"Bonjour\n", timeout=30)
        if run.code == 2 and CANNOT_START in run.stderr and said in run.stderr and "Traceback" not in run.stderr:
            return None
        return f"{setting}={value!r}: exit {run.code}, stderr {run.stderr[-1500:]!r}"

    failures = await asyncio.gather(*(attempt(n, *row) for n, row in enumerate(MISTAKES)))
    assert [f for f in failures if f is not None] == []


async def test_terminal_commands_with_odd_ids_and_export_paths_answer(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    (tmp_path / "a-folder").mkdir()
    commands = [
        ("/forget 9223372036854775808", "You have no memory #9223372036854775808."),
        ("/pin 9223372036854775807", "You have no memory #9223372036854775807."),
        ("/restore h18446744073709551616", "No history entry h18446744073709551616 of yours."),
        ("/unpin " + "9" * 400, "Usage: /unpin <id>"),
        ("/forget -1", "Usage: /forget <id>"),
        ("/forget -9223372036854775809", "Usage: /forget <id>"),
        ("/forget ²", "Usage: /forget <id>"),
        ("/export missing-folder/out.json", "Cannot write missing-folder/out.json: No such file or directory."),
        ("/export a-folder", "Cannot write a-folder: Is a directory."),
        ("/export a-folder/out.json", "Written to a-folder/out.json."),
    ]
    stdin = "".join(f"{line}\n" for line, _ in commands).encode()
    run = await run_chat(chat_env(llm_server.url, tmp_path / "echo.sqlite3"), tmp_path, stdin)
    assert run.code == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    for _, answer in commands:
        assert answer in run.stdout, (answer, run.stdout)
    assert (tmp_path / "a-folder" / "out.json").is_file()


def _rule_ids(database: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT id, text FROM memories WHERE type = 'rule' ORDER BY id").fetchall()


async def test_two_short_sessions_keep_rule_ids_and_end_without_an_error(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    database = tmp_path / "echo.sqlite3"
    env = chat_env(llm_server.url, database, LOG_LEVEL="INFO")
    first = await run_chat(env, tmp_path, b"")
    rules = _rule_ids(database)
    second = await run_chat(env, tmp_path, b"")
    assert first.code == 0 and second.code == 0
    assert rules and _rule_ids(database) == rules
    for run in (first, second):
        assert "Traceback" not in run.stderr and not re.search(r"\bERROR\b", run.stderr), run.stderr[-3000:]
