"""The memory commands over a real engine and SQLite: ephemeral answers, per-user scoping,
autocomplete, the paginator and the erase confirmation."""

from __future__ import annotations

import json
import logging
from typing import Any
from unittest.mock import AsyncMock, MagicMock

import discord
import pytest
from discord import app_commands

from bot.app import Services
from bot.engine import Incoming
from bot.errors import StorageError
from bot.i18n import text as tr
from bot.presenting import storage_failed
from cogs.memory import EraseConfirm, MemoryCommands, PageView
from cogs.utils.answering import DISCORD_LIMIT
from cogs.utils.views import refuse_foreign
from tests.cogs import (
    ALICE,
    BOB,
    CHANNEL_ID,
    GUILD_ID,
    all_ephemeral,
    fake_channel,
    fake_interaction,
    fake_message,
    fake_user,
    offline_bot,
    pressing,
    texts,
)
from tests.fakes.llm_server import FakeLLMServer


def make_cog(services: Services) -> MemoryCommands:
    return MemoryCommands(offline_bot(services), services.engine)


NOT_YOURS = tr("not_yours")
FAILED = tr("failed")


async def remember(services: Services, user: int, text: str) -> int:
    return await services.engine.memories.remember(str(user), text, story_id=str(CHANNEL_ID), place=str(GUILD_ID))


def not_found() -> discord.NotFound:
    response = MagicMock(status=404, reason="Not Found")
    return discord.NotFound(response, {"code": 10008, "message": "Unknown Message"})


async def test_every_memory_answer_is_ephemeral(services: Services, llm_server: FakeLLMServer, store) -> None:
    cog = make_cog(services)
    memory_id = await remember(services, ALICE, "Alice aime le vélo")
    await services.engine.memories.forget(str(ALICE), memory_id)
    history_id = (await store.history(str(ALICE)))[0].id
    calls: list[tuple[Any, tuple[Any, ...]]] = [
        (cog.memories, ()),
        (cog.remember, ("Alice habite à Lyon",)),
        (cog.restore, (history_id,)),
        (cog.pin, (memory_id,)),
        (cog.unpin, (memory_id,)),
        (cog.forget, (memory_id,)),
        (cog.history, ()),
        (cog.why, ()),
        (cog.memory_stats, ()),
        (cog.share, ()),
        (cog.share, (app_commands.Choice(name="on", value="on"),)),
        (cog.export, ()),
        (cog.erase_me, ()),
    ]
    for command, args in calls:
        interaction = fake_interaction(ALICE)
        await command.callback(cog, interaction, *args)
        assert all_ephemeral(interaction), command.name
    interaction = fake_interaction(ALICE)
    own = fake_message("Je joue du piano", author=fake_user(ALICE, "Alice"), channel=fake_channel())
    await cog.remember_this(interaction, own)
    assert all_ephemeral(interaction)


async def test_another_users_id_behaves_like_a_missing_one(
    services: Services, llm_server: FakeLLMServer, store
) -> None:
    cog = make_cog(services)
    bobs = await remember(services, BOB, "Bob joue du jazz")
    await services.engine.memories.forget(str(BOB), await remember(services, BOB, "Bob vit à Nantes"))
    bobs_history = (await store.history(str(BOB)))[0].id
    missing = bobs + 1000

    for command in (cog.forget, cog.pin, cog.unpin):
        alice, alice_missing = fake_interaction(ALICE), fake_interaction(ALICE)
        await command.callback(cog, alice, bobs)
        await command.callback(cog, alice_missing, missing)
        assert texts(alice) == [f"You have no memory #{bobs}."], command.name
        assert texts(alice_missing) == [f"You have no memory #{missing}."], command.name
    alice = fake_interaction(ALICE)
    await cog.restore.callback(cog, alice, bobs_history)
    assert texts(alice) == [f"No history entry h{bobs_history} of yours."]

    kept = await store.get(str(BOB), bobs)
    assert kept is not None and kept.text == "Bob joue du jazz" and not kept.pinned
    assert await store.get(str(BOB), (await store.history(str(BOB)))[0].memory_id) is None


