"""Plain data types of the memory engine. No I/O, no discord."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal, get_args

MemoryType = Literal["fact", "preference", "promise", "episode", "rule"]
Scope = Literal["global", "story"]

MEMORY_TYPES: tuple[str, ...] = get_args(MemoryType)
SCOPES: tuple[str, ...] = get_args(Scope)
DM_PLACE = "dm"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def content_hash(text: str) -> str:
    """Hash of the text a vector is computed from: a changed hash means a stale vector."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:32]


@dataclass(slots=True)
class Memory:
    id: int
    user_id: str
    text: str
    type: str
    scope: str
    pinned: bool
    confidence: float
    created_at: datetime
    updated_at: datetime
    story_id: str | None = None
    place: str | None = None
    expires_at: datetime | None = None
    source: str | None = None
    content_hash: str = ""
    times_candidate: int = 0
    times_served: int = 0
    times_semantic: int = 0

    def __post_init__(self) -> None:
        if not self.content_hash:
            self.content_hash = content_hash(self.text)

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(slots=True)
class HistoryEntry:
    """An archived version of a memory, written before it was replaced, merged or deleted."""

    id: int
    user_id: str
    memory_id: int
    operation: str
    text: str
    type: str
    scope: str
    pinned: bool
    confidence: float
    created_at: datetime
    updated_at: datetime
    archived_at: datetime
    cause: str
    story_id: str | None = None
    place: str | None = None
    expires_at: datetime | None = None
    source: str | None = None
    restored: bool = False
