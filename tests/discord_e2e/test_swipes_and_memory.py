"""Swipes, receipts, memory edits and the user's edits and deletes, as Discord sees them: the real
bot process against the fake Discord; button presses and modal submits go in as interactions,
and the tests assert on the REST calls that come out and on the bot's database."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest

from tests.discord_e2e.conftest import EchoProcess, Scene, StartEcho
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.discord.rest import EPHEMERAL
from tests.fakes.discord.state import Channel, Interaction, User
from tests.fakes.llm_server import FakeLLMServer, LLMRequest

CAT = "L'utilisateur a un chat qui s'appelle Pixel."
LYON = "L'utilisateur habite à Lyon."
DEFERRED_UPDATE, UPDATE_MESSAGE, MODAL, CHANNEL_MESSAGE = 6, 7, 9, 4


def query(echo: EchoProcess, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{echo.database_path}?mode=ro", uri=True)) as conn:
        return conn.execute(sql, params).fetchall()


async def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("the condition never held")
        await asyncio.sleep(0.05)


def bot_messages(discord: FakeDiscord, channel: Channel | None = None) -> list[dict[str, Any]]:
    """What the bot posted in `channel` (#general unless given) for everyone to see."""
    bot_id = str(discord.bot_user.id)
    return [
        m
        for m in discord.messages_in(channel or discord.general)
        if m["author"]["id"] == bot_id and not int(m.get("flags") or 0) & EPHEMERAL
    ]


def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message.get("components") or [] for c in row.get("components", [])]


def button(message: dict[str, Any], label_start: str) -> dict[str, Any]:
    (found,) = [b for b in buttons(message) if str(b.get("label", "")).startswith(label_start)]
    return found


async def callback(discord: FakeDiscord, interaction: Interaction) -> dict[str, Any]:
    path = f"/interactions/{interaction.id}/{interaction.token}/callback"
    (call,) = await discord.wait_for_call("POST", path)
    assert call.status in (200, 204), call
    assert call.at - interaction.created < 3.0, "answered after Discord's 3 s deadline"
    return call.json


def script(
    llm_server: FakeLLMServer, replies: list[str], reflect: Callable[[LLMRequest], dict[str, Any]]
) -> list[LLMRequest]:
    reflections: list[LLMRequest] = []
    answers = iter(replies)

    def handler(request: LLMRequest) -> str:
        if request.json_schema is not None:
            reflections.append(request)
            return json.dumps(reflect(request))
        return next(answers)

    llm_server.handler = handler
    return reflections


async def alice_tells_about_the_cat(
    discord: FakeDiscord, channel: Channel | None = None, alice: User = ALICE
) -> dict[str, Any]:
    """Alice tells the bot about her cat in `channel` (#general unless given); its reply, once
    the reply's buttons are on it."""
    channel = channel or discord.general
    await discord.user_says(alice, channel, "j'ai un chat qui s'appelle Pixel", mention_bot=True)
    return (await until(lambda: [m for m in bot_messages(discord, channel) if buttons(m)]))[0]


