"""Builds the services both front ends run on (Discord bot and terminal chat) and closes them.

Following discord.py's advanced start-up example, the database and the HTTP client are created
here and handed to whoever needs them, so every piece can also be built offline in tests.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import httpx

from bot.characters.cast import Cast, load_cast
from bot.characters.character import Character
from bot.clients.backup import next_due, scheduled_backup
from bot.clients.databases import open_database
from bot.clients.erasures import ErasureLedger, ledger_paths
from bot.clients.llm import LLMClient
from bot.clients.storage import Database
from bot.clients.tasks import quiet_when_cancelled
from bot.config import Settings, WebSettings, secret
from bot.errors import EmbeddingError, LLMError, StartupError

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from bot.clients.embeddings import Embedder
    from bot.clients.health import Health
    from bot.clients.metrics import Metrics
    from bot.engine import Engine
    from bot.web.server import WebServer

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
    metrics: Metrics
    health: Health
    # The owner's page, when WEB_ENABLED.
    web: WebServer | None = None


async def _warm_up(embedder: Embedder) -> None:
    """One embedding before the first turn: the first call pays the model's start-up, and a
    turn's 5 s bound must not be spent on it. A dead embedder does not stop the bot."""
    try:
        await asyncio.wait_for(embedder.embed_query("warm-up"), timeout=WARM_UP_SECONDS)
    except (EmbeddingError, TimeoutError) as exc:
        log.warning("the embedder did not answer at start-up; memory runs lexically until it does: %s", exc)


async def _describe(llm: LLMClient, model: str) -> None:
    """What the server says of its context and kind (turns fit their prompts in it); a server
    that does not say leaves LLM_CONTEXT_TOKENS in force."""
    try:
        server = await llm.describe(model)
    except LLMError as exc:
        log.warning("the LLM server did not say its context; LLM_CONTEXT_TOKENS stands in: %s", exc)
        return
    said = f"{server.context_tokens:,} tokens" if server.context_tokens else "not said (LLM_CONTEXT_TOKENS stands in)"
    log.info("LLM server: %s, context per request %s", server.kind, said)


async def _start_web(settings: WebSettings, engine: Engine, health: Health, metrics: Metrics) -> WebServer:
    # Imported here so that a bot without the page never loads aiohttp's server or jinja2.
    from bot.web.server import WebServer, make_app

    web = WebServer(make_app(engine, health, metrics, settings.secret_token))
    try:
        await web.start(settings.host, settings.port)
    except OSError as exc:
        raise StartupError(
            f"The owner's page cannot listen on {settings.host}:{settings.port} ({exc}). "
            "Another program may use that port: set WEB_PORT to a free one, or WEB_ENABLED=false."
        ) from exc
    log.info("owner's page at %s (WEB_HOST, WEB_PORT); it asks for WEB_TOKEN", web.url)
    return web