async def test_forget_pin_and_restore_of_ones_own_memory(services: Services, llm_server: FakeLLMServer, store) -> None:
    cog = make_cog(services)
    memory_id = await remember(services, ALICE, "Alice fait du vélo le mardi")
    calls = [
        (cog.pin, memory_id, f"Pinned #{memory_id}."),
        (cog.forget, memory_id, f"Forgot #{memory_id} (see /history to restore it)."),
    ]
    for command, arg, expected in calls:
        interaction = fake_interaction(ALICE)
        await command.callback(cog, interaction, arg)
        assert texts(interaction) == [expected]
    assert await store.get(str(ALICE), memory_id) is None

    interaction = fake_interaction(ALICE)
    await cog.history.callback(cog, interaction)
    (history,) = texts(interaction)
    history_id = (await store.history(str(ALICE)))[0].id
    assert f"h{history_id}: #{memory_id} forgotten" in history

    interaction = fake_interaction(ALICE)
    await cog.restore.callback(cog, interaction, history_id)
    assert texts(interaction) == [f"Restored memory #{memory_id}."]
    restored = await store.get(str(ALICE), memory_id)
    assert restored is not None and restored.text == "Alice fait du vélo le mardi"


async def test_remember_stores_for_the_invoker_in_this_place(
    services: Services, llm_server: FakeLLMServer, store
) -> None:
    cog = make_cog(services)
    interaction = fake_interaction(ALICE)
    await cog.remember.callback(cog, interaction, "Alice est allergique aux noix")
    (memory,) = await store.list(str(ALICE))
    assert texts(interaction) == [f"Remembered as #{memory.id}."]
    assert (memory.text, memory.story_id, memory.place) == (
        "Alice est allergique aux noix",
        str(CHANNEL_ID),
        str(GUILD_ID),
    )
    assert await store.list(str(BOB)) == []

    in_dm = fake_interaction(ALICE, guild_id=None, channel_id=31)
    await cog.remember.callback(cog, in_dm, "Alice a un chat")
    dm_memory = (await store.list(str(ALICE)))[-1]
    assert dm_memory.place == "dm"


@pytest.mark.parametrize("settings_overrides", [{"blocked_user_ids": [ALICE]}])
async def test_a_blocked_user_cannot_add_memories(services_with: Services, llm_server: FakeLLMServer, store) -> None:
    cog = make_cog(services_with)
    interaction = fake_interaction(ALICE)
    await cog.remember.callback(cog, interaction, "Alice aime le spam")
    assert texts(interaction)[0].startswith("Not remembered")
    assert await store.list(str(ALICE)) == []


async def test_remember_this_only_for_ones_own_message(services: Services, llm_server: FakeLLMServer, store) -> None:
    cog = make_cog(services)
    channel = fake_channel()
    bobs = fake_message("Bob déteste les lundis", author=fake_user(BOB, "Bob"), channel=channel)
    alice = fake_interaction(ALICE)
    await cog.remember_this(alice, bobs)
    assert "not yours" in texts(alice)[0] and all_ephemeral(alice)
    assert await store.list(str(ALICE)) == []
    assert await store.list(str(BOB)) == []

    own = fake_message("Je pars à Lisbonne en mai", author=fake_user(ALICE, "Alice"), channel=channel)
    alice = fake_interaction(ALICE)
    await cog.remember_this(alice, own)
    (memory,) = await store.list(str(ALICE))
    assert texts(alice) == [f"Remembered as #{memory.id}."]
    assert (memory.text, memory.source) == ("Je pars à Lisbonne en mai", own.jump_url)