async def test_only_the_person_answered_can_swipe_and_the_reflection_reads_the_answer_kept(scene: Scene) -> None:
    echo, fake_discord, llm_server, channel = scene.echo, scene.fake_discord, scene.llm_server, scene.channel
    reflections = script(llm_server, ["Première réponse.", "Deuxième réponse.", "Troisième."], lambda r: {})
    await fake_discord.user_says(scene.alice, channel, "raconte-moi une histoire", mention_bot=True)
    reply = (await until(lambda: [m for m in bot_messages(fake_discord, channel) if buttons(m)]))[0]
    assert reply["content"] == "Première réponse."
    assert [b["label"] for b in buttons(reply)] == ["◀", "1/1", "▶", "🔄"]

    # Bob is refused, ephemerally, and no model call is made for him.
    press = await fake_discord.press_button(scene.bob, reply, button(reply, "🔄")["custom_id"])
    answer = await callback(fake_discord, press)
    assert answer["type"] == CHANNEL_MESSAGE and answer["data"]["flags"] & EPHEMERAL
    assert "belong to the person this answer was for" in answer["data"]["content"]
    assert len([r for r in llm_server.chats if r.json_schema is None]) == 1

    press = await fake_discord.press_button(scene.alice, reply, button(reply, "🔄")["custom_id"])
    assert (await callback(fake_discord, press))["type"] == DEFERRED_UPDATE
    await until(lambda: reply["content"] == "Deuxième réponse.")
    assert [b["label"] for b in buttons(reply)] == ["◀", "2/2", "▶", "🔄"]
    first_prompt, second_prompt = [r.messages for r in llm_server.chats if r.json_schema is None]
    assert first_prompt == second_prompt

    press = await fake_discord.press_button(scene.alice, reply, button(reply, "◀")["custom_id"])
    answer = await callback(fake_discord, press)
    assert answer["type"] == UPDATE_MESSAGE and answer["data"]["content"] == "Première réponse."
    assert reply["content"] == "Première réponse." and button(reply, "1/2")["disabled"]

    assert reflections == []  # still open
    # Writing again settles it: its buttons go, and the reflection reads the answer kept.
    await fake_discord.user_says(scene.alice, channel, "merci !", mention_bot=True)
    await until(lambda: not buttons(reply))
    (request,) = await until(lambda: reflections)
    exchange = request.last_user.split("The exchange:")[1]
    assert "Première réponse." in exchange and "Deuxième réponse." not in exchange
    alice = str(scene.alice.id)
    assert query(echo, "SELECT reply FROM exchanges WHERE user_id = ? ORDER BY id LIMIT 1", (alice,)) == [
        ("Première réponse.",)
    ]


