"""Follow-ups and check-ins seen from Discord (issue 34): the real bot, on a clock the test
moves (tests/fakes/discord/clocked_echo.py), against the fake Discord and the scripted LLM.

A person says when their exam is; the clock passes the date; their next message's request to
the model carries the follow-up and `/why` shows it; the next turns do not. With check-ins on,
one DM arrives in the daytime of the person's zone and none at night, none after `/erase-me`,
none to someone who left the server, a 50007 turns them off (and the next reply says so); two bot processes on one PostgreSQL
database send it once.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.discord_e2e.conftest import StartEcho
from tests.discord_e2e.test_swipes_and_memory import callback, query, until
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord.echo_process import EchoProcess
from tests.fakes.discord.state import User
from tests.fakes.llm_server import FakeLLMServer, LLMRequest

SETTINGS = {"BURST_SECONDS": "0", "SETTLE_SECONDS": "0", "STREAM_REPLIES": "false", "CHECKIN_INTERVAL_SECONDS": "0.3"}
# The event's day: two days from now, whatever the day the tests run.
EVENT = (datetime.now(UTC) + timedelta(days=2)).date()


class MovedClock:
    """The bot's clock: the real time plus what the test writes in the file."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / "clock-offset"
        self.file.write_text("0", encoding="utf-8")

    def set(self, when: datetime) -> None:
        self.file.write_text(str((when - datetime.now(UTC)).total_seconds()), encoding="utf-8")


def on_the_day_after(hour: int) -> datetime:
    return datetime.combine(EVENT + timedelta(days=1), datetime.min.time(), tzinfo=UTC) + timedelta(hours=hour)


def is_followup(request: LLMRequest) -> bool:
    return any("Follow-up:" in str(m.get("content")) for m in request.messages)


def scripted(llm_server: FakeLLMServer) -> None:
    """Replies by what the message says; an event told is remembered with its date."""

    def handler(request: LLMRequest) -> str:
        if request.json_schema is not None:
            if "appointment is on" in request.last_user or "exam is on" in request.last_user:
                what = "chemistry exam" if "exam" in request.last_user else "dentist appointment"
                memory = {"text": f"The user has a {what} on {EVENT.isoformat()}", "type": "fact",
                          "confidence": 0.95, "expires_at": EVENT.isoformat()}  # fmt: skip
                return json.dumps({"memories": [memory]})
            return "{}"
        if "is not talking with you right now" in request.last_user:
            return "Hey! How did the dentist appointment go?"
        said = request.messages[-1]["content"]
        if "Hi again" in said:
            return "Hi! So, how did your chemistry exam go?"
        return "Noted."

    llm_server.handler = handler


def replies(llm_server: FakeLLMServer) -> list[LLMRequest]:
    return [r for r in llm_server.chats if r.json_schema is None]


async def tells(discord: FakeDiscord, echo: EchoProcess, user: User, what: str) -> None:
    """The person tells the bot about a dated event, in #general; once it is remembered."""
    await discord.user_says(user, discord.general, f"My {what} is on {EVENT.isoformat()}.", mention_bot=True)
    await until(
        lambda: query(echo, "SELECT 1 FROM memories WHERE user_id = ? AND expires_at IS NOT NULL", (str(user.id),))
    )


async def command_text(discord: FakeDiscord, user: User, name: str, options: list[dict[str, Any]] = ()) -> str:  # type: ignore[assignment]
    interaction = await discord.run_command(user, discord.general, name, list(options))
    return str((await callback(discord, interaction))["data"]["content"])


async def turn_checkins_on(discord: FakeDiscord, user: User, zone: str = "UTC") -> None:
    shown = await command_text(
        discord,
        user,
        "followups",
        [{"name": "state", "type": 3, "value": "on"}, {"name": "timezone", "type": 3, "value": zone}],
    )
    assert shown.startswith("Check-ins are now on.") and f"Your time zone: {zone}." in shown


def dm_posts(discord: FakeDiscord, user: User) -> list[Any]:
    channel = discord.dm_channel(user)
    return [c for c in discord.calls_to("POST", f"/channels/{channel.id}/messages") if c.status == 200]


