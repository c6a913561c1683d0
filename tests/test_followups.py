"""Follow-ups on dated memories and check-ins (issue 34, items 1 and 2), through the engine on a
real SQLite file (the claim also on PostgreSQL), the scripted LLM and a clock the tests move."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.engine.followups import Checkin, asked_about, checked_timezone, learned_offset
from bot.errors import InvalidTimezone
from bot.memory.model import NewMemory
from tests.builders import make_engine, msg
from tests.fakes.llm_server import LLMRequest

pytestmark = pytest.mark.both_stores

EXAM = "L'utilisateur a un examen de chimie le 5 novembre"
EXAM_DAY = "2026-11-05"


def is_followup(request: LLMRequest) -> bool:
    return any("Follow-up:" in str(m.get("content")) for m in request.messages)


def last_reply(llm_server) -> LLMRequest:
    """The last reply call (a reflection of an earlier exchange may come after it)."""
    return [r for r in llm_server.chats if r.json_schema is None][-1]


def replies(answers: dict[str, str], reflections: dict[str, dict] | None = None):
    """A handler: the reply to a message holding a key of `answers`, the reflection of an
    exchange holding a key of `reflections` (else nothing to remember)."""

    def handler(request: LLMRequest) -> str:
        if request.json_schema is not None:
            for key, answer in (reflections or {}).items():
                if key in request.last_user:
                    return json.dumps(answer)
            return "{}"
        said = request.messages[-1]["content"]
        return next((a for k, a in answers.items() if k in said), "D'accord.")

    return handler


async def told_exam(engine, llm_server, clock, *, user="alice", story="chan-1", place="guild-1") -> int:
    """The person says when their exam is; the reflection stores it with its date."""
    llm_server.handler = replies(
        {"examen": "Bonne chance !"},
        {
            "examen de chimie est": {
                "memories": [{"text": EXAM, "type": "fact", "confidence": 0.95, "expires_at": EXAM_DAY}]
            }
        },
    )
    await engine.conversation.turn(msg("Mon examen de chimie est le 5 novembre.", user=user, story=story, place=place))
    await engine.operator.wait_reflections(user)
    [memory] = [m for m in await engine.memories.list(user) if m.text == EXAM]
    assert memory.expires_at is not None and memory.expires_at.date().isoformat() == EXAM_DAY
    return memory.id


async def test_a_passed_date_is_followed_up_at_the_next_message_once_and_its_answer_reflected(
    db, http, llm_server, tmp_path, clock
):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    exam_id = await told_exam(engine, llm_server, clock)
    # Before the date: nothing to follow up.
    await engine.conversation.turn(msg("Je révise."))
    assert not is_followup(last_reply(llm_server))

    clock.now = datetime(2026, 11, 6, 10, 0, tzinfo=UTC)
    llm_server.requests.clear()
    llm_server.handler = replies(
        {"Salut": "Salut ! Alors, ton examen de chimie, ça s'est passé comment ?", "16": "Bravo !"},
        {
            "16": {
                "replace": [
                    {"id": exam_id, "text": "L'utilisateur a réussi son examen de chimie le 5 novembre avec 16"}
                ]
            }
        },
    )
    await engine.conversation.turn(msg("Salut !"))
    [request] = [r for r in llm_server.chats if r.json_schema is None]
    assert is_followup(request)
    note = request.messages[-2]["content"]
    assert EXAM in note and "2026-11-05" in note and request.messages[-1]["content"] == "Alice: Salut !"
    why = await engine.memories.why("alice", "chan-1")
    assert [(s.id, s.reason) for s in why.slots if s.reason == "followup"] == [(exam_id, "followup")]

    await engine.operator.wait_reflections("alice")
    llm_server.requests.clear()
    await engine.conversation.turn(msg("Très bien, j'ai eu 16 !"))
    await engine.operator.wait_reflections("alice")
    reply_call = [r for r in llm_server.chats if r.json_schema is None][-1]
    assert not is_followup(reply_call)
    [reflection] = [r for r in llm_server.chats if r.json_schema is not None]
    # The answer's reflection is shown the past memory with its id, and told it was asked about.
    assert f"[{exam_id}]" in reflection.last_user and "how a past event went" in reflection.last_user
    texts = [m.text for m in await engine.memories.list("alice")]
    assert "L'utilisateur a réussi son examen de chimie le 5 novembre avec 16" in texts
    why = await engine.memories.why("alice", "chan-1")
    assert all(s.reason != "followup" for s in why.slots)

    # Never twice for one event, even once the next turns have passed.
    for said in ("Et toi ?", "À demain."):
        await engine.conversation.turn(msg(said))
        assert not is_followup(last_reply(llm_server))
    assert (await engine.memories.stats("alice")).followed_up == 1


async def test_a_turn_carrying_a_follow_up_never_waits_for_its_own_record(db, http, llm_server, tmp_path, clock):
    """The turn writes what its follow-up became, then returns; its record (/why, counters) is
    written after, in the background: spawned first, it would hold the write lock the turn's
    last write waits for."""
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await told_exam(engine, llm_server, clock)
    clock.now = datetime(2026, 11, 6, 10, 0, tzinfo=UTC)
    writers: list[str] = []
    write = db.write

    @asynccontextmanager
    async def watched() -> AsyncIterator[Any]:
        async with write() as conn:
            task = asyncio.current_task()
            writers.append(task.get_name() if task is not None else "")
            yield conn

    db.write = watched
    llm_server.handler = replies({"Salut": "Salut ! Alors, ton examen de chimie, ça s'est passé comment ?"})
    turn = asyncio.current_task()
    assert turn is not None
    result = await engine.conversation.turn(msg("Salut !"))
    assert result.reply is not None and is_followup(last_reply(llm_server))
    # The turn's own writes (the exchange, its reply on PostgreSQL, the follow-up's offer), and
    # nothing of the record yet.
    assert len(writers) >= 2 and set(writers) == {turn.get_name()}, writers
    await engine.conversation.wait_recorded("alice")
    assert any(name.startswith("record-turn:") for name in writers), writers
    await engine.operator.wait_reflections("alice")


async def test_a_follow_up_never_asked_is_spent_after_its_turns(db, http, llm_server, tmp_path, clock):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock, followup_turns=2)
    await told_exam(engine, llm_server, clock)
    clock.now = datetime(2026, 11, 7, 10, 0, tzinfo=UTC)
    carried = []
    for said in ("Il fait beau.", "On parle de films ?", "Et de musique ?"):
        await engine.conversation.turn(msg(said))
        carried.append(is_followup(last_reply(llm_server)))
    assert carried == [True, True, False]


async def test_the_window_and_the_notice_bound_what_is_followed_up(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    # Past the window (14 days): too late to ask.
    await store.add(
        "alice",
        NewMemory(text="L'utilisateur avait un entretien le 1er octobre", expires_at=clock.now - timedelta(days=20)),
    )
    # Told on the day itself: that conversation was the time to ask.
    await store.add(
        "alice", NewMemory(text="L'utilisateur passe son permis aujourd'hui", expires_at=clock.now + timedelta(hours=2))
    )
    clock.advance(hours=6)
    await engine.conversation.turn(msg("Coucou"))
    assert not is_followup(last_reply(llm_server))


async def test_a_forgotten_or_hand_edited_memory_is_never_followed_up(db, http, llm_server, tmp_path, clock):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    exam_id = await told_exam(engine, llm_server, clock)
    await engine.memories.edit("alice", exam_id, "L'utilisateur a un examen de chimie en novembre")
    bob_exam = await told_exam(engine, llm_server, clock, user="bob")
    await engine.memories.forget("bob", bob_exam)
    clock.now = datetime(2026, 11, 6, 10, 0, tzinfo=UTC)
    for user in ("alice", "bob"):
        await engine.conversation.turn(msg("Salut", user=user))
        assert not is_followup(last_reply(llm_server)), user


async def test_a_memory_changed_after_it_was_offered_is_dropped(db, http, llm_server, tmp_path, clock):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    exam_id = await told_exam(engine, llm_server, clock)
    clock.now = datetime(2026, 11, 6, 10, 0, tzinfo=UTC)
    await engine.conversation.turn(msg("Salut"))
    assert is_followup(last_reply(llm_server))
    await engine.memories.forget("alice", exam_id)
    await engine.conversation.turn(msg("Tu es là ?"))
    assert not is_followup(last_reply(llm_server))


async def test_a_memory_of_a_dm_is_not_followed_up_in_a_server_unless_shared(db, http, llm_server, tmp_path, clock):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await told_exam(engine, llm_server, clock, story="dm-1", place="dm")
    clock.now = datetime(2026, 11, 6, 10, 0, tzinfo=UTC)
    await engine.conversation.turn(msg("Salut"))
    assert not is_followup(last_reply(llm_server))
    await engine.privacy.set_sharing("alice", True)
    await engine.conversation.turn(msg("Re"))
    assert is_followup(last_reply(llm_server))


def test_a_question_that_names_the_event_is_asking_about_it():
    assert asked_about("Alors, ton examen de chimie s'est bien passé ?", EXAM)
    assert asked_about("How did the exams go?", "The user has a chemistry exam on Friday")
    assert not asked_about("Ton examen de chimie, j'espère que c'était bien.", EXAM)
    assert not asked_about("Tu veux un café ?", EXAM)


def test_a_time_zone_is_learned_from_quiet_hours_or_not_at_all():
    day = datetime(2026, 11, 2, tzinfo=UTC)
    # Someone in UTC+1 who writes from 8:00 to 23:00 their time: quiet from 23:00 to 7:00 UTC+1.
    times = [day + timedelta(days=d, hours=h) for d in range(5) for h in range(7, 22, 2)]
    assert learned_offset(times) == timedelta(hours=1)
    assert learned_offset(times[:10]) is None, "too few messages to tell"
    every_hour = [day + timedelta(hours=h) for h in range(72)]
    assert learned_offset(every_hour) is None, "no quiet hours: no night to read"


def test_a_time_zone_name_is_checked():
    assert checked_timezone(" Europe/Paris ") == "Europe/Paris"
    for bad in ("Mars/Olympus", "../etc/passwd", "", "x" * 100):
        with pytest.raises(InvalidTimezone):
            checked_timezone(bad)


# --- check-ins --------------------------------------------------------------------------------

PERSON = "123456789012345678"


def dated(text: str, when: datetime) -> NewMemory:
    # Said in another server than the one the person talks in below: their turns there do not
    # follow it up themselves, a check-in (a DM, theirs alone) may.
    return NewMemory(text=text, expires_at=when, place="guild-2")


async def checkin_person(engine, llm_server, clock, store, *, zone: str | None = "Europe/Paris"):
    """A person who talked today, turned check-ins on, and whose dentist appointment passed."""
    await engine.conversation.turn(msg("Bonjour", user=PERSON))
    await engine.privacy.set_checkins(PERSON, True, zone)
    return await store.add(
        PERSON, dated("L'utilisateur a rendez-vous chez le dentiste le 3 novembre", clock.now + timedelta(days=1))
    )


async def test_a_check_in_is_due_only_in_the_persons_daytime(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    memory_id = await checkin_person(engine, llm_server, clock, store)
    clock.now = datetime(2026, 11, 4, 2, 0, tzinfo=UTC)  # 3:00 in Paris
    assert await engine.conversation.due_checkins() == []
    clock.now = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)  # 11:00 in Paris
    [due] = await engine.conversation.due_checkins()
    assert (due.person, due.due.memory_id) == (PERSON, memory_id)
    # Off in the place they last wrote, or for the whole bot: none.
    assert await engine.conversation.due_checkins(frozenset({"guild-1"})) == []
    engine.settings = engine.settings.model_copy(update={"checkins": False})
    assert await engine.conversation.due_checkins() == []


async def test_a_check_in_is_written_stored_and_never_sent_twice(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await checkin_person(engine, llm_server, clock, store)
    clock.now = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)
    llm_server.handler = lambda r: "Alors, ce rendez-vous chez le dentiste, ça s'est bien passé ?"
    [due] = await engine.conversation.due_checkins()
    assert await engine.conversation.claim_checkin(due)
    exchange_id, text = await engine.conversation.write_checkin(due, story_id="dm-1", user_name="Alice")
    assert "dentiste" in text
    [request] = [r for r in llm_server.chats if "is not talking with you right now" in r.last_user]
    assert "dentiste" in request.last_user
    assert "in the language that memory is written in" in request.last_user, "no conversation in its prompt tells it"
    await engine.conversation.checkin_sent(due, story_id="dm-1", exchange_id=exchange_id, message_id="m-1")
    assert await engine.conversation.due_checkins() == []
    # Their answer in that DM is reflected with the event shown to the reflection.
    llm_server.handler = lambda r: "{}" if r.json_schema is not None else "Tant mieux !"
    await engine.conversation.turn(msg("Très bien, aucune carie.", user=PERSON, story="dm-1", place="dm"))
    await engine.operator.wait_reflections(PERSON)
    reflection = [r for r in llm_server.chats if r.json_schema is not None][-1]
    assert "how a past event went" in reflection.last_user and "aucune carie" in reflection.last_user


async def test_at_most_one_check_in_a_day_and_three_a_week(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await checkin_person(engine, llm_server, clock, store)
    for n in range(2, 7):
        await store.add(
            PERSON, dated(f"L'utilisateur a un match de tennis numéro {n}", clock.now + timedelta(days=1, hours=n))
        )
    clock.now = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)
    sent_days = []
    for day in range(7):
        for hour in (10, 15):
            clock.now = datetime(2026, 11, 4 + day, hour, 0, tzinfo=UTC)
            for due in await engine.conversation.due_checkins():
                assert await engine.conversation.claim_checkin(due)
                written = await engine.conversation.write_checkin(due, story_id=f"dm-{day}", user_name="Alice")
                assert written is not None
                await engine.conversation.checkin_sent(
                    due, story_id=f"dm-{day}", exchange_id=written[0], message_id=f"m-{day}"
                )
                sent_days.append(day)
    assert sent_days == [0, 1, 2], "one a day, then three in the week"


async def test_no_check_in_for_someone_silent_for_months_or_erased(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await checkin_person(engine, llm_server, clock, store)
    clock.now = datetime(2027, 1, 1, 10, 0, tzinfo=UTC)
    await store.add(PERSON, dated("L'utilisateur a un concert le 8 janvier", datetime(2027, 1, 8, 20, 0, tzinfo=UTC)))
    clock.now = datetime(2027, 1, 10, 10, 0, tzinfo=UTC)
    assert await engine.conversation.due_checkins() == [], "silent since November"
    await engine.conversation.turn(msg("Me revoilà", user=PERSON))
    assert len(await engine.conversation.due_checkins()) == 1
    await engine.privacy.erase_person(PERSON)
    assert await engine.conversation.due_checkins() == []
    assert not (await engine.privacy.checkins(PERSON)).enabled


async def test_without_a_time_zone_no_check_in_until_one_is_learned(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await checkin_person(engine, llm_server, clock, store, zone=None)
    clock.now = datetime(2026, 11, 4, 12, 0, tzinfo=UTC)
    assert await engine.conversation.due_checkins() == []
    assert (await engine.privacy.checkins(PERSON)).timezone is None


async def test_closed_dms_turn_check_ins_off_and_the_next_turn_says_so_once(
    db, http, llm_server, tmp_path, clock, store
):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await checkin_person(engine, llm_server, clock, store)
    clock.now = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)
    [due] = await engine.conversation.due_checkins()
    assert await engine.conversation.claim_checkin(due)
    exchange_id, _ = await engine.conversation.write_checkin(due, story_id="dm-1", user_name="Alice")
    await engine.conversation.checkin_unsent(due, exchange_id, blocked=True)
    assert not (await engine.privacy.checkins(PERSON)).enabled
    assert await engine.conversation.notice(PERSON) == "checkins_blocked"
    assert await engine.conversation.notice(PERSON) is None
    # The memory was not followed up: a turn may still ask about it.
    await engine.privacy.set_sharing(PERSON, True)
    await engine.conversation.turn(msg("Salut", user=PERSON))
    assert is_followup(last_reply(llm_server))


async def test_two_engines_on_one_database_claim_a_check_in_once(db, http, llm_server, tmp_path, clock, store):
    first = make_engine(db, http, llm_server, tmp_path, clock=clock)
    second = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await checkin_person(first, llm_server, clock, store)
    clock.now = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)
    [due_first] = await first.conversation.due_checkins()
    [due_second] = await second.conversation.due_checkins()
    claims = [await first.conversation.claim_checkin(due_first), await second.conversation.claim_checkin(due_second)]
    assert claims == [True, False]
    # A claim left by a process that died before sending is taken over after a while.
    clock.advance(minutes=11)
    assert await second.conversation.claim_checkin(
        Checkin(due_second.person, due_second.owner, due_second.due, due_second.place)
    )
