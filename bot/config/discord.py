"""The Discord front end's section: the bot's identity, who it answers, how it shows a reply.
Its settings keep their names, which share no prefix."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator

from bot.config.section import DEFAULT_DISCORD_API_URL, DiscordIds, Section, discord_ids, group, http_url
from bot.errors import ConfigError


class DiscordSettings(Section):
    """What the Discord front end is handed: the bot's identity, who it answers, how it shows a
    reply. Its settings keep their names, which share no prefix."""

    title = "Discord"

    discord_token: SecretStr | None = Field(
        None,
        description=(
            "Bot token from the Discord developer portal (Applications > your app > Bot > "
            "Reset Token). Required to start the bot; the terminal chat and the tests run "
            "without it."
        ),
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
    allowed_channel_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "Channel ids, comma-separated, where the bot answers every message. Elsewhere in "
            "a server it answers only when mentioned or replied to. Non-empty needs the "
            "privileged Message Content intent (developer portal > Bot)."
        ),
        json_schema_extra=group("Who the bot answers"),
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
        description=("User ids, comma-separated, the bot never answers, whatever the other settings."),
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
    stream_replies: bool = Field(
        True,
        description=(
            "Show the reply as it is written, by editing the message (at most one edit per "
            "1.2 s per channel, Discord's rate limit). false: the reply is posted once, whole."
        ),
        json_schema_extra=group("How a reply is shown"),
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
    memory_receipts: Literal["button", "reaction", "off"] = Field(
        "button",
        description=(
            'How a reply says that the reflection changed the user\'s memory: button (a "🧠 n" '
            "button that shows the changes, with Forget and Edit), reaction (a 🧠 reaction), "
            "or off."
        ),
    )
    llm_vision: bool = Field(
        False,
        description=(
            "The chat model can see images (llava, qwen2.5vl, gpt-4o…): image attachments are "
            'sent with the message. false: the message only names them, "[image: name]", so '
            "the character does not pretend to see them. The reflection never sees an image, "
            "only the user's words and that mark."
        ),
        json_schema_extra=group("Images"),
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
            'Largest image, in bytes, sent to a vision model; a larger one is only named, "[image: name — too large]".'
        ),
    )
    checkins_off_guild_ids: DiscordIds = Field(
        default_factory=list,
        description=(
            "Server ids, comma-separated, where check-ins are off: a person whose last message "
            "to the character was in one of them gets none (CHECKINS=false: none for anyone)."
        ),
        json_schema_extra=group("Check-ins"),
    )
    checkin_interval_seconds: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="Seconds between two looks for check-ins that are due (computed from the database).",
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
        return discord_ids(value)

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

    @field_validator("discord_api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        # discord.py appends paths starting with "/".
        return (http_url(value) or value).rstrip("/")

    @model_validator(mode="after")
    def _shards_within_count(self) -> Self:
        if self.shard_ids and self.shard_count is None:
            raise ValueError("SHARD_IDS needs SHARD_COUNT, the number of shards in all processes")
        count = self.shard_count
        if count is not None and (outside := [i for i in self.shard_ids if i >= count]):
            raise ValueError(f"SHARD_IDS {outside} are not shards of SHARD_COUNT={count} (0 to {count - 1})")
        return self

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
