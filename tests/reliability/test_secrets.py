"""No password or token of a setting is echoed, whatever the setting: a mistyped DATABASE_URL
(`postgres+asyncpg://`, a bad port, no database name), an LLM_BASE_URL or EMBEDDINGS_BASE_URL with
credentials in its user-info or its query, through the real `python -m bot chat` (the "Écho
cannot start." paragraph and every log line) and `python -m bot doctor` (every line of its report).
"""

from __future__ import annotations

import pytest

from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_module

PASSWORD = "Hunter2Pw9x"
TOKEN = "TokZq81Vw4"

MISTYPED_URLS = {
    "driver in the scheme": f"postgres+asyncpg://echo:{PASSWORD}@localhost:5432/echo",
    "bad port": f"postgresql://echo:{PASSWORD}@localhost:99999/echo",
    "no database": f"postgresql://echo:{PASSWORD}@localhost:5432",
    "token in the query": f"postgresql://echo@localhost:5432/echo?password={PASSWORD}&sslmode=nope:x",
}


def _leaks(text: str) -> list[str]:
    return [secret for secret in (PASSWORD, TOKEN) if secret in text]


@pytest.mark.parametrize("url", MISTYPED_URLS.values(), ids=list(MISTYPED_URLS))
async def test_a_mistyped_database_url_is_never_printed_with_its_password(
    url: str, tmp_path, llm_server: FakeLLMServer
) -> None:
    env = chat_env(llm_server.url, tmp_path / "echo.sqlite3", DATABASE_URL=url)
    for args in (["bot", "chat", "--user", "alice"], ["bot", "doctor"]):
        run = await run_module(env, tmp_path, args, b"Bonjour\n", timeout=60)
        assert run.code in (1, 2), (args, run.stdout, run.stderr)
        assert "DATABASE_URL" in run.stdout + run.stderr
        assert _leaks(run.stdout + run.stderr) == [], (args, run.stdout, run.stderr)


async def test_llm_and_embedder_urls_with_credentials_are_never_printed(tmp_path, llm_server: FakeLLMServer) -> None:
    host = llm_server.url.removeprefix("http://")
    unreachable = f"http://alice:{PASSWORD}@127.0.0.1:9/?api_key={TOKEN}"
    # The LLM unreachable: the paragraph names the server.
    env = chat_env(llm_server.url, tmp_path / "echo.sqlite3", LLM_BASE_URL=unreachable)
    run = await run_module(env, tmp_path, ["bot", "chat", "--user", "alice"], b"Bonjour\n")
    assert run.code == 2 and "127.0.0.1:9" in run.stderr, run.stderr
    assert _leaks(run.stdout + run.stderr) == [], run.stderr
    # The LLM answers through credentials in its URL; the embedder does not answer: its warning,
    # and every other log line at INFO, are printed without them.
    llm_server.handler = lambda r: "{}" if r.json_schema is not None else "Bonjour !"
    env = chat_env(
        llm_server.url, tmp_path / "echo.sqlite3", LOG_LEVEL="INFO",
        LLM_BASE_URL=f"http://alice:{PASSWORD}@{host}", EMBEDDINGS="ollama", EMBEDDINGS_BASE_URL=unreachable,
    )  # fmt: skip
    run = await run_module(env, tmp_path, ["bot", "chat", "--user", "alice"], b"Bonjour\n")
    assert run.code == 0 and "Bonjour !" in run.stdout, run.stderr
    assert "127.0.0.1:9" in run.stderr, "the embedder's failure is logged, naming its server"
    assert _leaks(run.stdout + run.stderr) == [], run.stderr
    run = await run_module(env, tmp_path, ["bot", "doctor"])
    assert "embedder" in run.stdout and _leaks(run.stdout + run.stderr) == [], run.stdout
