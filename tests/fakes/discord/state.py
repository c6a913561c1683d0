"""What the fake Discord knows: its users, guilds, channels, messages, webhooks, interactions,
and every REST call it answered. Payloads are built in the shapes of the real API v10.
"""

from __future__ import annotations

import itertools
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

DISCORD_EPOCH_MS = 1_420_070_400_000
MESSAGE_CONTENT_INTENT = 1 << 15
# Interaction tokens: a callback within 3 s, followups for 15 minutes.
INTERACTION_DEADLINE = 3.0
INTERACTION_TOKEN_LIFETIME = 15 * 60.0

_increment = itertools.count(1)


def snowflake(at: float | None = None) -> int:
    """A real-looking snowflake: its timestamp is the creation time, as discord.py reads it."""
    ms = int((time.time() if at is None else at) * 1000)
    return ((ms - DISCORD_EPOCH_MS) << 22) | (next(_increment) % 4096)


def iso_now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class User:
    id: int
    username: str
    bot: bool = False
    global_name: str | None = None

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "username": self.username,
            "discriminator": "0",
            "global_name": self.global_name or self.username,
            "avatar": None,
            "public_flags": 0,
            "flags": 0,
        }
        if self.bot:
            data["bot"] = True
        return data


@dataclass
class Role:
    id: int
    name: str
    position: int = 0

    def payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": self.position,
            "permissions": "2248473465835073",
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }


@dataclass
class Channel:
    id: int
    name: str
    guild_id: int | None  # None: a DM
    type: int = 0  # 0 text, 1 DM
    recipient: User | None = None

    def payload(self) -> dict[str, Any]:
        if self.guild_id is None:
            return {
                "id": str(self.id),
                "type": 1,
                "last_message_id": None,
                "flags": 0,
                "recipients": [self.recipient.payload()] if self.recipient else [],
            }
        return {
            "id": str(self.id),
            "type": self.type,
            "guild_id": str(self.guild_id),
            "name": self.name,
            "position": 0,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "topic": None,
            "rate_limit_per_user": 0,
            "last_message_id": None,
            "flags": 0,
        }


@dataclass
class Guild:
    id: int
    name: str
    owner_id: int
    channels: list[Channel] = field(default_factory=list)
    roles: list[Role] = field(default_factory=list)
    # user id -> role ids
    members: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class Attachment:
    id: int
    channel_id: int
    filename: str
    content_type: str
    data: bytes


@dataclass
class Webhook:
    id: int
    token: str
    channel_id: int
    guild_id: int | None
    name: str
    avatar: str | None
    creator: User


@dataclass
class Interaction:
    id: int
    token: str
    created: float  # time.monotonic() when dispatched
    payload: dict[str, Any]
    responded: bool = False
    callback: dict[str, Any] | None = None  # the body of the accepted callback
    # The message the callback created (type 4), for @original.
    original: dict[str, Any] | None = None


@dataclass(frozen=True)
class Call:
    """One REST request the bot made, as the fake answered it."""

    at: float  # time.monotonic()
    method: str
    path: str  # without the /api/v10 prefix, e.g. /channels/500/messages
    query: dict[str, str]
    json: Any
    status: int
    headers: dict[str, str]

    @property
    def route(self) -> tuple[str, str]:
        return self.method, self.path


def new_token() -> str:
    return secrets.token_urlsafe(24)
