"""`python -m bot doctor`: every set-up mistake `make run` would meet, found in one run.

One line per check, ✓ or ✗, and after a ✗ what to do. The groups (settings and characters,
database, LLM, embedder, Discord, owner's page) run side by side, each call bounded; a group
stops at its first failure that the next checks depend on (a refused token hides the intents).
Reads and asks; changes nothing: no migration is applied, no file is left behind.

Over 450 lines on purpose: it is the list of checks in the order they are printed, each with
the words of its ✗ and its fix beside it; split by dependency, the order and the wording of the
one report would be spread over files that nothing else uses.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sqlite3
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bot.characters.cast import Cast, load_cast
from bot.characters.character import render_character_prompt
from bot.characters.macros import TurnValues
from bot.clients.db import POSTGRES_MIGRATIONS_DIR, list_migrations, schema_version
from bot.clients.embeddings import make_embedder
from bot.clients.llm import LLMClient
from bot.clients.redaction import redact
from bot.config import Settings, StorageSettings, load_settings
from bot.engine.fitting import TokenRate, answer_room
from bot.engine.prompting import ChannelLine, build_reply_messages
from bot.errors import CharacterError, ConfigError, EmbeddingError, LLMError, ModelNotFound, ReflectionParseError
from bot.memory.choice import DEFAULT_LIMIT
from bot.memory.model import Memory, utcnow
from bot.memory.read.recall import SEMANTIC_THRESHOLDS, threshold_for
from bot.memory.story.plans import render_story_context
from bot.memory.story.state import parse_state_specs, state_values
from bot.memory.write.reflection import parse_reflection, reflection_json_schema

# Under this much free space a backup, a VACUUM or a busy week of writes can fill the disk.
MIN_FREE_BYTES = 200_000_000
# Bounds of one check: a model loading from disk takes tens of seconds on its first call.
LLM_SECONDS = 120.0
EMBEDDER_SECONDS = 60.0
DISCORD_SECONDS = 10.0
# Application flags (GET /applications/@me): the intent is enabled, for a verified or an
# unverified (under 100 servers) application.
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)
MANAGE_WEBHOOKS = 1 << 29
# A bounded number of channels.yaml places are asked about: each is one REST call.
MAX_PLACES_CHECKED = 25
PORTAL = "https://discord.com/developers/applications"


@dataclass(frozen=True, slots=True)
class Finding:
    ok: bool
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{'✓' if self.ok else '✗'} {self.name}: {self.detail}"
        return f"{text}\n    → {self.fix}" if not self.ok and self.fix else text


def _good(name: str, detail: str) -> Finding:
    return Finding(True, name, detail)


def _bad(name: str, detail: str, fix: str) -> Finding:
    return Finding(False, name, detail, fix)


# --- settings and characters ------------------------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def check_settings() -> tuple[Settings | None, list[Finding]]:
    """The settings, or None when they are invalid; a key of .env that is no setting (a typo
    the bot would ignore in silence) is a finding of its own."""
    config_log = logging.getLogger("bot.config")
    seen, propagate = _Collect(), config_log.propagate
    config_log.addHandler(seen)
    config_log.propagate = False
    try:
        settings = load_settings()
    except ConfigError as exc:
        return None, [_bad("settings", str(exc), "correct them in .env (see .env.example); nothing else can be checked before")]
    finally:
        config_log.removeHandler(seen)
        config_log.propagate = propagate
    if seen.lines:
        return settings, [_bad("settings", line, "correct the key, or remove it") for line in seen.lines]
    return settings, [_good("settings", "read")]


def check_characters(settings: Settings) -> tuple[list[Finding], Cast | None]:
    storage = settings.storage
    try:
        cast = load_cast(storage.characters_dir, storage.character_file)
    except CharacterError as exc:
        return [_bad("characters", str(exc), "correct the file named above, or CHARACTER_FILE / CHARACTERS_DIR")], None
    names = ", ".join(c.name for c in cast.characters.values())
    found = [_good("characters", f"{len(cast.characters)} loaded ({names})")]
    for character in cast.characters.values():
        lore = character.lore
        ignored = character.ignored + (lore.ignored if lore is not None else ())
        if ignored:
            found.append(_good("characters", f"{character.name}: ignored (Écho does not act on them): {', '.join(ignored)}"))
        if lore is not None and lore.constant_chars > (budget := lore.budget(settings.engine.lore_budget_chars)):
            setting = "its lorebook's budget" if lore.budget_chars is not None else "LORE_BUDGET_CHARS"
            found.append(_bad(
                "lore",
                f"{character.name}: the entries always in (constant) take {lore.constant_chars} characters, over the "
                f"{budget}-character budget: they are kept, and no other entry fits",
                f"raise {setting} above {lore.constant_chars}, or shorten the constant entries",
            ))
    return found, cast


# --- database ---------------------------------------------------------------------------------


def _nearest_folder(path: Path) -> Path:
    return next(p for p in path.parents if p.exists())


def check_backups(storage: StorageSettings) -> list[Finding]:
    """Where scheduled backups go can be written (BACKUP_EVERY_HOURS on a SQLite database)."""
    if not storage.backup_every_hours or storage.database_url:
        return []
    folder = storage.backup_dir if storage.backup_dir.exists() else _nearest_folder(storage.backup_dir)
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder")
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return [
            _bad(
                "backups",
                f"BACKUP_DIR {storage.backup_dir} cannot be written ({exc.strerror or exc})",
                "create it writable for this user, or set BACKUP_DIR elsewhere",
            )
        ]
    return [_good("backups", f"every {storage.backup_every_hours:g} h into {storage.backup_dir}, {storage.backup_keep} kept")]


def check_sqlite(path: Path) -> list[Finding]:
    folder = path.parent if path.parent.exists() else _nearest_folder(path)
    found: list[Finding] = []
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is not writable by uid {os.getuid()}")
    except OSError as exc:
        read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
        why = "it is on a read-only file system" if read_only else (exc.strerror or str(exc))
        return [
            _bad(
                "database",
                f"cannot write in {folder} ({why})",
                "mount the volume read-write, or give this user the folder (in Docker: chown 1000:1000 "
                "<folder>), or set DATABASE_PATH to a writable place",
            )
        ]
    found.append(_good("database", f"{path} writable" if path.exists() else f"{path} will be created in {folder}"))
    found.append(_privacy(path))
    known = len(list_migrations())
    if path.exists():
        try:
            version = schema_version(path)
        except sqlite3.Error as exc:
            found.append(_bad("migrations", f"{path} cannot be read ({exc})", "restore a backup: python -m bot restore FILE"))
            version = None
        if version is not None:
            found.append(_migrations(version, known))
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    if free < MIN_FREE_BYTES:
        found.append(
            _bad("free disk", f"{free / 1e6:.0f} MB free in {folder}", f"free at least {MIN_FREE_BYTES / 1e6:.0f} MB")
        )
    else:
        found.append(_good("free disk", f"{free / 1e9:.1f} GB free"))
    return found


def _privacy(path: Path) -> Finding:
    """Whether users other than the file's owner may read the database or its -wal and -shm:
    they hold every memory and transcript (Écho creates them 0600; an older or copied file may
    be more open)."""
    files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
    open_to_others = [f"{p.name} ({stat.S_IMODE(p.stat().st_mode):o})" for p in files if p.stat().st_mode & 0o077]
    if open_to_others:
        return _bad(
            "database privacy",
            f"{', '.join(open_to_others)} can be read by other users of this machine: every memory and transcript is there",
            f"chmod 600 {path}*",
        )
    return _good("database privacy", "readable by this user only" if files else "will be created readable by this user only")


async def check_postgres(url: str) -> list[Finding]:
    import asyncpg

    from bot.clients.postgres import describe, probe

    try:
        read_only, version = await probe(url, timeout=DISCORD_SECONDS)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:  # a bad option is an InterfaceError
        return [_bad("database", f"{describe(url)} refuses: {exc}", "check DATABASE_URL, that the server runs and the database exists")]
    if read_only:
        return [_bad("database", f"{describe(url)} is read-only (a standby?)", "point DATABASE_URL at the primary")]
    return [_good("database", f"{describe(url)} answers and accepts writes"), _migrations(version, len(list_migrations(POSTGRES_MIGRATIONS_DIR)))]


def _migrations(version: int, known: int) -> Finding:
    if version > known:
        return _bad("migrations", f"schema {version}, newer than this Écho ({known})", "update Écho, or restore an older backup")
    pending = known - version
    return _good("migrations", "current" if not pending else f"{pending} to apply, automatically, at the next start")


# --- LLM --------------------------------------------------------------------------------------


REFLECTION_PROBE = [
    {
        "role": "system",
        "content": "Extract what the user says about themselves as memories, as JSON following the schema.",
    },
    {"role": "user", "content": "The exchange:\nuser: I have two cats, Miso and Tofu.\nassistant: Lovely names!"},
]


# A typical prompt's parts, to size the context a full one needs: a memory as the reflection
# writes them, and the channel's lines, a person's and the character's in turn.
SAMPLE_MEMORY = "The user has two cats, Miso and Tofu, and feeds them before leaving for work."
SAMPLE_LINES = (
    "I finally finished the shelves in the living room, it took all weekend!",
    "All weekend? Then they deserve a place of honour. What goes on them first, books or the "
    "plants you keep promising to repot? I want a picture once they are filled.",
)


async def check_llm(settings: Settings, http: httpx.AsyncClient, cast: Cast | None = None) -> list[Finding]:
    s = settings.llm
    llm = LLMClient(
        http,
        api=s.api,
        base_url=s.base_url,
        api_key=s.api_key,
        timeout=LLM_SECONDS,
        context_tokens=s.context_tokens,
        keep_alive=s.keep_alive,
    )
    found: list[Finding] = []
    usable: set[str] = set()
    for model in dict.fromkeys((s.model, s.reflection_model)):
        try:
            await llm.check(model)
        except ModelNotFound as exc:
            # The setting that names it: the reflection's model is REFLECTION_MODEL's, not LLM_MODEL's.
            named = " and ".join(n for n, m in (("LLM_MODEL", s.model), ("REFLECTION_MODEL", s.reflection_model)) if m == model)
            pull = f"`ollama pull {model}`, or " if s.api == "ollama" else ""
            found.append(_bad("LLM model", f"{model!r} is not on the server ({_first_line(exc)})", f"{pull}set {named} to a model the server has"))
            continue
        except LLMError as exc:
            return [_bad("LLM", _first_line(exc), f"start the server, or set LLM_BASE_URL / LLM_API (now {s.api})")]
        usable.add(model)
        found.append(_good("LLM model", f"{model!r} present on {s.base_url}"))
    if s.model in usable:
        started = time.monotonic()
        try:
            reply = await llm.chat([{"role": "user", "content": "Answer with one word: ready."}], model=s.model)
            found.append(_good("LLM reply", f"{reply.text[:40]!r} in {time.monotonic() - started:.1f} s"))
        except LLMError as exc:
            found.append(_bad("LLM reply", _first_line(exc), "see the server's log; LLM_TIMEOUT_SECONDS bounds a reply"))
        pieces: list[str] = []

        async def seen(text: str) -> None:
            pieces.append(text)

        try:
            await llm.stream([{"role": "user", "content": "Count from one to five."}], model=s.model, on_text=seen)
            found.append(_good("LLM streaming", f"{len(pieces)} pieces"))
        except LLMError as exc:
            found.append(
                _bad("LLM streaming", _first_line(exc), "use a server that streams, or STREAM_REPLIES=false")
            )
        found.append(await _check_context(llm, settings, cast or load_cast(None, None)))
    if s.reflection_model in usable:
        found.append(await _check_json(llm, s.reflection_model))
    if usable:
        found.append(_server_settings(llm))
    return found


async def _check_json(llm: LLMClient, model: str) -> Finding:
    """The reflection's call, read as the bot reads it: a server that ignores structured output
    answers prose, which nothing can be read from; an item the model filled wrongly (a number
    out of its range) is dropped alone, as the bot would drop it."""
    try:
        reply = await llm.chat(REFLECTION_PROBE, model=model, json_schema=reflection_json_schema())
    except LLMError as exc:
        return _bad("LLM JSON", _first_line(exc), "see the server's log")
    try:
        parsed = parse_reflection(reply.text)
    except ReflectionParseError:
        return _bad(
            "LLM JSON",
            f"asked for JSON following the reflection's schema, {model!r} answered {reply.text[:80]!r}",
            "the server ignores structured output: use Ollama 0.5 or later, or an OpenAI-compatible server "
            "with response_format json_schema (llama.cpp's server, vLLM), or set REFLECTION_MODEL to a model "
            "that follows it; without it no memory is written",
        )
    dropped = f"; {len(parsed.problems)} item(s) the model filled wrongly would be dropped" if parsed.problems else ""
    return _good("LLM JSON", f"{model!r} answers the reflection's schema{dropped}")


async def _check_context(llm: LLMClient, settings: Settings, cast: Cast) -> Finding:
    """The context the server gives one request, read where it says it (llama.cpp /props, Ollama
    /api/show, vLLM /v1/models; otherwise LLM_CONTEXT_TOKENS), against what the bot's prompts
    take: the smallest (the character and a message) and a full one (the 24 memories, the
    recent lines), each with room for the answer."""
    model, asked = settings.llm_model, settings.llm_context_tokens
    try:
        server = await llm.describe(model)
    except LLMError as exc:
        return _bad("LLM context", _first_line(exc), "see the server's log")
    said = server.context_tokens
    if llm.api == "ollama":
        if said is not None and asked > said:
            return _bad(
                "LLM context",
                f"LLM_CONTEXT_TOKENS={asked}, but {model!r} handles {said} tokens",
                f"set LLM_CONTEXT_TOKENS={said} or less",
            )
        context, source = asked, "asked of Ollama (LLM_CONTEXT_TOKENS)"
    elif said is not None:
        context, source = said, f"said by {server.kind}" + (", per slot" if server.kind == "llama.cpp" else "")
    else:
        context, source = asked, "the server does not report it: LLM_CONTEXT_TOKENS assumed"
    smallest, full, counted = await _prompt_sizes(llm, settings, cast)
    about = "" if counted else "about "
    room = answer_room(context)
    raise_it = (
        "start the server with a larger context (llama.cpp -c {n} with -np 1, vLLM --max-model-len {n})"
        if llm.api == "openai"
        else "set LLM_CONTEXT_TOKENS={n} (a model that handles it)"
    )
    if smallest + room > context:
        return _bad(
            "LLM context",
            f"{context:,} tokens ({source}): too small for even the smallest prompt, the character and a "
            f"message ({about}{smallest:,} tokens, and {room:,} to answer): no message will be answered",
            raise_it.format(n=_round_up(full + answer_room(full * 2))),
        )
    if full + room > context:
        return _bad(
            "LLM context",
            f"{context:,} tokens ({source}): a full prompt ({DEFAULT_LIMIT} memories, {settings.history_messages} "
            f"recent lines) takes {about}{full:,} tokens and {room:,} to answer: older lines and the weakest "
            "memories will be left out of each prompt",
            raise_it.format(n=_round_up(full + answer_room(full * 2))),
        )
    return _good("LLM context", f"{context:,} tokens ({source}); a full prompt takes {about}{full:,}")


def _round_up(tokens: int) -> int:
    return -(-tokens // 1024) * 1024


async def _prompt_sizes(llm: LLMClient, settings: Settings, cast: Cast) -> tuple[int, int, bool]:
    """Tokens of the largest character's smallest and full prompts, and whether the server
    counted them (llama.cpp), rather than estimated at the bot's default rate."""
    now = utcnow()
    memories = [
        Memory(id=i, user_id="doctor", text=SAMPLE_MEMORY, type="fact", scope="global", pinned=False,
               confidence=1.0, created_at=now, updated_at=now)
        for i in range(DEFAULT_LIMIT)
    ]
    lines = [
        ChannelLine("Alice", SAMPLE_LINES[i % 2], from_bot=bool(i % 2)) for i in range(settings.history_messages)
    ]
    sizes: list[tuple[int, int, bool]] = []
    for character in cast.characters.values():
        specs = parse_state_specs(character.state)
        story = render_story_context([], None, [], state_values(specs, {}), specs)
        prompts = []
        for history, chosen in (((), ()), (lines, memories)):
            prompts.append(
                build_reply_messages(
                    character_prompt=render_character_prompt(character, TurnValues(user="Alice", now=now)),
                    character_name=character.name,
                    rules=character.rules,
                    user_name="Alice",
                    memories=chosen,
                    story_context=story,
                    history=history,
                    message=SAMPLE_LINES[0],
                )
            )
        counted = [await llm.count_tokens(p) for p in prompts]
        if all(c is not None for c in counted):
            sizes.append((counted[0] or 0, counted[1] or 0, True))
        else:
            sizes.append((TokenRate().tokens(prompts[0]), TokenRate().tokens(prompts[1]), False))
    return max(sizes)


