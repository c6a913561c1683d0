"""Builds the services both front ends run on (Discord bot and terminal chat) and closes them.

Following discord.py's advanced start-up example, the database and the HTTP client are created
here and handed to whoever needs them, so every piece can also be built offline in tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from typing import Any

import httpx
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.cast import Cast, load_cast
from bot.character import Character
from bot.config import Settings
from bot.clients.db import Database, storage_failure
from bot.clients.embeddings import Embedder, make_embedder
from bot.errors import EmbeddingError, StartupError
from bot.engine import Engine
from bot.clients.llm import LLMClient
from bot.memory.indexing import Indexer
from bot.clients.tasks import quiet_when_cancelled
from bot.clients.metrics import Metrics
from bot.web.health import Health
from bot.web.server import WebServer, make_app

log = logging.getLogger(__name__)

# Answered-but-unreflected exchanges (LLM down at the time) are retried this often.
PENDING_SWEEP_SECONDS = 300
WARM_UP_SECONDS = 60.0


@dataclass(slots=True)
class Services:
    settings: Settings
    db: Database
    http: httpx.AsyncClient
    llm: LLMClient
    embedder: Embedder
    character: Character
    engine: Engine
    scheduler: AsyncIOScheduler
    indexer: Indexer
    metrics: Metrics
    health: Health
    # The owner's page, when WEB_ENABLED.
    web: WebServer | None = None


def _secret(value) -> str | None:  # type: ignore[no-untyped-def]
    return value.get_secret_value() if value is not None else None


async def _warm_up(embedder: Embedder) -> None:
    """One embedding before the first turn: the first call pays the model's start-up, and a
    turn's 5 s bound must not be spent on it. A dead embedder does not stop the bot."""
    try:
        await asyncio.wait_for(embedder.embed_query("warm-up"), timeout=WARM_UP_SECONDS)
    except (EmbeddingError, TimeoutError) as exc:
        log.warning("the embedder did not answer at start-up; memory runs lexically until it does: %s", exc)


def _unopenable(path: Path, exc: BaseException) -> str:
    failure = storage_failure(path, exc)
    existing = _nearest_existing(path)
    if existing is not None and os.statvfs(existing).f_flag & os.ST_RDONLY:
        why = "it is on a read-only file system (a volume mounted read-only?)"
    elif existing is not None and not os.access(existing, os.W_OK):
        why = f"this user (uid {os.getuid()}) may not write to {existing}"
    elif failure is not None:
        why = f"{failure.reason}: {exc}"
    else:
        why = str(exc)
    return (
        f"Cannot open the database {path} ({why}). Check that the folder exists or can be "
        "created and that this user may write there (in Docker, a bind mount must belong to uid "
        "1000: chown 1000:1000 <folder>), or set DATABASE_PATH."
    )


async def _open_postgres(url: str) -> Any:
    from bot.clients.postgres import PostgresDatabase, describe, open_failure

    try:
        return await PostgresDatabase.open(url)
    except Exception as exc:
        why = open_failure(exc)
        if why is None:
            raise
        raise StartupError(
            f"Cannot open the PostgreSQL database {describe(url)} ({why}). Check DATABASE_URL: the "
            "server must be running and reachable, the database must exist (createdb echo) and the "
            "user must be allowed to create tables in it."
        ) from exc


def _nearest_existing(path: Path) -> Path | None:
    """The file, or the nearest folder above it that exists."""
    return next((p for p in (path, *path.parents) if p.exists()), None)


async def _start_web(settings: Settings, engine: Engine, health: Health, metrics: Metrics) -> WebServer:
    token = _secret(settings.web_token) or ""  # load_settings refuses WEB_ENABLED without one
    web = WebServer(make_app(engine, health, metrics, token.strip()))
    try:
        await web.start(settings.web_host, settings.web_port)
    except OSError as exc:
        raise StartupError(
            f"The owner's page cannot listen on {settings.web_host}:{settings.web_port} ({exc}). "
            "Another program may use that port: set WEB_PORT to a free one, or WEB_ENABLED=false."
        ) from exc
    log.info("owner's page at %s (WEB_HOST, WEB_PORT); it asks for WEB_TOKEN", web.url)
    return web


@asynccontextmanager
async def open_services(settings: Settings, *, check_llm: bool = True) -> AsyncIterator[Services]:
    """Open everything; on exit, finish or park reflections, stop jobs, close HTTP and the DB."""
    cast: Cast = load_cast(settings.characters_dir, settings.character_file)
    character = cast.default
    http = httpx.AsyncClient(timeout=httpx.Timeout(settings.llm_timeout_seconds, connect=5.0))
    llm = LLMClient(
        http,
        api=settings.llm_api,
        base_url=settings.llm_base_url,
        api_key=_secret(settings.llm_api_key),
        timeout=settings.llm_timeout_seconds,
        context_tokens=settings.llm_context_tokens if settings.llm_api == "ollama" else None,
    )
    try:
        # Before the database is created: a wrong URL or model leaves nothing behind.
        if check_llm:
            await llm.check(settings.llm_model)
            if settings.reflection_model != settings.llm_model:
                await llm.check(settings.reflection_model)
        if settings.database_url:
            db = await _open_postgres(settings.database_url)
        else:
            try:
                db = await Database.open(settings.database_path)
            except (OSError, sqlite3.Error) as exc:
                raise StartupError(_unopenable(settings.database_path, exc)) from exc
    except BaseException:
        await http.aclose()
        raise
    scheduler = AsyncIOScheduler()
    engine: Engine | None = None
    web: WebServer | None = None
    metrics = Metrics()
    metrics.watch_storage(lambda: db.storage.failures)
    try:
        embedder = metrics.timed(
            make_embedder(
                settings.embeddings,
                model=settings.embeddings_model,
                base_url=settings.embeddings_base_url,
                api_key=_secret(settings.embeddings_api_key),
                http=http,
            )
        )
        await _warm_up(embedder)
        engine = Engine(
            db=db, llm=llm, embedder=embedder, settings=settings, character=character, cast=cast, metrics=metrics
        )
        indexer = Indexer(db, embedder, cache=engine.cache)
        await engine.start()
        indexer.schedule(scheduler, seconds=settings.index_interval_seconds)
        scheduler.add_job(
            quiet_when_cancelled(engine.resume_pending_reflections),
            "interval",
            seconds=PENDING_SWEEP_SECONDS,
            id="pending-reflections",
            max_instances=1,
            coalesce=True,
        )
        scheduler.start()
        health = Health(db=db, llm=llm, model=settings.llm_model, embedder=embedder)
        if settings.web_enabled:
            web = await _start_web(settings, engine, health, metrics)
        yield Services(settings, db, http, llm, embedder, character, engine, scheduler, indexer, metrics, health, web)
    finally:
        if web is not None:
            await web.stop()
        # Reflections first (they may still need the indexer's writes to land), then the jobs.
        if engine is not None:
            await engine.close()
        if scheduler.running:
            scheduler.shutdown(wait=False)
        await http.aclose()
        await db.close()
