"""Pure helpers of the Discord front end: who the bot answers, message splitting, mentions,
and the pace of every write to a channel.

No discord import: the cogs turn discord objects into the plain data below, so every decision
is tested with plain values.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import unicodedata
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.clients.locks import KeyedLocks
from bot.config import DiscordSettings
from bot.i18n import DEFAULT_LANGUAGE, day, known, language
from bot.memory.model import DM_PLACE, HistoryEntry, Memory, PersonId, StoryId
from bot.presenting import clip, operation

DISCORD_LIMIT = 2000  # counted in code points by Discord's API, as Python's len() does
# Discord gives a channel's message writes one rate-limit bucket (about 5 per 5 s), shared by
# posts and edits: the bot writes in a channel at most this often.
EDIT_INTERVAL = 1.2
AUTOCOMPLETE_LIMIT = 25
CHOICE_NAME_LIMIT = 100

_FENCE = "```"
_CLOSE = "\n```"
_LANGUAGE_TAG = re.compile(r"[\w+#.-]{1,30}")
# Characters that belong to the one before them: a hard cut never lands in front of these.
_ZWJ = "\u200d"
_SKIN_TONES = range(0x1F3FB, 0x1F400)
_EMOJI_TAGS = range(0xE0020, 0xE0080)  # subdivision flags: 🏴 followed by tag letters
_REGIONAL_INDICATORS = range(0x1F1E6, 0x1F200)  # a flag is a pair of them


# --- pacing -------------------------------------------------------------------------------


# Channels whose last write is remembered before the quiet ones are forgotten.
_PACED_CHANNELS = 1024


class ChannelPacer:
    """At most one write per `interval` seconds in each channel, counted from the end of the
    previous write: Discord sees the writes at least `interval` apart, however slow each is.
    Writes wait in the order they asked (asyncio's lock is first come, first served). The bot
    has one (`EchoBot.pacer`), and every post, edit and reaction of the bot in a channel takes
    a slot of it: a streamed reply, its overflow, its buttons, a settled reply's edit, a
    receipt."""

    def __init__(self, interval: float = EDIT_INTERVAL, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: dict[int, float] = {}
        self._locks: KeyedLocks[int] = KeyedLocks()

    @contextlib.asynccontextmanager
    async def slot(self, channel_id: int) -> AsyncIterator[_Slot]:
        """Wait for this channel's turn, then write inside the block (or `skip()` it)."""
        async with self._locks.hold(channel_id):
            last = self._last.get(channel_id)
            if last is not None:
                wait = last + self.interval - self._clock()
                if wait > 0:
                    await asyncio.sleep(wait)
            taken = _Slot()
            try:
                yield taken
            finally:
                if not taken.skipped:
                    now = self._clock()
                    self._last[channel_id] = now
                    if len(self._last) > _PACED_CHANNELS:
                        # A channel quiet for longer than the interval need not wait: forgotten.
                        self._last = {c: t for c, t in self._last.items() if t > now - self.interval}


class _Slot:
    __slots__ = ("skipped",)

    def __init__(self) -> None:
        self.skipped = False

    def skip(self) -> None:
        """Nothing was written: the next write need not wait for this one."""
        self.skipped = True


# --- splitting ----------------------------------------------------------------------------


def split_message(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """Chunks of at most `limit` characters: cut at a paragraph, else a line, else a word.

    Text that fits is one chunk, sent as written. Text that does not is cut, and then every
    chunk is balanced: a code block open at the end of a chunk is closed there ("\n```") and
    reopened, with the same language tag, at the start of the next ("```lang\n"); the last chunk
    is closed too, or the fence line reopened in it would show as literal backticks. Nothing else
    is added; only whitespace is dropped, at the cuts. A hard cut happens only inside a single
    word longer than a chunk. Empty text gives no chunk.
    """
    if limit < 64:
        raise ValueError("a chunk must have room for a fence and some text")
    text = text.strip()
    chunks: list[str] = []
    language: str | None = None  # a code block left open by the previous chunk
    while text:
        head = f"{_FENCE}{language}\n" if language is not None else ""
        if len(head) + len(text) <= limit:
            if not chunks or _open_block_after(text, language) is None:
                chunks.append(head + text)
                break
            if len(head) + len(text) + len(_CLOSE) <= limit:
                chunks.append(head + text + _CLOSE)
                break
        cut, skip = _cut(text, limit - len(head) - len(_CLOSE))
        piece = text[:cut].rstrip() or text[:cut]
        text = text[cut + skip :]
        language = _open_block_after(piece, language)
        chunks.append(head + piece + (_CLOSE if language is not None else ""))
        if language is None:
            text = text.lstrip()
    return chunks


def _cut(text: str, room: int) -> tuple[int, int]:
    """(end of the chunk, length of the separator dropped after it)."""
    # A boundary in the second half of the room first, so chunks are not needlessly short.
    for start in (room // 2, 1):
        for separator in ("\n\n", "\n", " "):
            at = text.rfind(separator, start, room + len(separator))
            if at > 0:
                return at, len(separator)
    return _hard_cut(text, room), 0


def _hard_cut(text: str, room: int) -> int:
    cut = room
    while cut > 1 and _glued(text, cut):
        cut -= 1
    return cut if cut > 1 else room


def _glued(text: str, cut: int) -> bool:
    after, before = text[cut], text[cut - 1]
    return (
        unicodedata.category(after) in ("Mn", "Me")  # combining accents, variation selectors
        or ord(after) in _SKIN_TONES
        or ord(after) in _EMOJI_TAGS
        or _ZWJ in (after, before)
        or after == before == "`"  # never split a fence marker
        or _inside_flag(text, cut)
    )


def _inside_flag(text: str, cut: int) -> bool:
    # Regional indicators pair up from the start of their run: "🇫🇷🇩🇪" is two flags, and a cut
    # after an odd number of them would leave two halves of one.
    run = 0
    while cut - run > 0 and ord(text[cut - run - 1]) in _REGIONAL_INDICATORS:
        run += 1
    return run % 2 == 1 and ord(text[cut]) in _REGIONAL_INDICATORS


def _open_block_after(piece: str, language: str | None) -> str | None:
    """The language tag of the code block open at the end of `piece` (None: none is open)."""
    at = piece.find(_FENCE)
    while at != -1:
        if language is None:
            line_end = piece.find("\n", at + len(_FENCE))
            word = piece[at + len(_FENCE) : line_end if line_end != -1 else len(piece)].strip()
            language = word if _LANGUAGE_TAG.fullmatch(word) else ""
        else:
            language = None
        at = piece.find(_FENCE, at + len(_FENCE))
    return language


# --- mentions -----------------------------------------------------------------------------

_USER_MENTION = re.compile(r"<@!?(\d+)>")


def clean_incoming(content: str, bot_id: int, names: Mapping[int, str]) -> str:
    """The message as the character reads it: the bot's own mention removed, other user
    mentions shown as @name (raw ids mean nothing to the model)."""

    def replace(match: re.Match[str]) -> str:
        user_id = int(match[1])
        if user_id == bot_id:
            return ""
        name = names.get(user_id)
        return f"@{name}" if name else match[0]

    text = _USER_MENTION.sub(replace, content)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


# --- who the bot answers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnswerPolicy:
    allowed_channel_ids: frozenset[int]
    answer_dms: bool
    allowed_user_ids: frozenset[int]
    allowed_role_ids: frozenset[int]
    blocked_user_ids: frozenset[int]

    @classmethod
    def from_settings(cls, settings: DiscordSettings) -> AnswerPolicy:
        return cls(
            allowed_channel_ids=frozenset(settings.allowed_channel_ids),
            answer_dms=settings.answer_dms,
            allowed_user_ids=frozenset(settings.allowed_user_ids),
            allowed_role_ids=frozenset(settings.allowed_role_ids),
            blocked_user_ids=frozenset(settings.blocked_user_ids),
        )


@dataclass(frozen=True, slots=True)
class MessageFacts:
    """What the decision needs to know about one incoming message."""

    author_id: int
    author_is_bot: bool
    is_dm: bool
    channel_id: int
    mentions_bot: bool = False
    replies_to_bot: bool = False
    parent_id: int | None = None  # a thread's parent channel
    role_ids: frozenset[int] = frozenset()
    system: bool = False  # joins, pins, boosts…: not something someone said


@dataclass(frozen=True, slots=True)
class Decision:
    answer: bool
    why: str


def user_refusal(policy: AnswerPolicy, author_id: int, *, is_dm: bool, role_ids: Iterable[int] = ()) -> str | None:
    """Why this person may not talk to the character (None: they may).

    ALLOWED_ROLE_IDS cannot be checked in a DM, where nobody has roles: with a role
    restriction set, DMs are refused rather than opening a way around it.
    """
    if author_id in policy.blocked_user_ids:
        return "blocked"
    if policy.allowed_user_ids and author_id not in policy.allowed_user_ids:
        return "not in ALLOWED_USER_IDS"
    if policy.allowed_role_ids:
        if is_dm:
            return "ALLOWED_ROLE_IDS is set and a DM has no roles to check"
        if policy.allowed_role_ids.isdisjoint(role_ids):
            return "no role of ALLOWED_ROLE_IDS"
    return None


def decide(facts: MessageFacts, policy: AnswerPolicy) -> Decision:
    """Whether the bot answers this message, and why (the reason is logged at debug level)."""
    if facts.author_is_bot:
        return Decision(False, "author is a bot")
    if facts.system:
        return Decision(False, "system message")
    if facts.is_dm:
        if not policy.answer_dms:
            return Decision(False, "ANSWER_DMS is off")
        addressed = "dm"
    elif facts.mentions_bot:
        addressed = "mention"
    elif facts.replies_to_bot:
        addressed = "reply"
    elif facts.channel_id in policy.allowed_channel_ids or (
        facts.parent_id is not None and facts.parent_id in policy.allowed_channel_ids
    ):
        addressed = "channel"
    else:
        return Decision(False, "not addressed to the bot")
    refusal = user_refusal(policy, facts.author_id, is_dm=facts.is_dm, role_ids=facts.role_ids)
    if refusal is not None:
        return Decision(False, refusal)
    return Decision(True, addressed)


def person_of(user_id: int) -> PersonId:
    """A Discord user as the engine names a person: their id."""
    return PersonId(str(user_id))


def story_of(channel_id: int | None) -> StoryId:
    """A channel (a thread is its own) as the engine names a story: its id."""
    return StoryId(str(channel_id))


def place_of(guild_id: int | None) -> str:
    """Where a message or command happens, as memories record it: "dm", or the server's id."""
    return DM_PLACE if guild_id is None else str(guild_id)


# --- memory-id autocomplete ---------------------------------------------------------------


def memory_choices(memories: Sequence[Memory], typed: str, *, limit: int = AUTOCOMPLETE_LIMIT) -> list[tuple[str, int]]:
    """(name, id) pairs for an autocomplete: the memories whose "#id text" contains what was
    typed, most recently changed first, names clipped to Discord's 100 characters."""
    needle = " ".join(typed.lower().split())
    matching = [m for m in memories if needle in f"#{m.id} {' '.join(m.text.lower().split())}"]
    matching.sort(key=lambda m: (m.updated_at, m.id), reverse=True)
    return [(clip(f"#{m.id} {m.text}", CHOICE_NAME_LIMIT), m.id) for m in matching[:limit]]


def history_choices(
    entries: Sequence[HistoryEntry], typed: str, *, limit: int = AUTOCOMPLETE_LIMIT
) -> list[tuple[str, int]]:
    """(name, history id) pairs for /restore, newest first as given, filtered like memories."""
    needle = " ".join(typed.lower().split())
    choices = []
    for e in entries:
        name = f"h{e.id} #{e.memory_id} {operation(e.operation)} {day(e.archived_at)}: {' '.join(e.text.split())}"
        if needle in name.lower():
            choices.append((clip(name, CHOICE_NAME_LIMIT), e.id))
            if len(choices) == limit:
                break
    return choices


# --- languages -------------------------------------------------------------------------------

# People whose Discord language is remembered (the oldest forgotten first): a message carries
# none, only an interaction does.
LANGUAGES_HELD = 10_000


class Languages:
    """Each person's Discord language, learnt from their interactions (a command, a button):
    what a turn says besides the character's reply (the note that the model cannot be reached,
    that the reply was cut) is said in it."""

    def __init__(self, held: int = LANGUAGES_HELD) -> None:
        self.held = held
        self._by_person: dict[int, str] = {}

    def learn(self, person: int, locale: object) -> None:
        if not known(locale):
            return
        self._by_person.pop(person, None)
        self._by_person[person] = language(locale)
        while len(self._by_person) > self.held:
            self._by_person.pop(next(iter(self._by_person)))

    def for_turn(self, person: int, character_language: str | None, server_locale: object | None) -> str:
        """The person's language when their Discord told it, else the character's own, else
        the server's, else English."""
        if person in self._by_person:
            return self._by_person[person]
        for candidate in (character_language, server_locale):
            if known(candidate):
                return language(candidate)
        return DEFAULT_LANGUAGE