@asynccontextmanager
async def open_services(
    settings: Settings, *, check_llm: bool = True, web_page: bool = True
) -> AsyncIterator[Services]:
    """Open everything; on exit, finish or park reflections, stop jobs, close HTTP and the DB."""
    storage = settings.storage
    cast: Cast = load_cast(storage.characters_dir, storage.character_file)
    character = cast.default
    for each in cast.characters.values():
        if each.lore is not None and each.lore.constant_chars > (
            budget := each.lore.budget(settings.engine.lore_budget_chars)
        ):
            log.warning(
                "lore of %s: the entries always in (constant) take %d characters, over the %d-character budget: "
                "they are kept, and no other entry fits; raise %s",
                each.name,
                each.lore.constant_chars,
                budget,
                "its lorebook's budget" if each.lore.budget_chars is not None else "LORE_BUDGET_CHARS",
            )
    server, models = settings.llm, settings.engine
    http = httpx.AsyncClient(timeout=httpx.Timeout(models.llm_timeout_seconds, connect=5.0))
    llm = LLMClient(
        http,
        api=server.api,
        base_url=server.base_url,
        api_key=secret(server.api_key),
        timeout=models.llm_timeout_seconds,
        context_tokens=server.told_context(models.llm_context_tokens),
        keep_alive=server.told_keep_alive,
    )
    try:
        # Before the database is created: a wrong URL or model leaves nothing behind.
        if check_llm:
            await llm.check(models.llm_model)
            if models.reflection_model != models.llm_model:
                await llm.check(models.reflection_model)
            await _describe(llm, models.llm_model)
        db = await open_database(storage.database_url or storage.database_path)
    except BaseException:
        await http.aclose()
        raise
    # Loaded once the character, the LLM and the database answered: a start that stops on a
    # setting's mistake (an operator's typo, the tests' many processes) does not pay for them.
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from bot.clients.embeddings import make_embedder
    from bot.clients.health import Health
    from bot.clients.metrics import Metrics
    from bot.engine import Engine

    scheduler = AsyncIOScheduler()
    engine: Engine | None = None
    web: WebServer | None = None
    lag: asyncio.Task[None] | None = None
    metrics = Metrics()
    metrics.watch_storage(lambda: db.storage.failures)
    try:
        embedding = settings.embedding
        embedder = metrics.timed(
            make_embedder(
                embedding.kind,
                model=embedding.model,
                base_url=embedding.base_url,
                api_key=secret(embedding.api_key),
                http=http,
            )
        )
        await _warm_up(embedder)
        # Every erase is written beside the database and in BACKUP_DIR too, outside any backup:
        # `python -m bot restore` erases again whoever a backup predates the erase of.
        ledger = (
            None if storage.database_url else ErasureLedger(ledger_paths(storage.database_path, storage.backups)).append
        )
        engine = Engine(
            db=db, llm=llm, embedder=embedder, settings=settings.engine, character=character, cast=cast, metrics=metrics,
            erasures=ledger,
        )  # fmt: skip
        await engine.start()
        engine.operator.schedule_indexing(scheduler, seconds=embedding.index_interval_seconds)
        scheduler.add_job(
            quiet_when_cancelled(engine.operator.resume_pending_reflections),
            "interval",
            seconds=PENDING_SWEEP_SECONDS,
            id="pending-reflections",
            max_instances=1,
            coalesce=True,
        )
        if storage.backup_every_hours and not storage.database_url:
            every = timedelta(hours=storage.backup_every_hours)

            async def back_up_the_database() -> None:
                await scheduled_backup(storage.database_path, storage.backups, storage.backup_keep)

            scheduler.add_job(
                quiet_when_cancelled(back_up_the_database),
                "interval",
                seconds=every.total_seconds(),
                next_run_time=next_due(storage.backups, every),
                id="backup",
                max_instances=1,
                coalesce=True,
            )
        elif storage.backup_every_hours:
            log.warning("BACKUP_EVERY_HOURS backs up SQLite only: back up PostgreSQL with pg_dump (see README)")
        # Series of look-alike memories rewritten into one each, off the turns' path.
        scheduler.add_job(
            quiet_when_cancelled(engine.operator.consolidate),
            "interval",
            seconds=settings.engine.consolidation_interval_seconds,
            id="consolidation",
            max_instances=1,
            coalesce=True,
        )
        scheduler.start()
        health = Health(db=db, llm=llm, model=models.llm_model, embedder=embedder)
        # The terminal chat serves no page: trying the character beside a running bot must not
        # need the page's port.
        if settings.web.enabled and web_page:
            web = await _start_web(settings.web, engine, health, metrics)
        lag = asyncio.create_task(metrics.watch_loop(), name="loop-lag")
        yield Services(settings, db, http, llm, embedder, character, engine, scheduler, metrics, health, web)
    finally:
        if lag is not None:
            lag.cancel()
        if web is not None:
            await web.stop()
        # Reflections first (they may still need the indexer's writes to land), then the jobs.
        if engine is not None:
            await engine.close()
        if scheduler.running:
            scheduler.shutdown(wait=False)
        await http.aclose()
        await db.close()
