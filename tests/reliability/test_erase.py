"""/erase-me is real: it wins against a turn still waiting for the LLM, and the erased text is
gone from the bytes on disk (the database file, its -wal and -shm), full-text index included.

Real Engine over a real SQLite file, the scripted LLM on 127.0.0.1; what is checked is read with
raw SQL and from the raw bytes of the files.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from bot.engine import Engine, Incoming
from tests.builders import make_engine
from tests.fakes.llm_server import FakeLLMServer, LLMRequest, Reply

ALICE = "alice"
BOB = "bob"


@pytest_asyncio.fixture
async def engine(tmp_path, db, http, llm_server) -> AsyncIterator[Engine]:
    eng = make_engine(db, http, llm_server, tmp_path)
    await eng.start()
    yield eng
    await eng.close()


def traces_of(database: Path, user_id: str, words: list[str]) -> list[str]:
    """Every row of every table that belongs to `user_id` or holds one of `words`, by raw SQL."""
    found: list[str] = []
    with sqlite3.connect(database) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                values = dict(zip(columns, row, strict=True))
                text = " ".join(str(v) for v in row).lower()
                if values.get("user_id") == user_id or any(w.lower() in text for w in words):
                    found.append(f"{table}: {row!r}")
    return found


# --- an erase while a turn waits for the LLM ---------------------------------------------------


@pytest.mark.parametrize("llm_answer", ["reply", "error"])
async def test_erase_wins_against_a_turn_waiting_for_the_llm(
    db, llm_answer: str, engine: Engine, llm_server: FakeLLMServer
) -> None:
    message = "Je m'appelle Quentinosaure et j'habite rue des Zéphyrs."
    arrived, release = asyncio.Event(), asyncio.Event()

    async def answer(request: LLMRequest) -> Reply | str:
        if request.json_schema is not None:
            return "{}"
        arrived.set()
        await release.wait()
        return "Enchantée !" if llm_answer == "reply" else Reply(status=500, error="boom")

    llm_server.handler = answer
    await engine.memories.remember(ALICE, "L'utilisateur aime le Quentinosaure.", story_id="s", place="p")
    turn = asyncio.create_task(
        engine.conversation.turn(Incoming(user_id=ALICE, user_name="Alice", text=message, story_id="s", place="p"))
    )
    await asyncio.wait_for(arrived.wait(), 10)
    assert traces_of(db.path, ALICE, ["Quentinosaure"])  # the message is on disk now

    await engine.privacy.erase(ALICE)
    release.set()
    result = await asyncio.wait_for(turn, 10)
    if llm_answer == "reply":
        assert result.reply == "Enchantée !"  # the user is still answered
    engine.operator.schedule_reflection(ALICE)
    await engine.conversation.wait_recorded(ALICE)
    await engine.operator.wait_background(10)

    assert traces_of(db.path, ALICE, ["Quentinosaure", "Zéphyrs"]) == []
    assert await engine.memories.why(ALICE, "s") is None
    assert (await engine.memories.stats(ALICE)).turns == 0


# --- the bytes on disk after an erase ----------------------------------------------------------

# Distinctive, ASCII (FTS5 stores its tokens lower-cased, without diacritics), spread over every
# place a user's text is written: the message and reply (exchanges, turns), memories (and the
# full-text index), the story summary, an anchor, a position.
ALICE_WORDS = ["Zyqorblatte", "Vexmundral", "Krompastel", "Wuzzlequarn", "Plibbertonk"]
BOB_WORD = "Jorvaxillon"


def files_of(database: Path) -> list[Path]:
    return [p for p in (database, Path(f"{database}-wal"), Path(f"{database}-shm")) if p.exists()]


def on_disk(database: Path, words: list[str]) -> dict[str, list[str]]:
    """Which words appear in which file, case-insensitively."""
    found: dict[str, list[str]] = {}
    for path in files_of(database):
        raw = path.read_bytes().lower()
        hits = [w for w in words if w.lower().encode() in raw]
        if hits:
            found[path.name] = hits
    return found


async def test_erased_text_is_gone_from_the_database_files(db, engine: Engine, llm_server: FakeLLMServer) -> None:
    zyq, vex, krom, wuzz, plib = ALICE_WORDS
    reflection = {
        "memories": [{"text": f"L'utilisateur collectionne les {vex} bleus.", "type": "fact", "confidence": 0.9}],
        "summary": f"Alice parle de sa collection de {krom}.",
        "anchors": {"add": [f"Alice possède un {wuzz} ancien."]},
        "positions": [
            {
                "subject": "la collection",
                "stance": f"Le personnage admire le {plib} d'Alice.",
                "justification": "Alice a décrit sa collection avec fierté.",
            }
        ],
    }
    llm_server.handler = lambda r: json.dumps(reflection) if r.json_schema is not None else f"Oh, un {zyq} !"
    await engine.memories.remember(ALICE, f"L'utilisateur a un chat nommé {zyq}.", story_id="s", place="p")
    await engine.memories.remember(BOB, f"L'utilisateur joue du {BOB_WORD}.", story_id="s", place="p")
    for text in (f"Mon chat {zyq} adore les {vex}.", f"J'ai un {wuzz} et un {krom}, et mon {plib}."):
        await engine.conversation.turn(Incoming(user_id=ALICE, user_name="Alice", text=text, story_id="s", place="p"))
        engine.operator.schedule_reflection(ALICE)
        await engine.operator.wait_reflections(ALICE)
    await engine.conversation.wait_recorded(ALICE)
    database = db.path
    # The control: before the erase, the same search finds every word, the index's included.
    before = on_disk(database, [*ALICE_WORDS, BOB_WORD])
    assert {w for hits in before.values() for w in hits} == {*ALICE_WORDS, BOB_WORD}, before
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", (vex.lower(),)).fetchall()

    await engine.privacy.erase(ALICE)

    assert on_disk(database, ALICE_WORDS) == {}
    assert traces_of(database, ALICE, ALICE_WORDS) == []
    # Bob's text is untouched, still found by the same search, and still in the index.
    assert BOB_WORD in [w for hits in on_disk(database, [BOB_WORD]).values() for w in hits]
    with sqlite3.connect(database) as conn:
        assert (
            len(conn.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?", (BOB_WORD,)).fetchall()) == 1
        )
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")
