"""Plain data types of the memory engine. No I/O, no discord."""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, NewType, get_args

from bot.clients.values import as_utc, storable
from bot.errors import InvalidMemory, MemoryCapReached
from bot.memory.text import canonical

# The one list of memory types. A user's memories, in rank order (selection ranks and gives quotas
# in this order; the reflection may write only these); rules belong to the character, are always
# in context and never compete for a slot.
UserMemoryType = Literal["fact", "preference", "promise", "episode"]
MemoryType = Literal[UserMemoryType, "rule"]
Scope = Literal["global", "story"]

USER_MEMORY_TYPES: tuple[UserMemoryType, ...] = get_args(UserMemoryType)
MEMORY_TYPES: tuple[MemoryType, ...] = get_args(MemoryType)
SCOPES: tuple[Scope, ...] = get_args(Scope)
DM_PLACE = "dm"

# The identities memory is filed under. A person: their front end's id (a Discord user id, or
# "terminal:<name>"). An owner key: whose memories they are — the person's id, `<id>@<character
# key>` for a character with a memory of its own (bot/characters/cast.py), or `character:<name>`
# for a character's rules. A story: the channel (a DM, a terminal session) a conversation is in.
PersonId = NewType("PersonId", str)
OwnerKey = NewType("OwnerKey", str)
StoryId = NewType("StoryId", str)


def utcnow() -> datetime:
    return datetime.now(UTC)


# The expiries a person can mean. Outside them a date is a slip of the model (year 0999 for 2099,
# 0001 for "unknown") and, near the ends of the calendar, may have no UTC instant to store.
EARLIEST_EXPIRY = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_EXPIRY = datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)


def checked_expiry(value: datetime | None) -> datetime | None:
    """The expiry in UTC (a naive one is read as UTC); ValueError when it is out of range."""
    if value is None:
        return None
    value = as_utc(value)
    if not EARLIEST_EXPIRY <= value <= LATEST_EXPIRY:
        raise ValueError(
            f"date out of range: {value.date().isoformat()} is not between "
            f"{EARLIEST_EXPIRY.year} and {LATEST_EXPIRY.year}"
        )
    return value