async def test_autocomplete_offers_only_the_invokers_memories(services: Services, llm_server: FakeLLMServer) -> None:
    cog = make_cog(services)
    alices = [await remember(services, ALICE, f"Alice aime le vélo numéro {n}") for n in range(30)]
    await remember(services, BOB, "Bob aime le vélo aussi")
    await services.engine.memories.forget(str(BOB), await remember(services, BOB, "Bob vélo archivé"))

    choices = await cog.memory_id_autocomplete(fake_interaction(ALICE), "vélo")
    assert len(choices) == 25
    assert {c.value for c in choices} <= set(alices)
    assert all(len(c.name) <= 100 and c.name.startswith(f"#{c.value} ") for c in choices)

    narrowed = await cog.memory_id_autocomplete(fake_interaction(ALICE), "numéro 7")
    assert [c.value for c in narrowed] == [alices[7]]
    assert await cog.memory_id_autocomplete(fake_interaction(ALICE), "Bob") == []
    assert await cog.history_id_autocomplete(fake_interaction(ALICE), "") == []
    assert len(await cog.history_id_autocomplete(fake_interaction(BOB), "vélo")) == 1


async def test_memories_are_paginated_and_only_the_invoker_turns_pages(
    services: Services, llm_server: FakeLLMServer
) -> None:
    cog = make_cog(services)
    for n in range(25):
        await remember(services, ALICE, f"Alice souvenir {n}")
    alice = fake_interaction(ALICE)
    await cog.memories.callback(cog, alice)
    ((first_page, kwargs),) = alice.answers
    view = kwargs["view"]
    assert isinstance(view, PageView) and kwargs["ephemeral"] is True
    assert first_page.startswith("Memories 1–10 of 25")
    assert view.origin is alice
    assert view.previous_page.disabled and not view.next_page.disabled

    bob = pressing(fake_interaction(BOB), view.next_page, cog.bot)
    assert await view.interaction_check(bob) is False
    await refuse_foreign(bob)
    assert texts(bob) == [NOT_YOURS] and all_ephemeral(bob)
    assert view.index == 0

    for _ in range(2):  # each press is an interaction of its own
        press = pressing(fake_interaction(ALICE), view.next_page, cog.bot)
        assert await view.interaction_check(press) is True
        await view.next_page.callback(press)
    content = press.response.edit_message.await_args.kwargs["content"]
    assert content.startswith("Memories 21–25 of 25")
    assert view.next_page.disabled and not view.previous_page.disabled


async def test_memories_by_type(services: Services, llm_server: FakeLLMServer) -> None:
    cog = make_cog(services)
    await services.engine.memories.remember(
        str(ALICE), "Alice aime le thé", story_id="s", place="p", type_="preference"
    )
    await remember(services, ALICE, "Alice vit à Lyon")
    interaction = fake_interaction(ALICE)
    await cog.memories.callback(cog, interaction, app_commands.Choice(name="preference", value="preference"))
    (page,) = texts(interaction)
    assert "Alice aime le thé" in page and "Lyon" not in page


async def test_paginator_timeout_disables_buttons_even_when_the_message_is_gone(
    services: Services, llm_server: FakeLLMServer
) -> None:
    view = PageView(ALICE, ["one", "two"])
    view.origin = fake_interaction(ALICE)
    await view.on_timeout()
    assert view.previous_page.disabled and view.next_page.disabled
    view.origin.edit_original_response.assert_awaited_once_with(view=view)

    gone = PageView(ALICE, ["one", "two"])
    gone.origin = fake_interaction(ALICE)
    gone.origin.edit_original_response.side_effect = not_found()
    await gone.on_timeout()  # does not raise


