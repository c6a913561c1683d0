"""`python -m bot import` as a process (issue 34, item 3): killed with SIGKILL halfway, then run
again, it leaves the database one clean run leaves; run a second time it writes nothing and
asks the model nothing; stopped by the model going down, a rerun continues to the end."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, LLMRequest, Reply
from tests.reliability.process import chat_env, run_module

PERSON = "311122223333444455"
EXCHANGES = 12
# What one clean run leaves, every table a person's import writes (the vectors are derived,
# embedded at whatever time the indexer runs; the cache's version counters likewise).
TABLES = (
    "memories", "memory_history", "exchanges", "exchange_messages", "memory_sources", "memory_changes",
    "story_summaries", "story_anchors", "story_positions", "story_state", "story_history", "imports", "followups",
)  # fmt: skip


def sillytavern_chat(path: Path) -> Path:
    """A chat of EXCHANGES exchanges, one fact each, in SillyTavern's shape, a day apart."""
    lines = [
        {"user_name": "Alice", "character_name": "Écho", "create_date": "2024-03-01@10h00m00s", "chat_metadata": {}}
    ]
    for n in range(EXCHANGES):
        day = f"March {n + 1}, 2024"
        lines.append(
            {
                "name": "Alice",
                "is_user": True,
                "send_date": f"{day} 10:00am",
                "mes": f"Fait numéro {n} : j'aime le sport {n}.",
                "extra": {},
            }
        )
        lines.append({"name": "Écho", "is_user": False, "send_date": f"{day} 10:01am", "mes": f"Noté, le sport {n}.", "extra": {},
                      "swipe_id": 0, "swipes": [f"Noté, le sport {n}."]})  # fmt: skip
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def reflect(request: LLMRequest) -> str | Reply:
    if request.json_schema is None:
        return "ok"
    if "The exchange:" not in request.last_user:
        return json.dumps({"summary": "Alice aime beaucoup de sports."})
    exchange = request.last_user.split("The exchange:", 1)[1]
    n = exchange.split("Fait numéro ", 1)[1].split(" ", 1)[0]
    memory = {"text": f"L'utilisateur aime le sport numéro {n}", "type": "preference", "confidence": 0.95}
    return Reply(json.dumps({"memories": [memory], "summary": f"Alice aime le sport {n}."}), delay=0.15)


def dump(database: Path) -> dict[str, list[tuple]]:
    with closing(sqlite3.connect(database)) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in TABLES}


def reflections(llm_server: FakeLLMServer) -> int:
    return sum(1 for r in llm_server.chats if r.json_schema is not None and "The exchange:" in r.last_user)


async def run_import(llm_server: FakeLLMServer, tmp_path: Path, database: Path, chat: Path):
    env = chat_env(llm_server.url, database)
    return await run_module(env, tmp_path, ["bot", "import", str(chat), "--user", PERSON], timeout=120)


async def test_a_kill_9_halfway_then_a_rerun_gives_the_database_of_one_clean_run(
    llm_server: FakeLLMServer, tmp_path: Path
):
    chat = sillytavern_chat(tmp_path / "chat.jsonl")
    llm_server.handler = reflect
    clean = await run_import(llm_server, tmp_path, tmp_path / "clean.sqlite3", chat)
    assert clean.code == 0, clean.stderr
    assert f"Imported {EXCHANGES} exchanges" in clean.stdout
    assert reflections(llm_server) == EXCHANGES

    llm_server.reset()
    llm_server.handler = reflect
    killed = tmp_path / "killed.sqlite3"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "import", str(chat), "--user", PERSON,
        env=chat_env(llm_server.url, killed), cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    while reflections(llm_server) < EXCHANGES // 2:
        await asyncio.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    with closing(sqlite3.connect(killed)) as conn:
        [(reflected,)] = conn.execute("SELECT COUNT(*) FROM exchanges WHERE reflected_at IS NOT NULL").fetchall()
    assert 0 < reflected < EXCHANGES, "killed halfway"

    rerun = await run_import(llm_server, tmp_path, killed, chat)
    assert rerun.code == 0, rerun.stderr
    assert f"({reflected} from an earlier run)" in rerun.stdout
    assert dump(killed) == dump(tmp_path / "clean.sqlite3")

    llm_server.reset()
    llm_server.handler = reflect
    again = await run_import(llm_server, tmp_path, killed, chat)
    assert again.code == 0 and f"Already imported: {EXCHANGES} exchanges, nothing written." in again.stdout
    assert llm_server.chats == [] and dump(killed) == dump(tmp_path / "clean.sqlite3")


async def test_stopped_by_the_model_going_down_a_rerun_continues(llm_server: FakeLLMServer, tmp_path: Path):
    chat = sillytavern_chat(tmp_path / "chat.jsonl")
    served = 0

    def down_after_four(request: LLMRequest) -> str | Reply:
        nonlocal served
        if request.json_schema is not None and "The exchange:" in request.last_user:
            served += 1
            if served > 4:
                return Reply(status=500, error="CUDA out of memory")
        return reflect(request)

    llm_server.handler = down_after_four
    database = tmp_path / "echo.sqlite3"
    stopped = await run_import(llm_server, tmp_path, database, chat)
    assert stopped.code == 1
    assert f"Stopped after 4 of {EXCHANGES} exchanges: the model could not be reached." in stopped.stderr
    assert "run the same command again to continue" in stopped.stderr
    llm_server.handler = reflect
    resumed = await run_import(llm_server, tmp_path, database, chat)
    assert resumed.code == 0, resumed.stderr
    with closing(sqlite3.connect(database)) as conn:
        texts = [t for (t,) in conn.execute("SELECT text FROM memories WHERE user_id = ? ORDER BY id", (PERSON,))]
    assert texts == [f"L'utilisateur aime le sport numéro {n}" for n in range(EXCHANGES)], "every exchange, in order"
