"""Follow-ups: the character asks how a dated event went, once (issue 34).

A memory with a date (`expires_at`: an exam, an appointment) that has passed is followed up:

- **in the conversation** (FOLLOWUPS, on by default): the person's next turn within
  FOLLOWUP_WINDOW_DAYS of the date carries a note inviting the character to ask how it went, a
  slot of its own in `/why` ("followup"). The turns of that story carry it until the reply asks
  (a question naming what the memory names) or FOLLOWUP_TURNS have passed; the person's next
  message after the question is its answer, and the reflection of that exchange is shown the
  memory, so it records what happened (a replace or a new memory, as usual);
- **by a check-in** (opt-in, `/followups on`): one short message the character writes first, in
  a direct message, in the daytime of the person's time zone (theirs, or learned from when they
  write), at most one a day and CHECKINS_PER_WEEK a week, never to someone silent for
  SILENT_DAYS. A front end sends it (cogs/checkins.py): this part claims it in the database (one
  process of several sends it), writes it with the model, stores it as an exchange, and is told
  whether it was sent or refused (DMs closed: check-ins turn off, and the next turn says so).

A memory is followed up at most once, whichever way (one row per memory in `followups`); never
one forgotten (gone), rewritten by the person's hand, or changed since it was offered; never
for someone erased (their rows go with them). Everything is read from the database at the
moment it is needed: a restart loses nothing and repeats nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.characters.character import Character, fill_turn, render_character_prompt
from bot.characters.macros import TurnValues
from bot.clients.llm_wire import ChatMessage
from bot.clients.storage import Connection
from bot.engine.context import EngineContext
from bot.engine.llm_calls import final_reply
from bot.engine.prompting import build_checkin_messages, checkin_note, followup_note
from bot.errors import InvalidTimezone, StorageError
from bot.memory.choice import Slot
from bot.memory.model import DM_PLACE, Memory, OwnerKey, PersonId, StoryId
from bot.memory.quoting import quote_line
from bot.memory.reports.stats import MemoryStats, memory_stats
from bot.memory.stores import followups as store
from bot.memory.stores.exchanges import save_exchange, set_reply
from bot.memory.stores.followups import CheckinSettings, Due
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.text import content_words, same_word_inflected, same_word_stem

log = logging.getLogger(__name__)

# A memory written less than a day before its date was told on the day, in the conversation
# that would ask about it: nothing to follow up.
MIN_NOTICE = timedelta(days=1)
# Check-ins: the person's daytime, local hours [start, end); at most one a day, a few a week.
DAY_HOURS = (10, 20)
CHECKINS_PER_DAY = 1
CHECKINS_PER_WEEK = 3
# Someone who has not written for this long is not written to.
SILENT_DAYS = 60
# A time zone is learned from this many messages over LEARN_DAYS, when their quietest hours are
# quiet enough to be a night (at most NIGHT_SHARE of the messages in NIGHT_HOURS hours).
LEARN_MESSAGES = 20
LEARN_DAYS = 90
NIGHT_HOURS = 6
NIGHT_SHARE = 0.1
# The middle of the quietest hours is taken as 4 a.m. where the person lives.
NIGHT_MIDDLE = 4
# A claim on a check-in older than this was left by a process that stopped before sending.
CLAIM_SECONDS = 600
QUESTION_MARKS = ("?", "¿", "？")


@dataclass(frozen=True, slots=True)
class Followup:
    """The follow-up a turn carries: the memory as it was followed up."""

    due: Due
    fresh: bool  # this turn is the first to carry it


@dataclass(frozen=True, slots=True)
class Checkin:
    """A check-in due: the person (and the key of their own memories, the default
    character's), the memory, where they last wrote (a place)."""

    person: PersonId
    owner: OwnerKey
    due: Due
    place: str
    offset: timedelta = timedelta(0)  # the person's time zone, from UTC, now


@dataclass(frozen=True, slots=True)
class CheckinStatus:
    """What `/followups` shows: on or off, the time zone set or learned (None: not known yet,
    and no check-in is sent until it is), and whether the bot offers check-ins at all."""

    enabled: bool
    timezone: str | None
    learned: bool
    offered: bool


def asked_about(reply: str, event: str) -> bool:
    """Whether the reply asks about the event: a question that names something the memory
    names (a word of it, or the same word inflected)."""
    if not any(mark in reply for mark in QUESTION_MARKS):
        return False
    named = content_words(event)
    said = content_words(reply)
    return any(same_word_inflected(a, b) or same_word_stem(a, b) for a in named for b in said)


def learned_offset(times: Sequence[datetime]) -> timedelta | None:
    """The person's UTC offset read from when they write: the middle of their quietest
    NIGHT_HOURS is their 4 a.m. None without enough messages or without a quiet night."""
    if len(times) < LEARN_MESSAGES:
        return None
    hours = Counter(t.hour for t in times)
    counts = [sum(hours[(start + h) % 24] for h in range(NIGHT_HOURS)) for start in range(24)]
    start = min(range(24), key=lambda s: (counts[s], s))
    if counts[start] > NIGHT_SHARE * len(times):
        return None
    middle = (start + NIGHT_HOURS // 2) % 24
    return timedelta(hours=(NIGHT_MIDDLE - middle + 12) % 24 - 12)


def checked_timezone(name: str) -> str:
    """An IANA time zone name as the person typed it, checked; InvalidTimezone otherwise."""
    cleaned = name.strip()
    if not cleaned or len(cleaned) > 64 or cleaned.startswith(("/", ".")) or ".." in cleaned:
        raise InvalidTimezone(cleaned[:64])
    try:
        ZoneInfo(cleaned)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidTimezone(cleaned[:64]) from None
    return cleaned


class Followups:
    """The follow-ups part of the turn (`Turns.followups`), reached through the conversation,
    privacy and memories ports."""

    def __init__(self, ctx: EngineContext) -> None:
        self._ctx = ctx
        # Who claims a check-in, unique per process sharing the database.
        self.process = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"

    # --- in the conversation ------------------------------------------------------------------

    async def for_turn(
        self, owner: OwnerKey, story_id: StoryId, place: str, exchange_id: int, *, share: bool
    ) -> Followup | None:
        """The follow-up this turn carries (a turn never fails for a follow-up: without the
        database, it carries none), seen as recall sees the turn's memories (`share`: the
        person's setting). First, the saved message (`exchange_id`) answers a question asked in
        its story, if one was."""
        with contextlib.suppress(StorageError):
            rows = await store.story_followups(self._ctx.db, owner, story_id)
            if any(row.state != "offered" for row in rows):  # an answer awaited
                async with self._ctx.db.write() as conn:
                    await store.link_answer(conn, owner, story_id, exchange_id, self._ctx.clock())
            carried = next((row for row in rows if row.state == "offered"), None)
            return await self._for_turn(owner, story_id, place, share, carried)
        return None

    @staticmethod
    def slot(followup: Followup) -> Slot:
        """The follow-up's slot, beside the selection's."""
        d = followup.due
        return Slot(id=d.memory_id, reason="followup", score=None, type=d.type, pinned=d.pinned, text=d.text)

    async def _for_turn(
        self, owner: OwnerKey, story_id: StoryId, place: str, share: bool, row: store.FollowupRow | None
    ) -> Followup | None:
        """The one its story still carries (`row`), else the latest dated memory whose date
        passed within the window, seen from this story and place as recall would see it."""
        ctx = self._ctx
        if not ctx.settings.followups:
            return None
        now = ctx.clock()
        if row is not None:
            memory = await ctx.store.get(owner, row.memory_id)
            if memory is not None and memory.content_hash == row.content_hash and memory.expires_at == row.event_at:
                return Followup(_due(memory), fresh=False)
            async with ctx.db.write() as conn:
                await store.drop(conn, owner, row.memory_id, now)
        since = now - timedelta(days=ctx.settings.followup_window_days)
        for d in await store.due(ctx.db, owner, now=now, since=since, story_id=story_id, place=place, share=share):
            if d.created_at <= d.event_at - MIN_NOTICE:
                return Followup(d, fresh=True)
        return None

    @staticmethod
    def note(followup: Followup | None, user_name: str) -> str:
        """What the prompt tells the character: the event happened, ask once how it went."""
        if followup is None:
            return ""
        d = followup.due
        return followup_note(user_name, quote_line(d.text), d.event_at.date())

    async def carried(
        self, owner: OwnerKey, story_id: StoryId, followup: Followup | None, exchange_id: int, reply: str,
        erased: Callable[[Connection], Awaitable[bool]],
    ) -> None:  # fmt: skip
        """A turn carried the follow-up and answered: asked, spent, or still carried."""
        if followup is None:
            return
        ctx = self._ctx
        asked = asked_about(reply, followup.due.text)
        turns = ctx.settings.followup_turns
        with contextlib.suppress(StorageError):  # the next turn carries it again
            async with ctx.db.write() as conn:
                if await erased(conn):
                    return
                if followup.fresh:
                    await store.offer(
                        conn, owner, followup.due, story_id=story_id, exchange_id=exchange_id, asked=asked,
                        spent=turns <= 1, now=ctx.clock(),
                    )  # fmt: skip
                else:
                    await store.carried(
                        conn, owner, followup.due.memory_id, exchange_id=exchange_id, asked=asked, turns=turns,
                        now=ctx.clock(),
                    )  # fmt: skip

    async def for_reflection(self, owner: OwnerKey, exchange_ids: list[int]) -> list[Memory]:
        """The memories followed up by these exchanges (they carried the question, or answered
        it), as they are now: the reflection is shown them, to record what happened."""
        found = [
            await self._ctx.store.get(owner, i) for i in await store.of_exchanges(self._ctx.db, owner, exchange_ids)
        ]
        return [m for m in found if m is not None]

    # --- the person's check-ins -------------------------------------------------------------

    async def status(self, person: PersonId) -> CheckinStatus:
        ctx = self._ctx
        settings = await store.checkin_settings(ctx.db, person)
        learned = settings.timezone is None and await self._offset(person, settings) is not None
        zone = settings.timezone or (_offset_name(await self._offset(person, settings)) if learned else None)
        return CheckinStatus(settings.enabled, zone, learned, ctx.settings.checkins)

    async def set_checkins(self, person: PersonId, on: bool, timezone: str | None = None) -> CheckinStatus:
        """Turn the person's check-ins on or off; `timezone` (an IANA name) is checked first
        (InvalidTimezone) and kept when not given."""
        zone = checked_timezone(timezone) if timezone is not None else None
        await store.set_checkins(
            self._ctx.db, person, enabled=on, timezone=zone, keep_timezone=timezone is None, now=self._ctx.clock()
        )
        return await self.status(person)

    async def stats(self, memories: MemoryStore, owner: OwnerKey, *, cap: int) -> MemoryStats:
        """/memory-stats, with the dated memories followed up and the person's check-ins."""
        ctx = self._ctx
        stats = await memory_stats(ctx.db, memories, owner, cap=cap, now=ctx.clock())
        stats.followed_up = sum(1 for f in await store.followed_up(ctx.db, owner) if f.state != "claimed")
        status = await self.status(ctx.cast.user_of_key(owner))
        stats.checkins, stats.checkins_timezone = status.enabled, status.timezone
        return stats

    async def take_notice(self, person: PersonId) -> str | None:
        """What the person's next turn says about their check-ins, said once ("blocked")."""
        with contextlib.suppress(StorageError):
            notice = await store.take_notice(self._ctx.db, person)
            return "checkins_blocked" if notice == "blocked" else None  # a key of the front ends' catalogue
        return None

    async def _offset(self, person: PersonId, settings: CheckinSettings) -> timedelta | None:
        now = self._ctx.clock()
        if settings.timezone:
            with contextlib.suppress(ZoneInfoNotFoundError, ValueError, OSError):
                return ZoneInfo(settings.timezone).utcoffset(now.replace(tzinfo=None))
            return None
        times = await store.writing_times(self._ctx.db, self._own_key(person), now - timedelta(days=LEARN_DAYS))
        return learned_offset(times)

    def _own_key(self, person: PersonId) -> OwnerKey:
        """The key of the person's own memories (the default character's): a check-in asks
        about those, in a DM, theirs alone."""
        return self._ctx.cast.memory_key(person, self._ctx.cast.default)

    async def due_checkins(self, off_places: frozenset[str] = frozenset()) -> list[Checkin]:
        """Every check-in that may go now, one per person at most: they turned check-ins on,
        wrote lately, not last in a place where check-ins are off; it is daytime where they
        live; they had none today and fewer than CHECKINS_PER_WEEK this week; a dated memory of
        theirs passed within the window and was not followed up."""
        ctx = self._ctx
        if not (ctx.settings.checkins and ctx.settings.followups):
            return []
        now = ctx.clock()
        found = []
        for person in await store.checkin_people(ctx.db):
            owner = self._own_key(person)
            settings = await store.checkin_settings(ctx.db, person)
            last = await store.last_exchange(ctx.db, owner)
            if not settings.enabled or last is None or now - last[0] > timedelta(days=SILENT_DAYS):
                continue
            if last[1] in off_places:
                continue
            offset = await self._offset(person, settings)
            if offset is None or not DAY_HOURS[0] <= (now + offset).hour < DAY_HOURS[1]:
                continue
            if not await self._room(None, owner, now, offset):
                continue
            since = now - timedelta(days=ctx.settings.followup_window_days)
            # A direct message is the person's alone: what they told in any place may be asked there.
            for d in await store.due(ctx.db, owner, now=now, since=since, story_id=None, place=None, share=True):
                if d.created_at <= d.event_at - MIN_NOTICE:
                    found.append(Checkin(person, owner, d, last[1], offset))
                    break
        return found

    async def _room(self, conn: Connection | None, owner: OwnerKey, now: datetime, offset: timedelta) -> bool:
        """Whether the person had fewer than CHECKINS_PER_DAY today (their day, in their time
        zone) and CHECKINS_PER_WEEK in the last seven days."""
        db = self._ctx.db
        local = now + offset
        midnight = local.replace(hour=0, minute=0, second=0, microsecond=0) - offset
        return (
            await store.checkins_since(conn, db, owner, midnight) < CHECKINS_PER_DAY
            and await store.checkins_since(conn, db, owner, now - timedelta(days=7)) < CHECKINS_PER_WEEK
        )

    async def claim(self, checkin: Checkin) -> bool:
        """This process takes the check-in; False when another process did, or the person's
        room for check-ins was taken meanwhile. Every check is made again in the claim's
        transaction: processes sharing the database take turns at writing. A claim older than
        CLAIM_SECONDS was left by a process that stopped before sending: it is taken over."""
        ctx = self._ctx
        now = ctx.clock()
        async with ctx.db.write() as conn:
            stale = now - timedelta(seconds=CLAIM_SECONDS)
            if await store.take_over(
                conn, checkin.owner, checkin.due.memory_id, process=self.process, now=now, stale_before=stale
            ):
                return True  # a process stopped before sending it: its claim, not a new check-in
            if not await self._room(conn, checkin.owner, now, checkin.offset):
                return False
            return await store.claim(conn, checkin.owner, checkin.due, process=self.process, now=now)

    async def write_checkin(self, checkin: Checkin, *, story_id: StoryId, user_name: str) -> tuple[int, str] | None:
        """The check-in's text, written by the model in the character's voice and the current
        language's words, stored as an exchange of the story (the DM) the front end will send it
        to: (exchange id, text). None when the claim is gone (the person was erased) or the
        model failed (the claim is released: a later look tries again). LLMError is not raised."""
        ctx = self._ctx
        character = ctx.cast.default
        messages = self._checkin_prompt(character, checkin, user_name)
        try:
            answer = await ctx.calls.chat(
                "checkin", messages, model=ctx.settings.llm_model, timeout=ctx.settings.llm_timeout_seconds
            )
        except Exception as exc:
            log.warning("a check-in could not be written, tried again later: %s", exc)
            await self.unsent(checkin, None, blocked=False)
            return None
        reply = final_reply(answer.text)
        now = ctx.clock()
        async with ctx.db.write() as conn:
            if not await store.claimed(conn, checkin.owner, checkin.due.memory_id, self.process):
                return None
            exchange_id = await save_exchange(
                conn, checkin.owner, user_name=user_name, story_id=story_id, place=DM_PLACE, message_id=None,
                text="", now=now,
            )  # fmt: skip
            assert exchange_id is not None  # asked without a turn's epoch: always stored
            await set_reply(conn, checkin.owner, exchange_id, reply, now=now, settle=True)
            # Nothing the person said: the reflection is for their answer, the next exchange.
            await store.nothing_to_reflect(conn, checkin.owner, exchange_id, now)
        return exchange_id, reply

    def _checkin_prompt(self, character: Character, checkin: Checkin, user_name: str) -> list[ChatMessage]:
        values = TurnValues(user=user_name, now=self._ctx.clock(), seed=f"checkin\x00{checkin.due.memory_id}", story="")
        d = checkin.due
        return build_checkin_messages(
            character_prompt=render_character_prompt(character, values),
            character_name=character.name,
            rules=list(character.rules),
            note=checkin_note(user_name, quote_line(d.text), d.event_at.date()),
            post_history=fill_turn(character.post_history_instructions, values),
        )

    async def still_claimed(self, checkin: Checkin) -> bool:
        """Asked right before sending: an erase since (in any process) removed the claim."""
        async with self._ctx.db.write() as conn:
            return await store.claimed(conn, checkin.owner, checkin.due.memory_id, self.process)

    async def sent(self, checkin: Checkin, *, story_id: StoryId, exchange_id: int, message_id: str) -> None:
        """The check-in was delivered: the person's next message in that story answers it."""
        ctx = self._ctx
        async with ctx.db.write() as conn:
            if await store.checked_in(
                conn, checkin.owner, checkin.due.memory_id, process=self.process, story_id=story_id,
                exchange_id=exchange_id, now=ctx.clock(),
            ):  # fmt: skip
                await store.delivered(conn, checkin.owner, exchange_id, message_id)

    async def left(self, checkin: Checkin) -> None:
        """The person left the server where they last wrote: this event is never asked about."""
        async with self._ctx.db.write() as conn:
            await store.drop(conn, checkin.owner, checkin.due.memory_id, self._ctx.clock())

    async def unsent(self, checkin: Checkin, exchange_id: int | None, *, blocked: bool) -> None:
        """The check-in was not delivered: its exchange goes, the claim is released; `blocked`
        (the person's DMs refuse the bot) turns their check-ins off, and their next turn says so."""
        ctx = self._ctx
        with contextlib.suppress(StorageError):
            async with ctx.db.write() as conn:
                if exchange_id is not None:
                    await store.drop_exchange(conn, checkin.owner, exchange_id)
                await store.release(conn, checkin.owner, checkin.due.memory_id, self.process)
                if blocked:
                    await store.blocked(conn, checkin.person, ctx.clock())


def _due(memory: Memory) -> Due:
    assert memory.expires_at is not None
    return Due(
        memory.id, memory.text, memory.content_hash, memory.expires_at, memory.created_at, memory.type, memory.pinned
    )


def _offset_name(offset: timedelta | None) -> str | None:
    if offset is None:
        return None
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