def _server_settings(llm: LLMClient) -> Finding:
    """What the bot tells the server with every call (docs/llm-servers.md)."""
    if llm.api == "ollama":
        told = f"keep_alive {llm.keep_alive} (LLM_KEEP_ALIVE), num_ctx {llm.context_tokens} on every call"
    else:
        kind = llm.server.kind if llm.server is not None else "OpenAI-compatible"
        told = f"{kind}: a prompt_cache_key per conversation (salted hash)"
        if kind == "llama.cpp":
            told += ", cache_prompt"
    return _good("LLM server settings", told)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# --- embedder ---------------------------------------------------------------------------------


async def check_embedder(settings: Settings, http: httpx.AsyncClient) -> list[Finding]:
    e = settings.embedding
    started = time.monotonic()
    try:
        embedder = make_embedder(e.kind, model=e.model, base_url=e.base_url, api_key=e.api_key, http=http)
        vector = await asyncio.wait_for(embedder.embed_query("doctor"), EMBEDDER_SECONDS)
    except (EmbeddingError, TimeoutError, OSError) as exc:
        return [
            _bad(
                "embedder",
                f"EMBEDDINGS={e.kind} does not answer: {_first_line(exc) if str(exc) else 'no answer in time'}",
                "start the embedding server or correct EMBEDDINGS_BASE_URL / EMBEDDINGS_MODEL, or EMBEDDINGS=local",
            )
        ]
    found = [_good("embedder", f"{embedder.model} answers in {time.monotonic() - started:.1f} s, {len(vector)} dimensions")]
    override = settings.semantic_threshold
    if override is not None:
        found.append(_good("embedder threshold", f"{override:.2f}, from SEMANTIC_THRESHOLD"))
    elif embedder.model in SEMANTIC_THRESHOLDS:
        found.append(_good("embedder threshold", f"{threshold_for(embedder.model):.2f}, measured for {embedder.model}"))
    else:
        found.append(
            _bad(
                "embedder threshold",
                f"none measured for {embedder.model}: recall uses {threshold_for(embedder.model):.2f}, measured for "
                "another model on the same scale",
                f"measure it: python bench/recall_public.py --embeddings {e.kind} --embeddings-model "
                f"{embedder.model.removeprefix(e.kind + ':')} "
                "prints the SEMANTIC_THRESHOLD to set; or EMBEDDINGS=local",
            )
        )
    return found