async def test_a_passed_date_is_followed_up_at_the_next_message_and_why_says_so(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    clock = MovedClock(tmp_path)
    echo = await start_echo(clock_file=clock.file, **SETTINGS)
    scripted(llm_server)
    alice = fake_discord.add_user(
        "alice2", guild=fake_discord.guild, global_name="Alice", roles=[fake_discord.member_role]
    )
    await tells(fake_discord, echo, alice, "chemistry exam")
    await fake_discord.user_says(alice, fake_discord.general, "Still revising.", mention_bot=True)
    await until(lambda: len(replies(llm_server)) == 2)
    assert not is_followup(replies(llm_server)[-1]), "before the date, nothing to follow up"

    clock.set(on_the_day_after(10))
    await fake_discord.user_says(alice, fake_discord.general, "Hi again!", mention_bot=True)
    await until(lambda: len(replies(llm_server)) == 3)
    request = replies(llm_server)[-1]
    assert is_followup(request) and "chemistry exam" in request.messages[-2]["content"]
    # Asked once the turn is over, as a person can (the model's request comes before the reply
    # and its record): /why tells of the last turn.
    why = ""
    for _ in range(100):
        why = await command_text(fake_discord, alice, "why")
        if "Hi again!" in why:
            break
        await asyncio.sleep(0.1)
    assert "Follow-up — a dated event that has passed" in why and "chemistry exam" in why

    await fake_discord.user_says(alice, fake_discord.general, "It went great, I got an A.", mention_bot=True)
    await until(lambda: len(replies(llm_server)) == 4)
    assert not is_followup(replies(llm_server)[-1])
    await fake_discord.user_says(alice, fake_discord.general, "See you.", mention_bot=True)
    await until(lambda: len(replies(llm_server)) == 5)
    assert not is_followup(replies(llm_server)[-1])
    assert "Follow-up" not in await command_text(fake_discord, alice, "why")


async def test_check_ins_come_once_in_the_daytime_never_at_night_nor_after_an_erase_and_50007_stops_them(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    clock = MovedClock(tmp_path)
    echo = await start_echo(clock_file=clock.file, **SETTINGS)
    scripted(llm_server)
    guild, role = fake_discord.guild, fake_discord.member_role
    bob, carol, dave, erin = (
        fake_discord.add_user(n, guild=guild, global_name=n.title(), roles=[role])
        for n in ("bob", "carol", "dave", "erin")
    )
    for person in (bob, carol, dave, erin):
        await turn_checkins_on(fake_discord, person)
        await tells(fake_discord, echo, person, "dentist appointment")
    fake_discord.dms_refused.add(carol.id)
    del guild.members[erin.id]  # Erin left the server where she last wrote.
    # Dave erases everything about him.
    ask = await fake_discord.run_command(dave, fake_discord.general, "erase-me")
    confirm = (await callback(fake_discord, ask)) and ask.original
    assert confirm is not None
    (erase_id,) = [
        c["custom_id"] for row in confirm["components"] for c in row["components"] if c["label"] == "Erase everything"
    ]
    await callback(fake_discord, await fake_discord.press_button(dave, confirm, erase_id))
    await until(lambda: query(echo, "SELECT COUNT(*) FROM memories WHERE user_id = ?", (str(dave.id),)) == [(0,)])

    clock.set(on_the_day_after(3))  # 3:00 in their zone: night
    await asyncio.sleep(2.0)  # several looks
    assert fake_discord.calls_to("POST", "/users/@me/channels") == [] and dm_posts(fake_discord, bob) == []

    clock.set(on_the_day_after(11))
    posted = await until(lambda: dm_posts(fake_discord, bob))
    assert posted[0].json["content"] == "Hey! How did the dentist appointment go?"
    await until(
        lambda: (
            query(echo, "SELECT enabled, notice FROM checkin_settings WHERE user_id = ?", (str(carol.id),))
            == [(0, "blocked")]
        )
    )
    await until(lambda: query(echo, "SELECT state FROM followups WHERE user_id = ?", (str(erin.id),)) == [("dropped",)])
    await asyncio.sleep(2.0)  # more looks: nothing twice, nothing to Dave nor Erin
    assert len(dm_posts(fake_discord, bob)) == 1
    assert (
        dm_posts(fake_discord, dave) == []
        and dm_posts(fake_discord, carol) == []
        and dm_posts(fake_discord, erin) == []
    )
    assert not [
        r for r in replies(llm_server) if "is not talking with you right now" in r.last_user and "Erin" in r.last_user
    ]
    [(user_message, reply)] = query(
        echo, "SELECT user_message, reply FROM exchanges WHERE user_id = ? AND story_id = ?",
        (str(bob.id), str(fake_discord.dm_channel(bob).id)),
    )  # fmt: skip
    assert (user_message, reply) == ("", "Hey! How did the dentist appointment go?"), "stored as an exchange"

    # Carol's next reply says why she got nothing, once.
    general = fake_discord.general
    for said in ("Hello?", "Hello again?"):
        await fake_discord.user_says(carol, general, said, mention_bot=True)
    notices = await until(
        lambda: [m for m in fake_discord.messages_in(general) if "/followups on" in m["content"]], timeout=20
    )
    await asyncio.sleep(1.0)
    assert len([m for m in fake_discord.messages_in(general) if "/followups on" in m["content"]]) == len(notices) == 1
    assert "your DMs are closed to me" in notices[0]["content"]


async def test_two_bot_processes_on_one_postgresql_database_send_a_check_in_once(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer, tmp_path: Path, postgres_cluster: Any
) -> None:
    clock = MovedClock(tmp_path)
    url = await postgres_cluster.reset_database()
    settings = SETTINGS | {"DATABASE_URL": url}
    first = await start_echo(clock_file=clock.file, **settings)
    scripted(llm_server)
    bob = fake_discord.add_user("bob2", guild=fake_discord.guild, global_name="Bob", roles=[fake_discord.member_role])
    await turn_checkins_on(fake_discord, bob)
    await fake_discord.user_says(
        bob, fake_discord.general, f"My dentist appointment is on {EVENT.isoformat()}.", mention_bot=True
    )
    await until(lambda: [r for r in llm_server.chats if r.json_schema is not None])
    await asyncio.sleep(1.0)  # the reflection applied
    await start_echo(clock_file=clock.file, sessions=2, **settings)
    clock.set(on_the_day_after(11))
    await until(lambda: dm_posts(fake_discord, bob))
    await asyncio.sleep(3.0)  # many looks by both processes
    assert len(dm_posts(fake_discord, bob)) == 1
    assert first.process.returncode is None
