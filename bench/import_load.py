"""Import under load: an import's exchanges per second, and live turns' latency while it runs.

Run from the repository root: `python bench/import_load.py` (options: --exchanges 60 --users 3
--turns 10 --model-ms 50).

What runs is the product: two `Engine`s on one real SQLite file, as a bot and `python -m bot
import` share one database (a live engine on the real clock, an importing one on its replay
clock, bot/engine/importing.py), and the scripted `FakeLLMServer` of the tests over real HTTP on
127.0.0.1, in a thread of its own. The model has one slot, as a llama.cpp or Ollama server with
one parallel request: a call holds it for --model-ms, and the next call waits for it. No
embedder (lexical recall on both sides): the figure is the model's budget, not the embedder's.

Four runs on fresh copies of the same database:
- quiet: USERS people, each TURNS turns in a row (a 0.1 s pause between), no import: the
  baseline of the live turns' latency (wall time of `engine.turn`, p50 and p95);
- import alone: a SillyTavern chat of EXCHANGES exchanges imported: exchanges per second;
- both: the same turns while the import runs (live turns first: the import waits while a turn
  waits for its reply, bot/memory/stores/imports.py `live_turn_waiting`);
- both, no gate: the same with the import's wait removed, to show what it buys.
Printed: each run's figures, and the live p95 and the import's rate as ratios to their baselines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import insides

from bot.characters.character import load_character
from bot.characters.transcripts import read_transcript
from bot.clients.databases import open_database
from bot.clients.llm import LLMClient
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.engine.importing import ReplayClock
from bot.memory.model import OwnerKey, PersonId, StoryId, utcnow
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest


class ModelInThread:
    """The scripted server on its own loop; one slot held `seconds` per call."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.loop = asyncio.new_event_loop()
        self.server = FakeLLMServer()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        slot = asyncio.Lock()

        async def handler(request: LLMRequest) -> str:
            async with slot:
                await asyncio.sleep(self.seconds)
            if request.json_schema is None:
                return "Bien noté."
            if "The exchange:" not in request.last_user:
                return json.dumps({"summary": "Alice aime beaucoup de choses."})
            said = request.last_user.split("The exchange:", 1)[1]
            n = said.split("numéro ", 1)[1].split(" ", 1)[0] if "numéro " in said else "0"
            return json.dumps(
                {
                    "memories": [
                        {"text": f"L'utilisateur aime la chose numéro {n}", "type": "preference", "confidence": 0.95}
                    ]
                }
            )

        self.server.handler = handler
        self.loop.run_until_complete(self.server.start())
        self.ready.set()
        self.loop.run_forever()

    def __enter__(self) -> ModelInThread:
        self.thread.start()
        self.ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def chat_file(folder: Path, exchanges: int) -> Path:
    lines = [
        {"user_name": "Alice", "character_name": "Écho", "create_date": "2024-03-01@10h00m00s", "chat_metadata": {}}
    ]
    for n in range(exchanges):
        at = f"2024-03-01T10:{n // 60:02d}:{n % 60:02d}.000Z"
        lines.append(
            {"name": "Alice", "is_user": True, "send_date": at, "mes": f"J'aime la chose numéro {n} .", "extra": {}}
        )
        lines.append({"name": "Écho", "is_user": False, "send_date": at, "mes": f"La chose {n}, noté.", "extra": {}})
    path = folder / "chat.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    return path


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def run(
    folder: Path, template: Path, url: str, args: argparse.Namespace, *, live: bool, imports: bool, gate: bool
) -> dict[str, float]:
    path = folder / f"run-{live}-{imports}-{gate}.sqlite3"
    shutil.copyfile(template, path)
    db = await open_database(path)
    settings = load_settings(_env_file=None, llm_base_url=url, llm_model=FAKE_MODEL, database_path=path).engine
    character = load_character(None)
    async with httpx.AsyncClient(trust_env=False, timeout=120) as http:
        llm = LLMClient(http, api="ollama", base_url=url)
        speaker = Engine(db=db, llm=llm, embedder=None, settings=settings, character=character)
        importer = Engine(db=db, llm=llm, embedder=None, settings=settings, character=character, clock=ReplayClock())
        if not gate:
            # Live turns looked for from tomorrow on: none ever waits.
            insides.imports(importer)._live_since = lambda: utcnow() + timedelta(days=1)
        person_id = PersonId("111111111111111111")
        transcript = read_transcript(args.chat, character_name=character.name, person_id=person_id)
        plan = importer.operator.import_plan(transcript, person_id, character)
        latencies: list[float] = []

        async def person(u: int) -> None:
            for t in range(args.turns):
                said = Incoming(
                    user_id=OwnerKey(f"user-{u}"),
                    user_name=f"User{u}",
                    text=f"Message {t} de {u}",
                    story_id=StoryId(f"s-{u}"),
                    place="g",
                )
                started = time.perf_counter()
                await speaker.conversation.turn(said)
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.1)

        started = time.perf_counter()
        import_task = asyncio.create_task(importer.operator.import_conversation(plan)) if imports else None
        if live:
            await asyncio.sleep(0.2)  # the import under way first
            await asyncio.gather(*(person(u) for u in range(args.users)))
        done = await import_task if import_task is not None else None
        wall = time.perf_counter() - started
        await speaker.close()
        await importer.close()
    await db.close()
    figures: dict[str, float] = {}
    if latencies:
        figures |= {"turns": len(latencies), "p50": statistics.median(latencies), "p95": p(latencies, 0.95)}
    if done is not None:
        figures |= {"exchanges": done.done, "rate": done.done / wall, "wall": wall}
    return figures


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)  # lexical recall is this bench's choice, not news
    parser = argparse.ArgumentParser()
    parser.add_argument("--exchanges", type=int, default=60)
    parser.add_argument("--users", type=int, default=3)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--model-ms", type=float, default=50)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="echo-import-bench-"))
    try:
        args.chat = chat_file(folder, args.exchanges)
        template = folder / "template.sqlite3"
        await (await open_database(template)).close()
        with ModelInThread(args.model_ms / 1000) as model:
            url = model.server.url
            quiet = await run(folder, template, url, args, live=True, imports=False, gate=True)
            alone = await run(folder, template, url, args, live=False, imports=True, gate=True)
            both = await run(folder, template, url, args, live=True, imports=True, gate=True)
            ungated = await run(folder, template, url, args, live=True, imports=True, gate=False)
        print(
            f"model: one slot, {args.model_ms:.0f} ms a call; {args.users} people x {args.turns} turns; an import of {args.exchanges} exchanges"
        )
        print(f"quiet:          live p50 {quiet['p50'] * 1000:6.0f} ms  p95 {quiet['p95'] * 1000:6.0f} ms")
        print(f"import alone:   {alone['rate']:6.2f} exchanges/s ({alone['exchanges']:.0f} in {alone['wall']:.1f} s)")
        for name, r in (("both", both), ("both, no gate", ungated)):
            print(
                f"{name + ':':15} live p50 {r['p50'] * 1000:6.0f} ms  p95 {r['p95'] * 1000:6.0f} ms "
                f"(p95 x{r['p95'] / quiet['p95']:.2f} of quiet); import {r['rate']:6.2f} exchanges/s "
                f"(x{r['rate'] / alone['rate']:.2f} of alone)"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