# --- Discord ----------------------------------------------------------------------------------


async def check_discord(settings: Settings, cast: Cast | None, http: httpx.AsyncClient) -> list[Finding]:
    token = settings.discord_token.get_secret_value().strip() if settings.discord_token else ""
    if not token:
        return [_bad("Discord token", "DISCORD_TOKEN is not set", f"{PORTAL} → your app → Bot → Reset Token, into .env")]
    base = settings.discord_api_url
    headers = {"Authorization": f"Bot {token}"}

    async def get(path: str) -> httpx.Response:
        return await http.get(base + path, headers=headers, timeout=DISCORD_SECONDS)

    try:
        me = await get("/users/@me")
    except httpx.HTTPError as exc:
        return [_bad("Discord", f"{base} does not answer ({type(exc).__name__})", "check the network, or DISCORD_API_URL")]
    if me.status_code == 401:
        return [_bad("Discord token", "refused by Discord (401)", f"{PORTAL} → your app → Bot → Reset Token, into .env")]
    if me.status_code != 200:
        return [_bad("Discord", f"GET /users/@me answered HTTP {me.status_code}", "check DISCORD_API_URL")]
    user = me.json()
    found = [_good("Discord token", f"valid, bot {user.get('username')} ({user.get('id')})")]
    app = (await get("/applications/@me")).json()
    flags = int(app.get("flags") or 0)
    if not settings.allowed_channel_ids:
        found.append(_good("Discord intents", "no privileged intent needed (ALLOWED_CHANNEL_IDS is empty)"))
    elif flags & MESSAGE_CONTENT_FLAGS:
        found.append(_good("Discord intents", "Message Content enabled, as ALLOWED_CHANNEL_IDS needs"))
    else:
        found.append(
            _bad(
                "Discord intents",
                "ALLOWED_CHANNEL_IDS needs the Message Content intent, not enabled for this application",
                f"{PORTAL} → your app → Bot → Privileged Gateway Intents → Message Content Intent, save; "
                "or empty ALLOWED_CHANNEL_IDS",
            )
        )
    invite = (
        f"https://discord.com/oauth2/authorize?client_id={app.get('id')}&scope=bot+applications.commands"
        f"&permissions={MANAGE_WEBHOOKS | 0x4C00}"
    )
    if settings.dev_guild_id is None:
        found.append(_good("Discord server", "DEV_GUILD_ID not set: an owner syncs commands with @bot sync"))
    else:
        guilds = (await get("/users/@me/guilds")).json()
        ids = {str(g.get("id")) for g in guilds} if isinstance(guilds, list) else set()
        if str(settings.dev_guild_id) in ids:
            found.append(_good("Discord server", f"the bot is in DEV_GUILD_ID {settings.dev_guild_id}"))
        else:
            found.append(_bad("Discord server", f"the bot is not in DEV_GUILD_ID {settings.dev_guild_id}", f"invite it: {invite}"))
    if cast is not None and cast.from_folder:
        found += await _check_webhooks(cast, get)
    return found


