"""`python -m bot`: start-up problems end in one clear paragraph and exit code 2, not a traceback."""

from __future__ import annotations

import asyncio

import pytest

from bot.__main__ import main


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no .env here
    for name in ("DISCORD_TOKEN", "LLM_BASE_URL", "LLM_MODEL", "LLM_API", "DATABASE_PATH"):
        monkeypatch.delenv(name, raising=False)


def test_missing_token_explains_how_to_get_one(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "DISCORD_TOKEN is not set" in err and "developer portal" in err and "Traceback" not in err


def test_unreachable_llm_names_the_url_and_how_to_start_ollama(capsys, monkeypatch, refused_url, tmp_path):
    monkeypatch.setenv("LLM_BASE_URL", refused_url)
    assert main(["chat", "--user", "alice"]) == 2
    err = capsys.readouterr().err
    assert refused_url in err and "ollama serve" in err and "Traceback" not in err
    assert not (tmp_path / "data").exists()  # nothing created before the LLM answered


async def test_model_not_pulled_says_which_command_pulls_it(capsys, monkeypatch, llm_server):
    monkeypatch.setenv("LLM_BASE_URL", llm_server.url)
    monkeypatch.setenv("LLM_MODEL", "qwen-missing:7b")
    # main() runs its own event loop: in a thread, so the scripted server's loop keeps serving.
    assert await asyncio.to_thread(main, ["chat", "--user", "alice"]) == 2
    err = capsys.readouterr().err
    assert "ollama pull qwen-missing:7b" in err


def test_bad_setting_names_the_variable(capsys, monkeypatch):
    monkeypatch.setenv("HISTORY_MESSAGES", "many")
    assert main(["chat", "--user", "alice"]) == 2
    assert "HISTORY_MESSAGES" in capsys.readouterr().err


async def test_sigterm_stops_the_terminal_chat_cleanly(tmp_path, llm_server):
    """docker stop / systemd send SIGTERM: the shutdown path runs and the exit code is 0."""
    import os
    import signal
    import sys

    env = dict(os.environ, LLM_BASE_URL=llm_server.url, LLM_MODEL="fake-llm", DATABASE_PATH=str(tmp_path / "e.db"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "chat",
        "--user",
        "alice",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"Bonjour !\n")
    await proc.stdin.drain()
    answer = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
    if not answer:
        raise AssertionError((await proc.stderr.read()).decode())
    assert answer.startswith("Écho:".encode())
    proc.send_signal(signal.SIGTERM)  # stdin stays open: the chat is blocked reading it
    code = await asyncio.wait_for(proc.wait(), timeout=30)
    err = (await proc.stderr.read()).decode()
    assert code == 0 and "Traceback" not in err


async def test_a_database_that_cannot_be_opened_is_explained(capsys, monkeypatch, llm_server, tmp_path):
    (tmp_path / "not-a-folder").write_text("a file where a folder should be")
    monkeypatch.setenv("LLM_BASE_URL", llm_server.url)
    monkeypatch.setenv("LLM_MODEL", "fake-llm")
    monkeypatch.setenv("DATABASE_PATH", str(tmp_path / "not-a-folder" / "echo.sqlite3"))
    assert await asyncio.to_thread(main, ["chat", "--user", "alice"]) == 2
    err = capsys.readouterr().err
    assert "Cannot open the database" in err and "DATABASE_PATH" in err and "Traceback" not in err


async def test_the_terminal_chat_starts_while_the_owners_page_port_is_taken(tmp_path, llm_server):
    """The character can be tried beside a running bot that serves its page: the chat serves none."""
    import socket

    from tests.reliability.process import chat_env, run_chat

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = chat_env(
            llm_server.url,
            tmp_path / "echo.sqlite3",
            WEB_ENABLED="true",
            WEB_TOKEN="a-long-enough-secret-token",
            WEB_HOST="127.0.0.1",
            WEB_PORT=str(taken.getsockname()[1]),
        )
        run = await run_chat(env, tmp_path, b"Bonjour !\n")
    assert run.code == 0, run.stderr
    assert "Écho:" in run.stdout


def test_chatty_libraries_log_their_routine_steps_only_at_debug():
    import logging

    from bot.__main__ import CHATTY_LOGGERS, set_log_level

    try:
        set_log_level(logging.INFO)
        assert logging.getLogger().isEnabledFor(logging.INFO)
        assert not any(logging.getLogger(name).isEnabledFor(logging.INFO) for name in CHATTY_LOGGERS)
        set_log_level(logging.DEBUG)
        assert all(logging.getLogger(name).isEnabledFor(logging.DEBUG) for name in CHATTY_LOGGERS)
    finally:
        set_log_level(logging.WARNING)
