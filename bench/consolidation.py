"""Series of look-alike memories: how they crowd the 24 slots, what consolidation gives back, and
what the job costs (bot/memory/series.py, bot/memory/consolidation/proposal.py, bot/engine/consolidation_worker.py).

Run from the repository root: `python bench/consolidation.py [--sizes 3000 100000]`.

1. The screenshot week (bench/screenshots.py's Alice: six cities visited every year 2012–2025,
   84 episodes, and what she said that week), through the engine with the scripted LLM and the
   real offline embedder: the turn "Je pense partir en vacances à Lisbonne." with no cap, with
   the per-series cap, and after the consolidation job ran with a scripted model that writes
   each series out (one series answered sloppily, one with a range over a gap: both refused).
   Printed: slots per series in the 24, and the distinct facts the 24 slots hold (a consolidated
   memory holds all its members).
2. A season of one user: 60 days of messages through the engine, each reflected by the scripted
   LLM into one memory (weekly tennis, runs in km, dinners with her mother, moods, plus ordinary
   facts), the job run every hour of the season. Printed: series found, consolidated, refused by
   reason, and the consolidation's model calls per user per day.
3. Time per run of the job at each size (memories seeded directly, 6 % of them in series of 3 to
   30), with the event loop's longest stall (how late a 5 ms sleep woke while the job ran), against
   a baseline measured in the same run: every frame computed once, in one go, unsliced. And the
   turn's selection at that size with and without the per-series cap (a ratio).
4. Recall with the cap: on bench/recall.py's corpus and queries, the relevant pairs the final 24
   serve without and with the cap (the cap must not cost one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import insides

from bot.characters.character import load_character
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder
from bot.clients.llm import LLMClient
from bot.clients.storage import to_db
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.engine.consolidation_worker import RunFigures
from bot.memory.choice import Slot
from bot.memory.model import content_hash
from bot.memory.read.indexing import Indexer
from bot.memory.read.selection import candidates_of, select_columns
from bot.memory.series import frame, memory_key
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest

ALICE = "412345678901234567"
CITIES = ("Porto", "Gand", "Trieste", "Cracovie", "Séville", "Bergen")
WEEK = [
    "Bonjour ! Je m'appelle Alice et j'habite à Nantes.",
    "Je joue du violoncelle depuis dix ans.",
    "Mon chat s'appelle Pistache, il est roux.",
    "Je prépare un concert pour le mois prochain.",
    "J'ai peur de rater le solo du deuxième mouvement.",
    "Pistache a encore renversé mon pupitre.",
    "Le concert s'est bien passé finalement !",
]
QUESTION = "Je pense partir en vacances à Lisbonne."
SIZES = (3_000,)
LAG_TICK = 0.005
# The loop's lag is measured idle this long first: on a shared machine the process is descheduled
# now and then for tens of milliseconds, whatever it runs.
IDLE_SECONDS = 5.0
_LISTED = re.compile(r"^- (.*)$", re.MULTILINE)


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def write_out(members: list[str]) -> str:
    """What a careful model writes: the members' common start, then each one's own part, years
    that follow each other as a range."""
    split = [m.rstrip(".").split() for m in members]
    common = 0
    while all(len(s) > common + 1 and s[common] == split[0][common] for s in split):
        common += 1
    head, tails = " ".join(split[0][:common]), [" ".join(s[common:]) for s in split]
    years = [re.fullmatch(r"(?:en )?(\d{4})", t) for t in tails]
    if all(years):
        values = sorted(int(y.group(1)) for y in years if y)
        runs: list[list[int]] = []
        for v in values:
            if runs and v == runs[-1][-1] + 1:
                runs[-1].append(v)
            else:
                runs.append([v])
        parts = [f"de {r[0]} à {r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs]
        head = head.removesuffix(" en")
        return f"{head} en {', '.join(parts)}." if not parts[0].startswith("de ") else f"{head} {', '.join(parts)}."
    return f"{head} {', '.join(tails[:-1])} et {tails[-1]}."


class Model:
    """The scripted LLM: replies, reflections (one memory per message, from the season's script)
    and consolidations (careful, but sloppy on the series named in `sloppy`)."""

    def __init__(self, memory_of: dict[str, tuple[str, str]], sloppy: dict[str, str]) -> None:
        self.memory_of = memory_of
        self.sloppy = sloppy
        self.consolidation_calls = 0

    def __call__(self, request: LLMRequest) -> str:
        if request.json_schema is None:
            return "C'est noté."
        if "The series (" in request.last_user:
            self.consolidation_calls += 1
            members = _LISTED.findall(request.last_user)
            text = write_out(members)
            for word, how in self.sloppy.items():
                if word in request.last_user:
                    if how == "drop":
                        text = write_out(members[:-1])
                    elif how == "gap":
                        text = re.sub(r"\d{4}", "2010", text, count=1)  # a range from a year no member holds
            return json.dumps({"text": text, "confidence": 0.95})
        said = re.findall(r"<message [^>]*>\n(.*?)\n</message>", request.last_user, re.DOTALL)
        found = [self.memory_of[s.strip()] for s in said if s.strip() in self.memory_of]
        return json.dumps({"memories": [{"text": t, "type": k, "confidence": 0.95} for t, k in found]})


async def make_engine(
    folder: Path, server: FakeLLMServer, http: httpx.AsyncClient, clock: Clock, embedder: Any, **settings: Any
) -> tuple[Engine, SQLiteDatabase]:
    db = await SQLiteDatabase.open(folder / "echo.sqlite3")
    config = load_settings(
        _env_file=None, llm_base_url=server.url, llm_model=FAKE_MODEL, database_path=folder / "echo.sqlite3", **settings
    )
    engine = Engine(db=db, llm=LLMClient(http, api="ollama", base_url=server.url), embedder=embedder,
                    settings=config.engine, character=load_character(None), clock=clock)  # fmt: skip
    await engine.start()
    return engine, db


def slots_per_series(slots: list[Slot]) -> Counter[str]:
    out: Counter[str] = Counter()
    for s in slots:
        city = next((c for c in CITIES if c in s.text), None)
        out[city or "other"] += 1
    return out


def facts_held(slots: list[Slot], members_of: dict[int, int]) -> int:
    return sum(members_of.get(s.id, 1) for s in slots)


async def screenshot_week(embedder: LocalEmbedder) -> None:
    print("1. The screenshot week: Alice, six cities visited every year 2012-2025 (84 episodes)")
    with tempfile.TemporaryDirectory(prefix="echo-consolidation-") as tmp:
        server = FakeLLMServer()
        await server.start()
        http = httpx.AsyncClient(trust_env=False, timeout=60)
        clock = Clock(datetime(2026, 3, 2, 9, tzinfo=UTC))
        memory_of = {line: (f"Alice a dit : {line}", "fact") for line in WEEK}
        model = Model(memory_of, sloppy={"Bergen": "drop", "Séville": "gap"})
        server.handler = model
        engine, db = await make_engine(Path(tmp), server, http, clock, embedder, consolidation_series_per_run=6)
        try:
            for city, year in [(c, y) for c in CITIES for y in range(2012, 2026)]:
                await engine.memories.remember(
                    ALICE, f"Alice a visité {city} en {year}.", story_id="chan-1", place="guild-1", type_="episode"
                )
            indexer = Indexer(db, embedder)
            for line in WEEK:
                clock.now += timedelta(hours=5)
                await engine.conversation.turn(
                    Incoming(ALICE, "Alice", line, "chan-1", "guild-1", message_id=f"m{clock.now.timestamp()}")
                )
                await engine.operator.wait_reflections(ALICE)
                await indexer.run_once()

            async def ask() -> list[Slot]:
                clock.now += timedelta(minutes=10)
                result = await engine.conversation.turn(
                    Incoming(ALICE, "Alice", QUESTION, "chan-1", "guild-1", message_id=f"q{clock.now.timestamp()}")
                )
                await engine.operator.wait_reflections(ALICE)
                await indexer.run_once()
                return result.selection.slots

            insides.context(engine).recall.series_slots = None
            uncapped = await ask()
            insides.context(engine).recall.series_slots = engine.settings.series_max_slots
            capped = await ask()
            figures = await engine.operator.consolidate()
            await indexer.run_once()
            members_of = {
                c.memory_id: len(c.members) for c in await engine.memories.consolidations(ALICE) if not c.undone
            }
            after = await ask()
            rows = [
                ("no cap", uncapped),
                (f"cap {engine.settings.series_max_slots} per series", capped),
                ("after consolidation", after),
            ]
            print(f"   turn: “{QUESTION}”, {len(await engine.memories.list(ALICE))} memories held after the job")
            print(f"   {'':<22}" + "".join(f"{c:>9}" for c in CITIES) + f"{'other':>8}{'facts':>8}")
            for name, slots in rows:
                per = slots_per_series(slots)
                print(
                    f"   {name:<22}"
                    + "".join(f"{per[c]:>9}" for c in CITIES)
                    + f"{per['other']:>8}{facts_held(slots, members_of):>8}"
                )
            print(
                f"   series found {figures.series_found}, consolidated {figures.consolidated}, refused {dict(figures.refused)}, model calls {figures.llm_calls}"
            )
            share = engine.settings.series_max_slots
            worst = max((n for c, n in slots_per_series(after).items() if c != "other"), default=0)
            print(
                f"   after: no series takes more than {worst} slot(s) (its share: {share}) {'OK' if worst <= share else 'MISSED'}"
            )
            for c in await engine.memories.consolidations(ALICE):
                print(f"     #{c.memory_id} ← {len(c.members)} memories: {c.text}")
            assert worst <= share
        finally:
            await engine.close(timeout=5)
            await http.aclose()
            await server.stop()
            await db.close()


def season_script(rng: random.Random, days: int) -> list[list[tuple[str, str, str]]]:
    """Per day, (message, memory, type) lines: the series and the ordinary facts of a season."""
    start = datetime(2026, 1, 5)
    months = "janvier février mars avril mai juin".split()
    weekdays = "lundi mardi mercredi jeudi vendredi samedi dimanche".split()
    facts = [
        "Alice travaille comme infirmière de nuit",
        "Alice a une sœur nommée Jeanne",
        "Alice apprend l'italien",
        "Alice est allergique aux chats",
        "Alice aime les romans policiers",
        "Alice vote pour la première fois",
        "Alice a adopté une tortue nommée Zénon",
        "Alice déteste les huîtres",
        "Alice collectionne les timbres",
        "Alice veut déménager à Bordeaux",
        "Alice fait du yoga",
        "Alice a peur des araignées",
    ]
    out: list[list[tuple[str, str, str]]] = []
    for d in range(days):
        day = start + timedelta(days=d)
        date = f"{weekdays[day.weekday()]} {day.day} {months[day.month - 1]}"
        lines = []
        if day.weekday() in (0, 3):
            lines.append((f"Tennis ce {date} !", f"Alice a joué au tennis le {date}", "episode"))
        if rng.random() < 0.3:
            km = rng.randint(4, 21)
            lines.append((f"J'ai couru {km} km aujourd'hui.", f"Alice a couru {km} km le {date}", "episode"))
        if day.day in (1, 15):
            lines.append((f"Dîner chez maman ce {date}.", f"Alice a dîné chez sa mère le {date}", "episode"))
        if rng.random() < 0.12:
            lines.append(("Je suis crevée.", f"Alice était fatiguée le {date}", "episode"))
        if d % 5 == 0 and facts:
            fact = facts.pop(0)
            lines.append((f"Au fait : {fact.lower()}.", fact, "fact"))
        if not lines:
            lines.append(("Salut !", "", ""))
        out.append(lines)
    return out


async def season(embedder: LocalEmbedder, days: int) -> None:
    print(f"\n2. A season: {days} days of one user through the engine, the job every hour")
    rng = random.Random(24)
    script = season_script(rng, days)
    with tempfile.TemporaryDirectory(prefix="echo-season-") as tmp:
        server = FakeLLMServer()
        await server.start()
        http = httpx.AsyncClient(trust_env=False, timeout=60)
        clock = Clock(datetime(2026, 1, 5, 8, tzinfo=UTC))
        model = Model({}, sloppy={"fatiguée": "drop"})
        server.handler = model
        engine, db = await make_engine(Path(tmp), server, http, clock, embedder)
        indexer = Indexer(db, embedder)
        totals = RunFigures()
        turns = 0
        try:
            for d, lines in enumerate(script):
                day_start = clock.now
                for n, (message, text, kind) in enumerate(lines):
                    model.memory_of = {message: (text, kind)} if text else {}
                    clock.now = day_start + timedelta(hours=10 + 3 * n)
                    await engine.conversation.turn(
                        Incoming(ALICE, "Alice", message, "chan-1", "guild-1", message_id=f"d{d}n{n}")
                    )
                    await engine.operator.wait_reflections(ALICE)
                    turns += 1
                await indexer.run_once()
                for hour in range(24):
                    clock.now = day_start + timedelta(hours=hour)
                    figures = await engine.operator.consolidate()
                    totals.consolidated += figures.consolidated
                    totals.llm_calls += figures.llm_calls
                    totals.refused.update(figures.refused)
                clock.now = day_start + timedelta(days=1)
            held = await engine.memories.list(ALICE)
            found = await insides.consolidations(engine).find(ALICE)
            print(
                f"   {turns} turns, {len(held)} memories held at the end, {len(await engine.memories.consolidations(ALICE))} consolidations"
            )
            print(
                f"   consolidated {totals.consolidated}, refused {dict(totals.refused)}, series left unconsolidated {len(found)}"
            )
            print(f"   consolidation model calls: {totals.llm_calls} in {days} days = {totals.llm_calls / days:.2f} per user per day"
                  f" (reflections: {turns} turns)")  # fmt: skip
            for c in [c for c in await engine.memories.consolidations(ALICE) if c.text is not None][:4]:
                print(f"     #{c.memory_id} ← {len(c.members)}: {c.text}")
        finally:
            await engine.close(timeout=5)
            await http.aclose()
            await server.stop()
            await db.close()


def seeded_texts(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """n (text, type): 6 % in series of 3 to 30 members, the rest distinct (no carrier, so no series)."""
    nouns = "thé café vélo piano jardin roman film chat chien opéra ski surf yoga échecs poterie tango".split()
    adjectives = "vert noir rouge ancien moderne italien japonais brésilien calme rapide lent doux fort".split()
    verbs = "aime préfère collectionne répare dessine photographie étudie critique".split()
    texts: list[tuple[str, str]] = []
    in_series = int(n * 0.06)
    s = 0
    while len(texts) < in_series:
        size = rng.randint(3, 30)
        place = f"{rng.choice(nouns)} {rng.choice(adjectives)} {s}"
        base = rng.randint(1950, 2000)
        texts += [
            (f"Alice a visité le musée du {place.rsplit(' ', 1)[0]} numéro-{_letters(s)} en {base + k}", "episode")
            for k in range(size)
        ]
        s += 1
    i = 0
    while len(texts) < n:
        texts.append(
            (f"Alice {rng.choice(verbs)} le {rng.choice(nouns)} {rng.choice(adjectives)} de {_letters(i)}", "fact")
        )
        i += 1
    return texts[:n]


def _letters(i: int) -> str:
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(97 + r) + out
    return "x" + out


async def seed(path: Path, texts: list[tuple[str, str]], now: datetime) -> None:
    db = await SQLiteDatabase.open(path)
    try:
        stamp = to_db(now)
        async with db.write() as conn:
            await conn.executemany(
                "INSERT INTO memories (user_id, text, type, scope, story_id, place, confidence, pinned, "
                "created_at, updated_at, content_hash) VALUES (?, ?, ?, 'global', NULL, 'guild-1', 0.9, 0, ?, ?, ?)",
                [(ALICE, t, k, stamp, stamp, content_hash(t)) for t, k in texts],
            )
            await conn.execute(
                "INSERT INTO exchanges (user_id, user_name, story_id, place, user_message, reply, created_at, answered_at, "
                "reflected_at, settled_at) VALUES (?, 'Alice', 'chan-1', 'guild-1', 'Salut', 'Salut', ?, ?, ?, ?)",
                (ALICE, stamp, stamp, stamp, stamp),
            )
    finally:
        await db.close()


async def timing(n: int) -> dict[str, float]:
    rng = random.Random(n)
    texts = seeded_texts(n, rng)
    with tempfile.TemporaryDirectory(prefix="echo-consolidation-time-") as tmp:
        now = datetime(2026, 3, 2, 9, tzinfo=UTC)
        await seed(Path(tmp) / "echo.sqlite3", texts, now)
        server = FakeLLMServer()
        await server.start()
        http = httpx.AsyncClient(trust_env=False, timeout=60)
        server.handler = Model({}, sloppy={})
        engine, db = await make_engine(Path(tmp), server, http, Clock(now), None)
        try:
            # The start-up warm-up reads the user and builds their write index (a minute of slices
            # at 100,000): done first, or it would be timed with the job.
            assert await engine.operator.warmed() is not None
            await insides.context(engine).cache.get(ALICE)
            frame.cache_clear()
            started = time.perf_counter()
            for text, _ in texts:
                frame.__wrapped__(text)
            baseline = time.perf_counter() - started
            frame.cache_clear()

            lags: list[float] = []
            stop = asyncio.Event()

            async def tick() -> None:
                while not stop.is_set():
                    before = time.perf_counter()
                    await asyncio.sleep(LAG_TICK)
                    lags.append(max(0.0, time.perf_counter() - before - LAG_TICK))

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(IDLE_SECONDS)  # the same ticker, the loop idle: the machine's own stalls
            idle = max(lags, default=0.0) * 1000
            lags.clear()
            started = time.perf_counter()
            figures = await engine.operator.consolidate()
            first = time.perf_counter() - started
            started = time.perf_counter()
            again = await engine.operator.consolidate()
            second = time.perf_counter() - started
            stop.set()
            await ticker

            memories = await engine.memories.list(ALICE)
            in_series = [memory_key(m) is not None for m in memories]
            now_us = int(now.timestamp() * 1e6)
            # Series members scored above the rest (the case the cap works on), by a cosine each;
            # then all tied at one score, the worst case: ties fall back on rank, ids in a row.
            spread = candidates_of(
                memories,
                {m.id: rng.uniform(0.85, 0.95) if s else rng.uniform(0.78, 0.88) for m, s in zip(memories, in_series)},
            )
            tied = candidates_of(
                memories, {m.id: 0.9 if s else rng.uniform(0.78, 0.88) for m, s in zip(memories, in_series)}
            )
            plain = _best_of(lambda: select_columns(spread, 24, threshold=0.80, now_us=now_us))
            capped = _best_of(lambda: select_columns(spread, 24, threshold=0.80, now_us=now_us, series_slots=3))
            capped_tied = _best_of(lambda: select_columns(tied, 24, threshold=0.80, now_us=now_us, series_slots=3))
            return {
                "n": n, "series": figures.series_found, "consolidated": figures.consolidated, "calls": figures.llm_calls,
                "first": first, "second": second, "scan": figures.scan_seconds, "baseline": baseline,
                "slice": max(figures.longest_slice_ms, again.longest_slice_ms), "lag": max(lags, default=0.0) * 1000,
                "idle": idle, "select": plain * 1000, "select_capped": capped * 1000, "select_tied": capped_tied * 1000,
            }  # fmt: skip
        finally:
            await engine.close(timeout=5)
            await http.aclose()
            await server.stop()
            await db.close()


def _best_of(run: Any, times: int = 5) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


async def recall_with_cap(embedder: LocalEmbedder) -> None:
    """bench/recall.py's corpus (18 references, 10 relevant pairs, 6 queries, 5 distractor sets):
    relevant pairs served in the final 24 by `select`, without and with the per-series cap."""
    import recall  # bench/recall.py: its corpus, as it builds it

    from bot.memory.read.conversation import SEMANTIC_THRESHOLDS
    from bot.memory.reference.selection import select
    from bot.memory.series import find_series

    corpus, _ = recall.build_corpus()
    vectors = await embedder.embed_passages([m.text for m in corpus.memories])
    row = {m.id: i for i, m in enumerate(corpus.memories)}
    queries = [await embedder.embed_query(q[1]) for q in recall.QUERIES]
    threshold = SEMANTIC_THRESHOLDS[embedder.model]
    print("\n4. Recall with the cap: bench/recall.py's corpus, relevant pairs served in the final 24 (sum over 5 sets)")
    print(f"   {'size':>6} {'series':>7} {'members':>8} {'in a series':>12} {'no cap':>8} {'cap 3':>7}")
    for size in recall.SIZES:
        served = {None: 0, 3: 0}
        series = members = relevant_in = 0
        for s in range(recall.SETS):
            memories = corpus.at_size(s, size)
            found = find_series(memories)
            series += len(found)
            in_series = {m.id for f in found for m in f.members}
            members += len(in_series)
            relevant_in += sum(mid in in_series for _, mid in corpus.relevant)
            matrix = vectors[[row[m.id] for m in memories]]
            for qi, query in enumerate(queries):
                cosines = matrix @ query
                scores = {m.id: float(c) for m, c in zip(memories, cosines)}
                wanted = {mid for q, mid in corpus.relevant if q == qi}
                for slots in served:
                    chosen = select(
                        memories, scores, recall.FINAL_LIMIT, threshold=threshold, now=recall.NOW, series_slots=slots
                    )
                    served[slots] += sum(c.memory.id in wanted for c in chosen)
        total = len(corpus.relevant) * recall.SETS
        print(
            f"   {size:>6,} {series:>7} {members:>8} {relevant_in:>12} {served[None]:>5}/{total} {served[3]:>4}/{total}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--days", type=int, default=60)
    args = parser.parse_args()
    embedder = LocalEmbedder()
    await screenshot_week(embedder)
    await season(embedder, args.days)
    print(
        "\n3. Time per run of the job (one user; series of 3-30 members are 6 % of the memories; 4 model calls per run)"
    )
    print(f"   {'N':>8} {'series':>7} {'run s':>7} {'next run s':>11} {'scan s':>7} {'frames once s':>14} {'ratio':>6} "
          f"{'slice ms':>9} {'lag ms':>7} {'idle lag':>9} {'select ms':>10} {'capped ms':>10} {'ratio':>6} {'tied ms':>8} {'ratio':>6}")  # fmt: skip
    for n in args.sizes:
        r = await timing(n)
        print(f"   {r['n']:>8,} {r['series']:>7,.0f} {r['first']:>7.2f} {r['second']:>11.2f} {r['scan']:>7.2f} {r['baseline']:>14.2f} "
              f"{r['scan'] / r['baseline']:>5.1f}x {r['slice']:>9.1f} {r['lag']:>7.1f} {r['idle']:>9.1f} {r['select']:>10.2f} "
              f"{r['select_capped']:>10.2f} {r['select_capped'] / r['select']:>5.1f}x {r['select_tied']:>8.2f} "
              f"{r['select_tied'] / r['select']:>5.1f}x")  # fmt: skip
    print(
        "   run s: the first run (frames computed, 4 series consolidated); next run s: the one after (frames memoised);"
    )
    print(
        "   scan s: finding the series on the event loop in slices; frames once s: the same frames computed in one go,"
    )
    print(
        "   unsliced (the baseline); slice ms: the longest slice of the scan in CPU time; lag ms: how late a 5 ms sleep woke during"
    )
    print(
        f"   both runs; idle lag: the same over {IDLE_SECONDS:.0f} s with the loop idle, just before (the machine's own stalls);"
    )
    print(
        "   select / capped ms: the turn's selection over every memory without and with the cap, series members scored"
    )
    print("   0.85-0.95 above the rest (0.78-0.88); tied ms: the cap with every member at one score (ties go by rank,")
    print("   a series' ids in a row: the worst case), best of 5.")
    await recall_with_cap(embedder)


if __name__ == "__main__":
    asyncio.run(main())