async def _check_webhooks(cast: Cast, get: Callable[[str], Awaitable[httpx.Response]]) -> list[Finding]:
    places = [(f"/channels/{i}/webhooks", f"channel {i}") for i in cast.channels]
    places += [(f"/guilds/{i}/webhooks", f"server {i}") for i in cast.servers]
    missing: list[str] = []
    checked = places[:MAX_PLACES_CHECKED]
    for path, name in checked:
        if (await get(path)).status_code in (403, 404):
            missing.append(name)
    if cast.categories:
        # A category's channels inherit its permissions; each is asked where it is mapped.
        checked_note = f" (categories {', '.join(map(str, cast.categories))} are not checked: check a channel of each)"
    else:
        checked_note = ""
    if missing:
        return [
            _bad(
                "Discord webhooks",
                f"no Manage Webhooks in {', '.join(missing)}: characters there answer as the bot itself",
                "Server Settings → Roles → the bot's role → Manage Webhooks (or the channel's permissions)",
            )
        ]
    return [_good("Discord webhooks", f"Manage Webhooks in the {len(checked)} places channels.yaml maps{checked_note}")]


# --- owner's page -----------------------------------------------------------------------------


def check_web(settings: Settings) -> list[Finding]:
    web = settings.web
    if not web.enabled:
        return [_good("owner's page", "off (WEB_ENABLED=false)")]
    with socket.socket(socket.AF_INET6 if ":" in web.host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((web.host, web.port))
        except OSError as exc:
            return [
                _bad(
                    "owner's page",
                    f"cannot listen on {web.host}:{web.port} ({exc.strerror or exc})",
                    "another program (a running Écho?) uses it: set WEB_PORT to a free port, or WEB_HOST to an address of this machine",
                )
            ]
    return [_good("owner's page", f"{web.host}:{web.port} free")]


# --- all of it --------------------------------------------------------------------------------


async def _bounded(name: str, job: Awaitable[list[Finding]]) -> list[Finding]:
    try:
        return await job
    except Exception as exc:  # a check that breaks is a finding, not the end of the run
        return [_bad(name, f"the check failed: {type(exc).__name__}: {exc}", "report it with this line")]


async def diagnose(settings: Settings) -> list[Finding]:
    found, cast = check_characters(settings)
    async with httpx.AsyncClient(trust_env=False) as http:
        storage = settings.storage
        database: Awaitable[list[Finding]]
        if storage.database_url:
            database = check_postgres(storage.database_url)
        else:
            database = asyncio.to_thread(lambda: check_sqlite(storage.database_path) + check_backups(storage))
        groups = await asyncio.gather(
            _bounded("database", database),
            _bounded("LLM", check_llm(settings, http, cast)),
            _bounded("embedder", check_embedder(settings, http)),
            _bounded("Discord", check_discord(settings, cast, http)),
        )
    for group in groups:
        found += group
    return found + check_web(settings)


def report(findings: list[Finding]) -> str:
    failed = sum(not f.ok for f in findings)
    # Whatever a check quotes (a URL, a driver's error): no password or token is printed.
    lines = [redact(f.line()) for f in findings]
    lines.append(f"{len(findings) - failed} passed, {failed} to fix." if failed else f"All {len(findings)} checks pass.")
    return "\n".join(lines)

