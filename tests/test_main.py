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