def content_hash(text: str) -> str:
    """Hash of the text a vector is computed from: a changed hash means a stale vector."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:32]


MAX_MEMORY_CHARS = 500


def check_room(held: int, cap: int | None) -> None:
    """Refuse one more memory past the cap; what is held is never dropped to make room."""
    if cap is not None and held >= cap:
        raise MemoryCapReached(
            f"you hold {held} memories, the most kept per person here ({cap}): forget some to make room",
            code="cap",
            held=held,
            cap=cap,
        )


def valid_expiry(expires_at: datetime | None) -> datetime | None:
    """The expiry every stored memory gets: in UTC, in range (or InvalidMemory)."""
    try:
        return checked_expiry(expires_at)
    except ValueError as exc:
        raise InvalidMemory(f"expiry {exc}") from None


@dataclass(slots=True)
class NewMemory:
    text: str
    type: MemoryType = "fact"
    scope: Scope = "global"
    confidence: float = 1.0
    story_id: StoryId | None = None
    place: str | None = None
    expires_at: datetime | None = None
    source: str | None = None
    pinned: bool = False

    def validated(self) -> NewMemory:
        # Stored in the one form comparisons use (a look-alike copy is the same memory); control
        # characters (NUL, escapes) are noise in a sentence and trouble in a terminal.
        text = canonical(storable(self.text))
        text = " ".join("".join(c for c in text if unicodedata.category(c) != "Cc" or c.isspace()).split())
        if not any(unicodedata.category(c)[0] not in "CZ" for c in text):
            # Zero-width and other format characters alone would show as a blank memory.
            raise InvalidMemory("a memory needs some visible text", code="empty")
        if len(text) > MAX_MEMORY_CHARS:
            raise InvalidMemory(
                f"a memory is one short sentence (at most {MAX_MEMORY_CHARS} characters)",
                code="too_long",
                most=MAX_MEMORY_CHARS,
            )
        if self.type not in MEMORY_TYPES:
            raise InvalidMemory(f"unknown memory type {self.type!r}: one of {', '.join(MEMORY_TYPES)}")
        if self.scope not in SCOPES:
            raise InvalidMemory(f"unknown scope {self.scope!r}: global or story")
        if self.scope == "story" and not self.story_id:
            raise InvalidMemory("a story memory needs the story it belongs to")
        self.expires_at = valid_expiry(self.expires_at)
        self.text = text
        self.confidence = min(1.0, max(0.0, float(self.confidence)))
        return self


@dataclass(slots=True)
class Memory:
    id: int
    user_id: OwnerKey
    text: str
    type: MemoryType
    scope: Scope
    pinned: bool
    confidence: float
    created_at: datetime
    updated_at: datetime
    story_id: StoryId | None = None
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


# What a reflection changed in a memory, as its receipt lists it.
ChangeAction = Literal["added", "replaced", "forgotten"]
# What a story's history keeps of a reflection's changes.
StoryOperation = Literal["summary_replaced", "anchor_removed", "position_evicted", "position_updated", "state_changed"]

# Who undid a consolidation: the user (/restore: its members are never asked again together),
# or a member's message deleted or edited (its other members may be consolidated again).
UndoneBy = Literal["restore", "source"]

# What happened to an archived version of a memory.
Operation = Literal["replace", "merge", "expiry", "delete", "edit", "restore", "consolidate"]
OPERATIONS: tuple[Operation, ...] = get_args(Operation)

# Why a memory was archived: one of a closed set. The history tables store each as the text
# below (what every version of Écho wrote), read back exactly; a text no version writes is kept
# as "other", shown as stored.
CauseKind = Literal[
    "reflection", "message_deleted", "message_edited", "forget", "edit", "restore", "consolidated", "other"
]
_STORED_AS: dict[CauseKind, str] = {
    "reflection": "reflection",
    "message_deleted": "message deleted",
    "message_edited": "message edited",
    "forget": "user: /forget",
    "edit": "user: edit",
    "restore": "user: /restore",
}
# "restore": what a restore without a named cause once wrote.
_FIXED_CAUSES: dict[str, CauseKind] = {text: kind for kind, text in _STORED_AS.items()} | {"restore": "restore"}
_REFLECTION_OF = "reflection of message "
_CONSOLIDATED_INTO = "consolidated into #"


@dataclass(frozen=True, slots=True)
class Cause:
    kind: CauseKind
    # reflection: the message it read (a front end's message id, or the exchange it came from);
    # other: the text as stored.
    detail: str | None = None
    # consolidated: the memory that holds the series now.
    into: int | None = None

    @classmethod
    def reflection(cls, message: str | None = None) -> Cause:
        return cls("reflection", detail=message)

    @classmethod
    def consolidated(cls, into: int) -> Cause:
        return cls("consolidated", into=into)

    def stored(self) -> str:
        if self.kind == "reflection" and self.detail:
            return _REFLECTION_OF + self.detail
        if self.kind == "consolidated":
            return f"{_CONSOLIDATED_INTO}{self.into}"
        if self.kind == "other":
            return self.detail or ""
        return _STORED_AS[self.kind]

    @classmethod
    def from_stored(cls, text: str) -> Cause:
        if text in _FIXED_CAUSES:
            return cls(_FIXED_CAUSES[text])
        if text.startswith(_REFLECTION_OF):
            return cls.reflection(text.removeprefix(_REFLECTION_OF))
        into = text.removeprefix(_CONSOLIDATED_INTO)
        if into != text and into.isascii() and into.isdigit() and len(into) <= 19:
            return cls.consolidated(int(into))
        return cls("other", detail=text)


@dataclass(slots=True)
class HistoryEntry:
    """An archived version of a memory, written before it was replaced, merged or deleted."""

    id: int
    user_id: OwnerKey
    memory_id: int
    operation: Operation
    text: str
    type: MemoryType
    scope: Scope
    pinned: bool
    confidence: float
    created_at: datetime
    updated_at: datetime
    archived_at: datetime
    cause: Cause
    story_id: StoryId | None = None
    place: str | None = None
    expires_at: datetime | None = None
    source: str | None = None
    restored: bool = False