async def test_a_swipe_on_a_settled_answer_says_so_and_removes_the_buttons(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="2")
    script(llm_server, ["Une réponse."], lambda r: {})
    await fake_discord.user_says(ALICE, fake_discord.general, "salut", mention_bot=True)
    reply = (await until(lambda: [m for m in bot_messages(fake_discord) if buttons(m)]))[0]
    custom_id = button(reply, "🔄")["custom_id"]
    await until(lambda: not buttons(reply))  # the settle delay passed
    stale = dict(
        reply, components=[{"type": 1, "components": [{"type": 2, "style": 2, "label": "🔄", "custom_id": custom_id}]}]
    )
    press = await fake_discord.press_button(ALICE, stale, custom_id)
    answer = await callback(fake_discord, press)
    assert answer["type"] == UPDATE_MESSAGE and answer["data"]["components"] == []
    (followup,) = await fake_discord.wait_for_call("POST", f"/webhooks/{fake_discord.application_id}/{press.token}")
    assert "settled" in followup.json["content"] and followup.json["flags"] & EPHEMERAL


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_a_deleted_message_takes_its_memories_but_not_the_pinned_one(scene: Scene) -> None:
    echo, fake_discord, channel, alice = scene.echo, scene.fake_discord, scene.channel, str(scene.alice.id)
    script(
        scene.llm_server,
        ["Noté !"],
        lambda r: {"memories": [{"text": t, "type": "fact", "confidence": 0.9} for t in (CAT, LYON)]},
    )
    said = await fake_discord.user_says(
        scene.alice, channel, "j'ai un chat, Pixel, et j'habite à Lyon", mention_bot=True
    )
    memories = await until(
        lambda: len(rows := query(echo, "SELECT id, text FROM memories WHERE user_id = ?", (alice,))) == 2 and rows
    )
    ids = {text: memory_id for memory_id, text in memories}
    pin = await fake_discord.run_command(scene.alice, channel, "pin", [{"name": "id", "type": 4, "value": ids[LYON]}])
    assert "Pinned" in (await callback(fake_discord, pin))["data"]["content"]

    await fake_discord.user_deletes(said)
    await until(lambda: query(echo, "SELECT COUNT(*) FROM memories WHERE user_id = ?", (alice,)) == [(1,)])
    assert query(echo, "SELECT id FROM memories WHERE user_id = ?", (alice,)) == [(ids[LYON],)]
    assert query(echo, "SELECT memory_id, cause FROM memory_history WHERE user_id = ?", (alice,)) == [
        (ids[CAT], "message deleted")
    ]
    assert query(
        echo, "SELECT user_message FROM exchanges WHERE user_id = ? AND message_id = ?", (alice, said["id"])
    ) == [("",)]


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_an_edit_after_the_reflection_corrects_the_memory_it_produced(scene: Scene) -> None:
    echo, fake_discord, alice = scene.echo, scene.fake_discord, str(scene.alice.id)
    dog = "L'utilisateur a un chien."

    def reflect(request: LLMRequest) -> dict[str, Any]:
        if "It used to say" not in request.last_user:
            return {"memories": [{"text": dog, "type": "fact", "confidence": 0.9}]}
        (memory_id,) = [int(i) for i in query(echo, "SELECT id FROM memories WHERE user_id = ?", (alice,))[0]]
        return {"replace": [{"id": memory_id, "text": "L'utilisateur a un chat."}]}

    reflections = script(scene.llm_server, ["Un chien, super !"], reflect)
    said = await fake_discord.user_says(scene.alice, scene.channel, "j'ai un chien", mention_bot=True)
    await until(lambda: query(echo, "SELECT text FROM memories WHERE user_id = ?", (alice,)) == [(dog,)])
    await fake_discord.user_edits(said, f"<@{fake_discord.bot_user.id}> j'ai un chat, pas un chien")
    await until(
        lambda: query(echo, "SELECT text FROM memories WHERE user_id = ?", (alice,)) == [("L'utilisateur a un chat.",)]
    )
    correction = reflections[-1].last_user
    assert "It used to say" in correction and "j'ai un chat, pas un chien" in correction.split("The exchange:")[1]
    assert query(echo, "SELECT text, operation FROM memory_history WHERE user_id = ?", (alice,)) == [(dog, "replace")]


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_the_receipt_shows_the_change_and_says_when_the_memory_is_gone(scene: Scene) -> None:
    echo, fake_discord, alice = scene.echo, scene.fake_discord, scene.alice
    script(
        scene.llm_server,
        ["Pixel, quel joli nom."],
        lambda r: {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]},
    )
    reply = await alice_tells_about_the_cat(fake_discord, scene.channel, alice)
    receipt = button(reply, "🧠")
    assert receipt["label"] == "🧠 1"
    (memory_id,) = query(echo, "SELECT id FROM memories WHERE user_id = ?", (str(alice.id),))[0]

    refused = await fake_discord.press_button(scene.bob, reply, receipt["custom_id"])
    answer = await callback(fake_discord, refused)
    assert answer["data"]["flags"] & EPHEMERAL and CAT not in answer["data"]["content"]

    press = await fake_discord.press_button(alice, reply, receipt["custom_id"])
    answer = await callback(fake_discord, press)
    assert answer["data"]["flags"] & EPHEMERAL
    assert f"+ added #{memory_id}: {CAT}" in answer["data"]["content"]
    shown = press.original
    assert shown is not None and [b["label"] for b in buttons(shown)] == [f"Forget #{memory_id}", f"Edit #{memory_id}"]

    forget = await fake_discord.press_button(alice, shown, button(shown, "Forget")["custom_id"])
    assert f"Forgot #{memory_id}" in (await callback(fake_discord, forget))["data"]["content"]
    assert query(echo, "SELECT COUNT(*) FROM memories WHERE user_id = ?", (str(alice.id),)) == [(0,)]

    again = await fake_discord.press_button(alice, reply, receipt["custom_id"])
    answer = await callback(fake_discord, again)
    assert "has been forgotten since" in answer["data"]["content"]
    assert "None of these memories is in my memory any more." in answer["data"]["content"]
    assert not answer["data"].get("components")
    # Its Edit button, pressed late, says the same instead of opening an editor on nothing.
    late = await fake_discord.press_button(alice, shown, button(shown, "Edit")["custom_id"])
    answer = await callback(fake_discord, late)
    assert answer["type"] == CHANNEL_MESSAGE and "no longer in my memory" in answer["data"]["content"]


