"""What every section of the settings shares: how it is read from the environment, and the
checks several sections make of their values."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import SecretStr
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_ENV_FILE = ".env"
DEFAULT_DISCORD_API_URL = "https://discord.com/api/v10"
DEFAULT_LLM_BASE_URLS: dict[str, str] = {
    "ollama": "http://localhost:11434",
    "openai": "https://api.openai.com",
}
# A token anyone could guess would leave users' memories one try away.
MIN_WEB_TOKEN_CHARS = 16
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
S = TypeVar("S", bound="Section")

# pydantic-settings would JSON-decode a list-typed variable; NoDecode hands the raw string to
# `_split_ids`, so an operator writes ALLOWED_CHANNEL_IDS=123,456 as they would anywhere else.
DiscordIds = Annotated[list[int], NoDecode]


def group(title: str) -> dict[str, Any]:
    """Marks the first field of a group of `.env.example` inside a section."""
    return {"group": title}


class Section(BaseSettings):
    """One section of the settings; a subclass says its title in `.env.example` and its prefix."""

    model_config = SettingsConfigDict(
        env_file=DEFAULT_ENV_FILE,
        env_file_encoding="utf-8",
        case_sensitive=False,
        extra="ignore",
        # `DEV_GUILD_ID=` in a .env means "not set", as the commented lines of .env.example show.
        env_ignore_empty=True,
        # `inf` and `nan` parse as floats and pass `gt=0`, then break whatever uses them.
        allow_inf_nan=False,
        # A field read under its stable name (`validation_alias`) is also given by its own name.
        populate_by_name=True,
    )
    title: ClassVar[str]

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Field name -> the environment variable it is read from."""
        prefix = str(cls.model_config.get("env_prefix", ""))
        return {
            name: (info.validation_alias if isinstance(info.validation_alias, str) else prefix + name).upper()
            for name, info in cls.model_fields.items()
        }


def discord_ids(value: Any) -> Any:
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


def http_url(value: str | None) -> str | None:
    if value and not value.strip().lower().startswith(("http://", "https://")):
        raise ValueError(
            f"expected a URL starting with http:// or https://, such as http://localhost:11434; got {value!r}"
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


def stripped(value: str | None) -> str | None:
    return value.strip() if value else value


def secret(value: SecretStr | None) -> str | None:
    """The text of a secret setting (None when unset)."""
    return value.get_secret_value() if value is not None else None


def is_openai_cloud(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].lower()
    return host == "api.openai.com"