async def test_erase_me_asks_first_and_only_the_invoker_confirms(
    services: Services, llm_server: FakeLLMServer, store
) -> None:
    cog = make_cog(services)
    await remember(services, ALICE, "Alice aime le vélo")
    bobs = await remember(services, BOB, "Bob joue du jazz")

    alice = fake_interaction(ALICE)
    await cog.erase_me.callback(cog, alice)
    ((question, kwargs),) = alice.answers
    view = kwargs["view"]
    assert isinstance(view, EraseConfirm) and "for real" in question
    assert len(await store.list(str(ALICE))) == 1  # nothing erased by asking

    bob = pressing(fake_interaction(BOB), view.confirm, cog.bot)
    assert await view.interaction_check(bob) is False
    await refuse_foreign(bob)
    assert texts(bob) == [NOT_YOURS]

    # Cancel, then a timeout: nothing erased.
    cancel = fake_interaction(ALICE)
    await view.cancel.callback(cancel)
    cancel.response.edit_message.assert_awaited_once_with(content="Nothing was erased.", view=None)
    timed_out = EraseConfirm(services.engine, ALICE)
    timed_out.origin = fake_interaction(ALICE)
    timed_out.origin.edit_original_response.side_effect = not_found()
    await timed_out.on_timeout()
    assert len(await store.list(str(ALICE))) == 1

    confirm_view = EraseConfirm(services.engine, ALICE)
    press = fake_interaction(ALICE)
    await confirm_view.confirm.callback(press)
    assert await store.list(str(ALICE)) == []
    press.edit_original_response.assert_awaited_once_with(content="Erased: 1 memory and 0 archived versions.")
    assert (await store.get(str(BOB), bobs)) is not None


async def test_export_is_an_ephemeral_json_file_of_the_invokers_data(
    services: Services, llm_server: FakeLLMServer
) -> None:
    cog = make_cog(services)
    await remember(services, ALICE, "Alice aime le vélo")
    await remember(services, BOB, "Bob joue du jazz")
    interaction = fake_interaction(ALICE)
    await cog.export.callback(cog, interaction)
    # Discord shows a deferred answer as the defer said: the followup's flag does not change it.
    assert [d.get("ephemeral") for d in interaction.deferrals] == [True]
    ((content, kwargs),) = interaction.answers
    assert kwargs["ephemeral"] is True and content.startswith("Everything I store about you: 1 memory,")
    file: discord.File = kwargs["file"]
    assert file.filename == f"echo-export-{ALICE}.json"
    data = json.loads(file.fp.read().decode("utf-8"))
    assert data["user_id"] == str(ALICE)
    assert [m["text"] for m in data["memories"]] == ["Alice aime le vélo"]


async def test_share_switch(services: Services, llm_server: FakeLLMServer) -> None:
    cog = make_cog(services)
    on = fake_interaction(ALICE)
    await cog.share.callback(cog, on, app_commands.Choice(name="on", value="on"))
    assert texts(on) == ["Sharing across places is now on."]
    assert await services.engine.privacy.sharing(str(ALICE)) is True
    assert await services.engine.privacy.sharing(str(BOB)) is False
    status = fake_interaction(ALICE)
    await cog.share.callback(cog, status)
    assert texts(status) == ["Sharing across places is on. Usage: /share on|off"]


async def test_why_of_this_channel_long_answer_is_split_into_ephemeral_followups(
    services: Services, llm_server: FakeLLMServer
) -> None:
    cog = make_cog(services)
    elsewhere = fake_interaction(ALICE)
    await cog.why.callback(cog, elsewhere)
    assert texts(elsewhere)[0].startswith("No turn of yours in this channel yet")

    # Named by letters, not "numéro n": thirty texts differing by a number are one series, and a
    # series takes only its share of the 24 slots.
    for n in range(30):
        await remember(
            services, ALICE, f"Souvenir {chr(97 + n % 26) * (1 + n // 26)} d'Alice, " + "avec beaucoup de détails " * 5
        )
    await services.engine.conversation.turn(
        Incoming(
            user_id=str(ALICE),
            user_name="Alice",
            text="Tu te souviens ?",
            story_id=str(CHANNEL_ID),
            place=str(GUILD_ID),
        )
    )
    interaction = fake_interaction(ALICE)
    await cog.why.callback(cog, interaction)
    parts = texts(interaction)
    assert len(parts) >= 2 and all(len(p) <= DISCORD_LIMIT for p in parts)
    assert parts[0].startswith("Last turn") and "Tu te souviens ?" in parts[0]
    assert all_ephemeral(interaction)
    interaction.response.send_message.assert_awaited_once()
    assert interaction.followup.send.await_count == len(parts) - 1

    other_channel = fake_interaction(ALICE, channel_id=CHANNEL_ID + 1)
    await cog.why.callback(cog, other_channel)
    assert texts(other_channel)[0].startswith("No turn of yours in this channel yet")


