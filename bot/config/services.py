"""The sections of what the composition root opens: the chat server, the embedder, the
database and its backups, the log, the owner's page."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from bot.clients.kinds import Api, EmbedderKind
from bot.config.section import (
    DEFAULT_LLM_BASE_URLS,
    MIN_WEB_TOKEN_CHARS,
    LogLevel,
    Section,
    group,
    http_url,
    is_openai_cloud,
    secret,
    stripped,
)

# Ollama's keep_alive: a Go duration of one unit, or seconds.
_DURATION = re.compile(r"-?\d+(\.\d+)?(ms|s|m|h)?")


class LLMSettings(Section):
    """The chat server the LLM client speaks to; which model answers, and how long it may take,
    is the engine's."""

    model_config = SettingsConfigDict(env_prefix="LLM_")
    title = "Chat LLM"

    api: Api = Field(
        "ollama",
        description=(
            "API of the chat server: ollama (/api/chat) or openai (/v1/chat/completions, "
            "also served by llama.cpp, vLLM, LM Studio and Ollama itself)."
        ),
    )
    base_url: str = Field(
        "",
        description=(
            "Base URL of the chat server (for openai, with or without /v1). Empty: "
            "http://localhost:11434 when LLM_API=ollama, https://api.openai.com when "
            "LLM_API=openai."
        ),
    )
    api_key: SecretStr | None = Field(
        None,
        description=(
            "API key sent as a Bearer token to the chat server. Required by "
            "https://api.openai.com; local servers usually need none."
        ),
    )
    keep_alive: str = Field(
        "30m",
        description=(
            "How long Ollama keeps the model loaded after a call (its keep_alive, sent with every "
            "call): 30m keeps it through a conversation's pauses, where Ollama's own 5m default "
            "makes the next person wait for a reload. A duration such as 10m, 2h, a number of "
            "seconds, -1 (forever) or 0 (unload at once). Ignored by LLM_API=openai."
        ),
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str | None:
        return http_url(value)

    @model_validator(mode="after")
    def _default_url_and_key(self) -> Self:
        if not self.base_url:
            self.base_url = DEFAULT_LLM_BASE_URLS[self.api]
        # OpenAI answers a keyless request with a 401 on the first message; say it at start-up.
        if is_openai_cloud(self.base_url) and self.api_key is None:
            raise ValueError(f"LLM_API_KEY: required by {self.base_url}")
        return self

    @field_validator("keep_alive")
    @classmethod
    def _duration(cls, value: str) -> str:
        value = value.strip()
        if not _DURATION.fullmatch(value):
            raise ValueError(
                f"expected a duration such as 30m, 2h, 90s, a number of seconds, -1 (forever) or 0; got {value!r}"
            )
        return value

    def told_context(self, context_tokens: int) -> int | None:
        """The context size the client sends (LLM_CONTEXT_TOKENS): only Ollama is told (num_ctx);
        another server's own is read from it."""
        return context_tokens if self.api == "ollama" else None

    @property
    def told_keep_alive(self) -> str | None:
        """How long the model stays loaded, as Ollama is told; other servers are not."""
        return self.keep_alive if self.api == "ollama" else None


class EmbeddingSettings(Section):
    """Where memory vectors are computed, and how often new memories are embedded."""

    model_config = SettingsConfigDict(env_prefix="EMBEDDINGS_")
    title = "Embeddings"

    kind: EmbedderKind = Field(
        "local",
        description=(
            "Where memory vectors are computed: local (in-process multilingual-e5-small, "
            "offline, no server needed), ollama (/api/embed) or openai (/v1/embeddings)."
        ),
        validation_alias="embeddings",
    )
    model: str | None = Field(
        None,
        description=(
            "Embedding model. Empty: nomic-embed-text for ollama, text-embedding-3-small for "
            "openai. Ignored by local, which has one model. Changing it re-indexes every "
            "memory in the background."
        ),
    )
    base_url: str | None = Field(
        None,
        description=(
            "Base URL of the embedding server (for openai, with or without /v1). Empty: LLM_BASE_URL. Ignored by local."
        ),
    )
    api_key: SecretStr | None = Field(
        None,
        description=("API key of the embedding server. Empty: LLM_API_KEY. Ignored by local."),
    )
    index_interval_seconds: float = Field(
        45.0,
        gt=0,
        le=86_400,
        description=(
            "Seconds between two background indexing runs, which embed new and changed "
            "memories. Until then a new memory is served by the non-semantic passes only."
        ),
        validation_alias="index_interval_seconds",
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return http_url(value)

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str | None) -> str | None:
        return stripped(value)

    def following(self, llm: LLMSettings) -> EmbeddingSettings:
        """The embedder's server and key, the chat server's unless given (one server for both is
        the common case: Ollama also serves /v1/embeddings). ValueError names what is missing."""
        if self.kind == "local":
            return self
        resolved = self.model_copy(
            update={
                "base_url": self.base_url if self.base_url is not None else llm.base_url,
                "api_key": self.api_key if self.api_key is not None else llm.api_key,
            }
        )
        if resolved.base_url is not None and is_openai_cloud(resolved.base_url):
            if resolved.kind == "ollama":
                raise ValueError(
                    f"EMBEDDINGS_BASE_URL: EMBEDDINGS=ollama needs an Ollama server, not "
                    f"{resolved.base_url}; set the address of yours"
                )
            if resolved.api_key is None:
                raise ValueError(f"EMBEDDINGS_API_KEY: required by {resolved.base_url}")
        return resolved


class StorageSettings(Section):
    """Where the database, its backups and the characters are."""

    title = "Storage"

    database_path: Path = Field(
        Path("data/echo.sqlite3"),
        description=(
            "SQLite file holding every memory and its history, created with its folder if "
            "missing. Relative paths start from the working directory."
        ),
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
    character_file: Path | None = Field(
        None,
        description=(
            "Character to play: a YAML or JSON file in Écho's format, or a SillyTavern "
            "character card (V1, V2 or V3) exported as JSON or as a PNG picture. Empty: the "
            "bundled bot/characters/echo.yaml."
        ),
        json_schema_extra=group("Character"),
    )
    characters_dir: Path | None = Field(
        None,
        description=(
            "Folder of characters, one file or card each (its name without the extension is "
            "the character's key), and a channels.yaml mapping servers, categories and "
            "channels to them (see README). Empty: one character, CHARACTER_FILE."
        ),
    )

    @field_validator("database_path")
    @classmethod
    def _database_file(cls, value: Path) -> Path:
        # The writer and the reader are two connections: each would open its own empty
        # in-memory database, and an empty path is a temporary one.
        if str(value) in (":memory:", "", ".") or str(value).startswith("file:"):
            raise ValueError(f"Écho needs a database file, such as data/echo.sqlite3; got {str(value)!r}")
        return value

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        from bot.clients.postgres import check_url

        check_url(value.strip())
        return value.strip()

    @property
    def backups(self) -> Path:
        """BACKUP_DIR, or the backups folder beside the database."""
        return self.backup_dir or self.database_path.parent / "backups"


class LoggingSettings(Section):
    model_config = SettingsConfigDict(env_prefix="LOG_")
    title = "Logging"

    level: LogLevel = Field(
        "INFO",
        description="Logging level: DEBUG, INFO, WARNING, ERROR or CRITICAL.",
    )

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value


class WebSettings(Section):
    """The owner's page, /healthz and /metrics."""

    model_config = SettingsConfigDict(env_prefix="WEB_")
    title = "Owner's page"

    enabled: bool = Field(
        False,
        description=(
            "Serve the owner's page (turns, latency, memory, each turn's selection), /healthz "
            "and /metrics from the bot process (true or false). It shows users' ids and "
            "memories: it needs WEB_TOKEN."
        ),
    )
    host: str = Field(
        "127.0.0.1",
        min_length=1,
        description=(
            "Address the page listens on. 127.0.0.1: this machine only. 0.0.0.0 (every "
            "interface) to reach it from elsewhere, e.g. from outside a container; then put it "
            "behind an HTTPS reverse proxy."
        ),
    )
    port: int = Field(8080, ge=0, le=65535, description="Port of the page, /healthz and /metrics.")
    token: SecretStr | None = Field(
        None,
        description=(
            "Secret the page asks for (login form, or `Authorization: Bearer <token>` for "
            "/metrics). Required when WEB_ENABLED=true; at least 16 characters, e.g. the output "
            'of: python -c "import secrets; print(secrets.token_urlsafe(32))". /healthz needs '
            "none: it tells only whether each dependency answers."
        ),
    )

    @model_validator(mode="after")
    def _token_when_enabled(self) -> Self:
        if self.enabled:
            token = self.secret_token
            if not token:
                raise ValueError(
                    "WEB_TOKEN: required when WEB_ENABLED=true, so the page (users' ids and "
                    "memories) is never open by accident; set a long random secret, or "
                    "WEB_ENABLED=false"
                )
            if len(token) < MIN_WEB_TOKEN_CHARS:
                raise ValueError(f"WEB_TOKEN: at least {MIN_WEB_TOKEN_CHARS} characters (a long random secret)")
        return self

    @property
    def secret_token(self) -> str:
        return (secret(self.token) or "").strip()