async def test_a_modal_edit_is_archived_and_restore_brings_the_old_text_back_even_after_a_restart(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0")
    script(llm_server, ["Pixel !"], lambda r: {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]})
    reply = await alice_tells_about_the_cat(fake_discord)
    (memory_id,) = query(echo, "SELECT id FROM memories WHERE user_id = ?", (str(ALICE.id),))[0]

    # The receipt's buttons still work once the bot was restarted: nothing was kept in memory.
    echo.process.terminate()
    await echo.process.wait()
    await until(lambda: not fake_discord.sessions)
    database = echo.database_path
    echo = await start_echo(SETTLE_SECONDS="0", DATABASE_PATH=str(database))
    echo.database_path = database

    press = await fake_discord.press_button(ALICE, reply, button(reply, "🧠")["custom_id"])
    await callback(fake_discord, press)
    shown = press.original
    assert shown is not None
    edit = await fake_discord.press_button(ALICE, shown, button(shown, "Edit")["custom_id"])
    modal = await callback(fake_discord, edit)
    assert modal["type"] == MODAL
    (field,) = [c for row in modal["data"]["components"] for c in row["components"]]
    assert field["value"] == CAT
    submitted = await fake_discord.submit_modal(
        ALICE, fake_discord.general, modal["data"]["custom_id"], {field["custom_id"]: "L'utilisateur a deux chats."}
    )
    text = (await callback(fake_discord, submitted))["data"]["content"]
    assert query(echo, "SELECT text FROM memories WHERE id = ?", (memory_id,)) == [("L'utilisateur a deux chats.",)]
    ((history_id, old, operation),) = query(
        echo, "SELECT id, text, operation FROM memory_history WHERE user_id = ?", (str(ALICE.id),)
    )
    assert (old, operation) == (CAT, "edit") and f"/restore {history_id}" in text

    restore = await fake_discord.run_command(
        ALICE, fake_discord.general, "restore", [{"name": "history_id", "type": 4, "value": history_id}]
    )
    assert f"Restored memory #{memory_id}" in (await callback(fake_discord, restore))["data"]["content"]
    assert query(echo, "SELECT text FROM memories WHERE id = ?", (memory_id,)) == [(CAT,)]


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_a_bulk_delete_takes_the_memories_of_each_message(scene: Scene) -> None:
    echo, fake_discord, channel, alice = scene.echo, scene.fake_discord, scene.channel, str(scene.alice.id)

    def reflect(request: LLMRequest) -> dict[str, Any]:
        text = CAT if "chat" in request.last_user.split("The exchange:")[1] else LYON
        return {"memories": [{"text": text, "type": "fact", "confidence": 0.9}]}

    script(scene.llm_server, ["Noté.", "Noté aussi."], reflect)
    said = [await fake_discord.user_says(scene.alice, channel, "j'ai un chat qui s'appelle Pixel", mention_bot=True)]
    await until(lambda: len(query(echo, "SELECT id FROM memories WHERE user_id = ?", (alice,))) == 1)
    said.append(await fake_discord.user_says(scene.alice, channel, "j'habite à Lyon", mention_bot=True))
    await until(lambda: len(query(echo, "SELECT id FROM memories WHERE user_id = ?", (alice,))) == 2)

    await fake_discord.moderator_bulk_deletes(said)
    await until(lambda: query(echo, "SELECT COUNT(*) FROM memories WHERE user_id = ?", (alice,)) == [(0,)])
    causes = query(echo, "SELECT cause FROM memory_history WHERE user_id = ?", (alice,))
    assert causes == [("message deleted",), ("message deleted",)]


