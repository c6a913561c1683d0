"""The bot's settings, read from the environment and a `.env` file, declared once each.

Each part of the bot is handed its section: a class of its own (python-discord's and Letta's
pattern), whose fields are read from the environment under the section's prefix (`LLM_API`,
`WEB_PORT`), or under the stable name a field keeps when it does not share it
(`REFLECTION_MODEL`, `INDEX_INTERVAL_SECONDS`). Each field's description is its documentation:
`.env.example` is rendered from them (`python -m bot.config > .env.example`) and a test fails
when the two differ. `load_settings()` is the entry point: it reads every section and turns
pydantic's validation errors into a `ConfigError` with one line per bad setting, named by its
environment variable.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, get_args

from dotenv import dotenv_values
from pydantic import SecretStr, ValidationError

from bot.clients.outside_files import ENV_FILE, check_regular
from bot.clients.redaction import redact
from bot.config.discord import DiscordSettings
from bot.config.engine import EngineSettings
from bot.config.section import DEFAULT_DISCORD_API_URL, DEFAULT_ENV_FILE, S, Section, secret
from bot.config.services import EmbeddingSettings, LLMSettings, LoggingSettings, StorageSettings, WebSettings
from bot.errors import ConfigError

__all__ = [
    "DEFAULT_DISCORD_API_URL",
    "SECTIONS",
    "DiscordSettings",
    "EmbeddingSettings",
    "EngineSettings",
    "LLMSettings",
    "LoggingSettings",
    "Section",
    "Settings",
    "StorageSettings",
    "WebSettings",
    "load_settings",
    "render_env_example",
    "secret",
    "setting_names",
]

log = logging.getLogger(__name__)


# In `.env.example` order.
SECTIONS: tuple[type[Section], ...] = (
    DiscordSettings,
    LLMSettings,
    EngineSettings,
    EmbeddingSettings,
    StorageSettings,
    LoggingSettings,
    WebSettings,
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Every section; each part of the bot is handed its own, never the whole."""

    discord: DiscordSettings
    llm: LLMSettings
    engine: EngineSettings
    embedding: EmbeddingSettings
    storage: StorageSettings
    logging: LoggingSettings
    web: WebSettings

    def sections(self) -> Iterator[Section]:
        for f in fields(self):
            yield getattr(self, f.name)

    def replace(self, **changes: Any) -> Settings:
        """These settings with some changed, named as in the environment (`burst_seconds=0`),
        unchecked: for tests that give a part other settings."""
        by_section = _route(changes)
        return dataclasses.replace(
            self,
            **{
                f.name: getattr(self, f.name).model_copy(update=by_section.get(type(getattr(self, f.name)), {}))
                for f in fields(self)
            },
        )


def setting_names() -> list[str]:
    """Every environment variable the bot reads, in `.env.example` order."""
    return [env for section in SECTIONS for env in section.env_names().values()]


def _owners() -> dict[str, tuple[type[Section], str]]:
    """The lower-case variable name -> its section and field."""
    return {env.lower(): (section, name) for section in SECTIONS for name, env in section.env_names().items()}


def _route(values: dict[str, Any]) -> dict[type[Section], dict[str, Any]]:
    owners = _owners()
    routed: dict[type[Section], dict[str, Any]] = {}
    for key, value in values.items():
        if key.lower() not in owners:
            raise TypeError(f"{key} is not a setting of this bot")
        section, name = owners[key.lower()]
        routed.setdefault(section, {})[name] = value
    return routed


def _error_lines(section: type[Section], error: ValidationError) -> list[str]:
    envs = section.env_names()
    by_alias = {env.lower(): env for env in envs.values()}
    secrets = {
        envs[name] for name, info in section.model_fields.items()
        if info.annotation is SecretStr or SecretStr in get_args(info.annotation)
    }  # fmt: skip
    lines: list[str] = []
    for item in error.errors(include_url=False):
        message = item["msg"].removeprefix("Value error, ")
        loc = item["loc"]
        if not loc:
            # Raised by a model validator, whose messages already start with the variable.
            lines.extend(redact(line) for line in message.splitlines())
            continue
        key = str(loc[0])
        env = envs.get(key) or by_alias.get(key.lower(), key.upper())
        where = env + "".join(f"[{part}]" for part in loc[1:])
        line = f"{where}: {message}"
        shown = item.get("input")
        if env not in secrets and isinstance(shown, str | int | float) and repr(shown) not in line:
            line += f" (got {shown!r})"
        # Whatever the setting: a URL's password or token is not echoed back.
        lines.append(redact(line))
    return lines


def _warn_unknown_env_keys(env_file: Path) -> None:
    """A misspelt key in .env is otherwise ignored in silence (extra settings are allowed)."""
    known = setting_names()
    for key in dotenv_values(env_file):
        if key.upper() in known:
            continue
        close = difflib.get_close_matches(key.upper(), known, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else ""
        log.warning("%s: %s is not a setting of this bot and is ignored%s", env_file, key, hint)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, the env file and `overrides` (named as in the
    environment, in any case, or `_env_file=` to read another file, `None` for none). Raises
    ConfigError naming every bad setting."""
    env_file = overrides.pop("_env_file", DEFAULT_ENV_FILE)
    if env_file is not None and (Path(env_file).exists() or Path(env_file).is_symlink()):
        # pydantic-settings would open a FIFO and wait for a writer for ever.
        check_regular(env_file, ENV_FILE)
        _warn_unknown_env_keys(Path(env_file))
    given = _route(overrides)
    read: dict[type[Section], Section] = {}
    lines: list[str] = []
    for kind in SECTIONS:
        # The environment file is an argument of BaseSettings.__init__, which the fields' own
        # signature does not show.
        section: Callable[..., Section] = kind
        try:
            read[kind] = section(_env_file=env_file, **given.get(kind, {}))
        except ValidationError as exc:
            lines += _error_lines(kind, exc)

    def of(kind: type[S]) -> S:
        found = read[kind]
        assert isinstance(found, kind)
        return found

    if not lines:
        try:
            read[EmbeddingSettings] = of(EmbeddingSettings).following(of(LLMSettings))
        except ValueError as exc:
            lines += str(exc).splitlines()
    if lines:
        where = f" (environment and {env_file})" if env_file is not None else ""
        raise ConfigError(f"Invalid settings{where}:\n" + "\n".join(f"  {line}" for line in lines))
    return Settings(
        discord=of(DiscordSettings), llm=of(LLMSettings), engine=of(EngineSettings), embedding=of(EmbeddingSettings),
        storage=of(StorageSettings), logging=of(LoggingSettings), web=of(WebSettings),
    )  # fmt: skip


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
    """The text of `.env.example`: every setting by section, commented, with its default."""
    out = [
        "# Écho settings. Copy this file to .env and uncomment the lines you change; a",
        "# commented line shows the default. Generated from bot/config/ by",
        "# `python -m bot.config > .env.example`: edit the field descriptions, not this file.",
    ]
    for section in SECTIONS:
        envs = section.env_names()
        for index, (name, info) in enumerate(section.model_fields.items()):
            extra = info.json_schema_extra
            if index == 0:
                out += ["", f"# ===== {section.title} ====="]
            elif isinstance(extra, dict) and "group" in extra:
                out += ["", f"# ===== {extra['group']} ====="]
            out.append("")
            out += textwrap.wrap(info.description or "", width=90, initial_indent="# ", subsequent_indent="# ")
            default = info.get_default(call_default_factory=True)
            out.append(f"# {envs[name]}={_example_value(default)}")
    return "\n".join(out) + "\n"
