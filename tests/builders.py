"""What tests build their subjects with: the engine over a test's database and the scripted LLM,
an incoming message, the offline embedder shared by the run, the services the front ends get,
memories written straight into a database. Discord's fakes are in tests/cogs/__init__.py.
Fixtures are in tests/conftest.py."""

from __future__ import annotations

import copy
import time
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.app import Services
from bot.characters.cast import Cast
from bot.characters.character import Character, load_character
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import Embedder, LocalEmbedder
from bot.clients.health import Health
from bot.clients.llm import LLMClient
from bot.clients.metrics import Metrics
from bot.clients.storage import Database, inserted_id, to_db
from bot.config import Settings, load_settings
from bot.engine import Engine, Incoming
from bot.engine.rules import character_owner
from bot.memory.model import Memory, content_hash, utcnow
from bot.memory.stores.memory_store import MemoryStore
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer


@cache
def local_embedder() -> LocalEmbedder:
    """The offline model, loaded once for the whole run."""
    return LocalEmbedder()


@cache
def _bundled_character() -> Character:
    return load_character(None)


def bundled_character() -> Character:
    """The character Écho ships, its YAML read once per run (a few ms a test): each test gets
    a copy of its own."""
    return copy.deepcopy(_bundled_character())


def settings_for(llm_server: FakeLLMServer | None, tmp_path: Path, **settings: Any) -> Settings:
    """Settings pointing at the scripted LLM (or at the server `settings` name), read from
    nothing but the arguments."""
    values: dict[str, Any] = {"llm_model": FAKE_MODEL, "database_path": tmp_path / "x.db"}
    if llm_server is not None:
        values["llm_base_url"] = llm_server.url
    return load_settings(_env_file=None, **(values | settings))


def make_engine(
    db: Database,
    http: httpx.AsyncClient,
    llm_server: FakeLLMServer | None,
    tmp_path: Path,
    *,
    embedder: Embedder | None = None,
    clock: Any = None,
    character: Character | None = None,
    cast: Cast | None = None,
    metrics: Metrics | None = None,
    llm: LLMClient | None = None,
    **settings: Any,
) -> Engine:
    config = settings_for(llm_server, tmp_path, **settings)
    llm = llm or LLMClient(http, api="ollama", base_url=config.llm.base_url)
    extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
    if cast is not None:
        extra["cast"] = cast
    if metrics is not None:
        extra["metrics"] = metrics
    return Engine(
        db=db,
        llm=llm,
        embedder=embedder,
        settings=config.engine,
        character=character or (cast.default if cast is not None else bundled_character()),
        **extra,
    )


# httpx loads the CA bundle again for every client it makes (~40 ms): the tests' many clients
# share one context. They speak plain HTTP to 127.0.0.1; the context is httpx's default.
_TLS = httpx.create_ssl_context()


def http_client(**options: Any) -> httpx.AsyncClient:
    """An HTTP client for a test: no proxy taken from the environment, the shared TLS context."""
    return httpx.AsyncClient(trust_env=False, verify=_TLS, **options)


def msg(text: str, *, user: str = "alice", story: str = "chan-1", place: str = "guild-1") -> Incoming:
    return Incoming(
        user_id=user,
        user_name=user.title(),
        text=text,
        story_id=story,
        place=place,
        message_id=f"m-{time.monotonic_ns()}",
    )


async def offline_services(settings: Settings, db: Database) -> Services:
    """What `open_services` builds, minus the embedder (None: turns run without semantic
    recall) and the indexer and jobs the front ends never touch."""
    http = http_client()
    llm = LLMClient(http, api=settings.llm.api, base_url=settings.llm.base_url, timeout=10)
    character = bundled_character()
    metrics = Metrics()
    engine = Engine(db=db, llm=llm, embedder=None, settings=settings.engine, character=character, metrics=metrics)
    await engine.start()
    return Services(
        settings=settings,
        db=db,
        http=http,
        llm=llm,
        embedder=None,  # type: ignore[arg-type]
        character=character,
        engine=engine,
        scheduler=AsyncIOScheduler(),
        metrics=metrics,
        health=Health(db=db, llm=llm, model=settings.engine.llm_model, embedder=None),
    )


def cache_reads(metrics: Metrics, how: str) -> int:
    """How many reads of people's memories the engine's cache served so (`hit`, `catch_up`,
    `load`), as /metrics shows them."""
    return int(metrics.registry.get_sample_value("echo_memory_cache_reads_total", {"how": how}) or 0)


def cache_held(metrics: Metrics) -> tuple[int, int]:
    """The people and bytes the engine's cache holds, as /metrics shows them."""
    value = metrics.registry.get_sample_value
    return int(value("echo_memory_cache_people") or 0), int(value("echo_memory_cache_bytes") or 0)


def turns_in_memory_work(metrics: Metrics) -> int:
    """The turns doing their memory work now (not waiting for the model), as /metrics shows them."""
    return int(metrics.registry.get_sample_value("echo_turns_memory_work") or 0)


async def character_rules(store: MemoryStore, character: Character) -> list[Memory]:
    """The character's rules as its engine stored them at start: `rule` memories of the
    character itself, in id order."""
    return await store.list(character_owner(character.name), types=["rule"], include_rules=True)


async def add_memory(db: SQLiteDatabase, user_id: str, text: str, *, expires_in: timedelta | None = None) -> int:
    now = utcnow()
    expires_at = to_db(now + expires_in) if expires_in is not None else None
    async with db.write() as conn:
        memory_id = await inserted_id(
            conn,
            "INSERT INTO memories (user_id, text, type, created_at, updated_at, expires_at, content_hash)"
            " VALUES (?, ?, 'fact', ?, ?, ?, ?) RETURNING id",
            (user_id, text, to_db(now), to_db(now), expires_at, content_hash(text)),
        )
        assert memory_id is not None
        return memory_id


async def set_text(db: SQLiteDatabase, user_id: str, memory_id: int, text: str) -> None:
    async with db.write() as conn:
        await conn.execute(
            "UPDATE memories SET text = ?, content_hash = ? WHERE id = ? AND user_id = ?",
            (text, content_hash(text), memory_id, user_id),
        )


async def delete_memory(db: SQLiteDatabase, user_id: str, memory_id: int) -> None:
    async with db.write() as conn:
        await conn.execute("DELETE FROM memories WHERE id = ? AND user_id = ?", (memory_id, user_id))


# Distinct facts about one person, none a look-alike of another: facts that differ only by a
# number would form a series, held to 3 slots, and a test filling the 24 slots needs them apart.
DISTINCT_FACTS = [
    "a un chat roux nommé Biscuit",
    "joue du violoncelle le dimanche",
    "est allergique aux arachides",
    "travaille comme infirmière de nuit",
    "collectionne les cartes postales anciennes",
    "déteste la coriandre",
    "court un semi-marathon en avril",
    "a grandi à Brest",
    "parle couramment le portugais",
    "cultive des tomates sur son balcon",
    "a peur des orages",
    "lit des romans policiers suédois",
    "boit son café sans sucre",
    "a une sœur jumelle prénommée Inès",
    "répare de vieux vélos",
    "fait de la plongée en Bretagne",
    "apprend le japonais depuis un an",
    "a promis de finir sa thèse",
    "préfère la mer à la montagne",
    "a un potager partagé",
    "écrit un carnet de rêves",
    "dessine des cartes imaginaires",
    "a adopté un lapin",
    "part en Islande cet été",
    "chante dans une chorale",
    "n'aime pas les huîtres",
    "a une vieille Vespa bleue",
    "fait son pain le samedi",
]