async def test_receipts_as_a_reaction(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0", MEMORY_RECEIPTS="reaction")
    script(llm_server, ["Pixel !"], lambda r: {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]})
    await fake_discord.user_says(ALICE, fake_discord.general, "j'ai un chat qui s'appelle Pixel", mention_bot=True)
    (call,) = await fake_discord.wait_for_call("PUT", f"/channels/{fake_discord.general.id}/messages/")
    (reply,) = bot_messages(fake_discord)
    assert call.status == 204 and f"/messages/{reply['id']}/reactions/" in call.path
    assert fake_discord.reactions[int(reply["id"])] == ["🧠"]
    assert not buttons(reply)


async def test_memories_offers_the_same_edit(scene: Scene) -> None:
    echo, fake_discord, channel, alice = scene.echo, scene.fake_discord, scene.channel, scene.alice
    remember = await fake_discord.run_command(
        alice, channel, "remember", [{"name": "text", "type": 3, "value": "J'ai un chat."}]
    )
    await callback(fake_discord, remember)
    ((memory_id, text),) = query(echo, "SELECT id, text FROM memories WHERE user_id = ?", (str(alice.id),))

    listing = await fake_discord.run_command(alice, channel, "memories")
    await callback(fake_discord, listing)
    page = listing.original
    assert page is not None
    (menu,) = [c for c in buttons(page) if c["type"] == 3]
    assert [o["value"] for o in menu["options"]] == [str(memory_id)]
    refused = await fake_discord.choose(scene.bob, page, menu["custom_id"], [str(memory_id)])
    assert (await callback(fake_discord, refused))["type"] == CHANNEL_MESSAGE

    pick = await fake_discord.choose(alice, page, menu["custom_id"], [str(memory_id)])
    modal = await callback(fake_discord, pick)
    assert modal["type"] == MODAL
    (field,) = [c for row in modal["data"]["components"] for c in row["components"]]
    assert field["value"] == text
    submitted = await fake_discord.submit_modal(
        alice, channel, modal["data"]["custom_id"], {field["custom_id"]: "J'ai deux chats."}
    )
    assert "Edited" in (await callback(fake_discord, submitted))["data"]["content"]
    assert query(echo, "SELECT text FROM memories WHERE id = ?", (memory_id,)) == [("J'ai deux chats.",)]


async def test_once_settled_the_swipe_buttons_give_way_to_the_receipt(scene: Scene) -> None:
    fake_discord, channel, alice = scene.fake_discord, scene.channel, scene.alice

    def reflect(request: LLMRequest) -> dict[str, Any]:
        return {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]} if "Pixel" in request.last_user else {}

    script(scene.llm_server, ["Quel joli nom.", "De rien."], reflect)
    first = await alice_tells_about_the_cat(fake_discord, channel, alice)
    assert "🔄" in [b["label"] for b in buttons(first)]
    await fake_discord.user_says(alice, channel, "merci", mention_bot=True)
    await until(lambda: [b["label"] for b in buttons(first)] == ["🧠 1"])
    await asyncio.sleep(0.5)  # nothing later takes it away
    assert [b["label"] for b in buttons(first)] == ["🧠 1"]


async def test_a_crash_between_the_reply_and_its_settling_loses_nothing(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(BURST_SECONDS="0")
    reflections = script(
        llm_server,
        ["Première.", "Seconde."],
        lambda r: {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]},
    )
    reply = await alice_tells_about_the_cat(fake_discord)
    press = await fake_discord.press_button(ALICE, reply, button(reply, "🔄")["custom_id"])
    await callback(fake_discord, press)
    await until(lambda: reply["content"] == "Seconde.")

    echo.process.kill()  # SIGKILL: no shutdown, the exchange is still open
    await echo.process.wait()
    await until(lambda: not fake_discord.sessions)
    assert reflections == []
    database = echo.database_path
    echo = await start_echo(BURST_SECONDS="0", DATABASE_PATH=str(database))
    echo.database_path = database

    (request,) = await until(lambda: reflections)
    assert "Seconde." in request.last_user.split("The exchange:")[1]
    await until(lambda: query(echo, "SELECT text FROM memories WHERE user_id = ?", (str(ALICE.id),)) == [(CAT,)])
    # Its swipe buttons gave way to the receipt.
    await until(lambda: [b["label"] for b in buttons(reply)] == ["🧠 1"])