async def test_a_failing_remember_this_menu_is_reported_to_the_user(
    services: Services,
    llm_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cog = make_cog(services)
    menu = cog.remember_menu
    broken = RuntimeError("database is locked")
    monkeypatch.setattr(services.engine.memories, "remember", AsyncMock(side_effect=broken))
    own = fake_message("Je joue du piano", author=fake_user(ALICE, "Alice"), channel=fake_channel())
    interaction = fake_interaction(ALICE)

    # What the command tree does with a context menu: run it, and hand what it raised, wrapped,
    # to the menu's own error handler (a menu built from a method has no cog to report to).
    with pytest.raises(RuntimeError):
        await menu.callback(interaction, own)
    assert menu.on_error is not None
    with caplog.at_level(logging.ERROR, logger="cogs.utils.views"):
        await menu.on_error(interaction, app_commands.CommandInvokeError(menu, broken))

    assert texts(interaction) == [FAILED] and all_ephemeral(interaction)
    (record,) = caplog.records
    assert "Remember this" in record.getMessage() and record.exc_info[1].original is broken


async def test_a_failing_erase_button_is_reported_instead_of_staying_on_erasing(
    services: Services,
    llm_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = RuntimeError("disk full")
    monkeypatch.setattr(services.engine.privacy, "erase", AsyncMock(side_effect=broken))
    view = EraseConfirm(services.engine, ALICE)
    press = fake_interaction(ALICE)

    # What a view does when a button's callback raises: it calls on_error(interaction, error, item).
    with pytest.raises(RuntimeError):
        await view.confirm.callback(press)
    with caplog.at_level(logging.ERROR, logger="cogs.utils.views"):
        await view.on_error(press, broken, view.confirm)

    press.response.edit_message.assert_awaited_once_with(content="Erasing…", view=None)
    assert texts(press) == [FAILED] and all_ephemeral(press)
    press.followup.send.assert_awaited_once()  # the response was the "Erasing…" edit
    (record,) = caplog.records
    assert "Erase everything" in record.getMessage() and record.exc_info[1] is broken


async def test_a_failure_report_that_cannot_be_sent_is_only_logged(
    services: Services, llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    view = PageView(ALICE, ["one", "two"])
    press = fake_interaction(ALICE)
    press.response.send_message.side_effect = not_found()  # the interaction token expired
    with caplog.at_level(logging.ERROR, logger="cogs.utils.views"):
        await view.on_error(press, RuntimeError("boom"), view.next_page)  # does not raise
    assert [(r.name, r.levelno) for r in caplog.records] == [("cogs.utils.views", logging.ERROR)]


async def test_a_storage_failure_is_told_as_such_and_logged_by_the_database_only(
    services: Services, llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    cog = make_cog(services)
    interaction = fake_interaction(ALICE)
    full = StorageError("Cannot write to the database: the disk is full", reason="the disk is full")
    with caplog.at_level(logging.ERROR, logger="cogs.utils.views"):
        await cog.cog_app_command_error(interaction, app_commands.CommandInvokeError(cog.remember, full))
    assert texts(interaction) == [storage_failed()] and all_ephemeral(interaction)
    assert [r for r in caplog.records if r.name == "cogs.utils.views"] == []
