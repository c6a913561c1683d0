"""Who may use a component or a modal, as Discord sees it: the real bot process against the fake
Discord. Another person's press, pick or form submission, or one with a forged custom id, is
refused privately; no model is called and nothing is written. Autocomplete shows only the
caller's own memories."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest

from cogs.bot import EXTENSIONS
from cogs.utils.views import OwnerGate
from tests.discord_e2e.conftest import EchoProcess, Scene, StartEcho
from tests.discord_e2e.test_swipes_and_memory import (
    CAT,
    CHANNEL_MESSAGE,
    MODAL,
    alice_tells_about_the_cat,
    bot_messages,
    button,
    buttons,
    callback,
    query,
    script,
    until,
)
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.discord.rest import EPHEMERAL
from tests.fakes.discord.state import Channel, Interaction, User
from tests.fakes.llm_server import FakeLLMServer, LLMRequest

AUTOCOMPLETE_RESULT = 8
# Every class the bot process registers, as it loads its extensions.
for extension in EXTENSIONS:
    importlib.import_module(extension)


def learns_the_cat(request: LLMRequest) -> dict[str, Any]:
    return {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]} if "Pixel" in request.last_user else {}


def alices_memories(echo: EchoProcess, alice: User = ALICE) -> list[tuple[Any, ...]]:
    return query(echo, "SELECT id, text FROM memories WHERE user_id = ? ORDER BY id", (str(alice.id),))


def chats(llm_server: FakeLLMServer) -> int:
    return len(llm_server.chats)


async def refused(discord: FakeDiscord, interaction: Interaction) -> str:
    """The one answer to `interaction`: a private message, not an update, a modal or a deferral."""
    answer = await callback(discord, interaction)
    assert answer["type"] == CHANNEL_MESSAGE, answer
    assert answer["data"]["flags"] & EPHEMERAL, answer
    return str(answer["data"]["content"])


async def alice_opens_the_edit_form(
    echo: EchoProcess, discord: FakeDiscord, channel: Channel | None = None, alice: User = ALICE
) -> tuple[int, dict[str, Any]]:
    """Alice's memory of the cat, and the modal its receipt's Edit button opened for her (in
    `channel`, #general unless given)."""
    reply = await alice_tells_about_the_cat(discord, channel, alice)
    ((memory_id, _),) = alices_memories(echo, alice)
    press = await discord.press_button(alice, reply, button(reply, "🧠")["custom_id"])
    await callback(discord, press)
    assert press.original is not None
    edit = await discord.press_button(alice, press.original, button(press.original, "Edit")["custom_id"])
    modal = await callback(discord, edit)
    assert modal["type"] == MODAL
    return memory_id, modal["data"]


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_another_person_cannot_submit_someones_memory_edit_form(scene: Scene) -> None:
    echo, fake_discord, general, alice, bob = scene.echo, scene.fake_discord, scene.channel, scene.alice, scene.bob
    script(scene.llm_server, ["Pixel !"], learns_the_cat)
    memory_id, modal = await alice_opens_the_edit_form(echo, fake_discord, general, alice)
    (field,) = [c for row in modal["components"] for c in row["components"]]

    # While Alice's form is open, Bob submits one with the same custom id.
    forged = await fake_discord.submit_modal(bob, general, modal["custom_id"], {field["custom_id"]: "Bob was here."})
    assert "belong to" in await refused(fake_discord, forged)
    assert alices_memories(echo, alice) == [(memory_id, CAT)]
    people = (str(alice.id), str(bob.id))
    assert query(echo, "SELECT COUNT(*) FROM memory_history WHERE user_id IN (?, ?)", people) == [(0,)]

    # Alice's own submission still goes through.
    submitted = await fake_discord.submit_modal(
        alice, general, modal["custom_id"], {field["custom_id"]: "L'utilisateur a deux chats."}
    )
    assert "Edited" in (await callback(fake_discord, submitted))["data"]["content"]
    assert alices_memories(echo, alice) == [(memory_id, "L'utilisateur a deux chats.")]


def registered(custom_id: str) -> type:
    """The class of the bot that makes `custom_id` (from the bot's own registry)."""
    (cls,) = [c for pattern, c in OwnerGate.registry.items() if pattern.fullmatch(custom_id)]
    return cls


async def test_every_component_and_modal_the_bot_registers_refuses_another_person(scene: Scene) -> None:
    """One press, pick or submission by Bob on each of Alice's components and forms, all of
    them: the table is the bot's registry, so a new one without its row fails here."""
    echo, fake_discord, llm_server, general = scene.echo, scene.fake_discord, scene.llm_server, scene.channel
    alice, bob = scene.alice, scene.bob
    script(llm_server, ["Pixel !", "De rien."], learns_the_cat)
    tried: set[type] = set()

    async def bob_is_refused(interaction: Interaction, custom_id: str) -> str:
        tried.add(registered(custom_id))
        return await refused(fake_discord, interaction)

    await fake_discord.user_says(alice, general, "j'ai un chat qui s'appelle Pixel", mention_bot=True)
    first = (await until(lambda: [m for m in bot_messages(fake_discord, general) if buttons(m)]))[0]
    for label in ("◀", "▶", "🔄"):
        custom_id = button(first, label)["custom_id"]
        press = await fake_discord.press_button(bob, first, custom_id)
        assert "this answer was for" in await bob_is_refused(press, custom_id)
    assert chats(llm_server) == 1
    await fake_discord.user_says(alice, general, "merci", mention_bot=True)
    await until(lambda: [b["label"] for b in buttons(first)] == ["🧠 1"])
    await until(lambda: len([m for m in bot_messages(fake_discord, general) if buttons(m)]) == 2)
    ((memory_id, _),) = alices_memories(echo, alice)
    calls = chats(llm_server)

    receipt = button(first, "🧠")["custom_id"]
    assert CAT not in await bob_is_refused(await fake_discord.press_button(bob, first, receipt), receipt)
    shown = await fake_discord.press_button(alice, first, receipt)
    await callback(fake_discord, shown)
    assert shown.original is not None
    for label in ("Forget", "Edit"):
        custom_id = button(shown.original, label)["custom_id"]
        await bob_is_refused(await fake_discord.press_button(bob, shown.original, custom_id), custom_id)
    edit = await fake_discord.press_button(alice, shown.original, button(shown.original, "Edit")["custom_id"])
    modal = (await callback(fake_discord, edit))["data"]
    (field,) = [c for row in modal["components"] for c in row["components"]]
    submitted = await fake_discord.submit_modal(bob, general, modal["custom_id"], {field["custom_id"]: "Bob was here."})
    await bob_is_refused(submitted, modal["custom_id"])

    listing = await fake_discord.run_command(alice, general, "memories")
    await callback(fake_discord, listing)
    page = listing.original
    assert page is not None
    for component in buttons(page):
        if component["type"] == 3:
            pick = await fake_discord.choose(bob, page, component["custom_id"], [str(memory_id)])
        else:
            pick = await fake_discord.press_button(bob, page, component["custom_id"])
        await bob_is_refused(pick, component["custom_id"])

    erase = await fake_discord.run_command(alice, general, "erase-me")
    await callback(fake_discord, erase)
    assert erase.original is not None
    for component in buttons(erase.original):
        await bob_is_refused(
            await fake_discord.press_button(bob, erase.original, component["custom_id"]), component["custom_id"]
        )

    assert tried == set(OwnerGate.registry.values())
    assert alices_memories(echo, alice) == [(memory_id, CAT)]
    people = (str(alice.id), str(bob.id))
    assert query(echo, "SELECT COUNT(*) FROM memory_history WHERE user_id IN (?, ?)", people) == [(0,)]
    assert chats(llm_server) == calls


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_forged_custom_ids_are_refused_privately_and_act_on_no_one_elses_data(scene: Scene) -> None:
    """Bob forges the components of a message (Discord would never send such a payload): ids
    naming Alice, ids naming no person or no character, ids no class makes. Each is refused
    privately; one naming Bob himself acts on Bob's own (empty) memory."""
    echo, fake_discord, llm_server, general = scene.echo, scene.fake_discord, scene.llm_server, scene.channel
    alice, bob = scene.alice, scene.bob
    # A forged id may name anyone, or no one: no one's history gets a row during the test.
    history = query(echo, "SELECT COUNT(*) FROM memory_history")
    script(llm_server, ["Pixel !"], learns_the_cat)
    reply = await alice_tells_about_the_cat(fake_discord, general, alice)
    ((memory_id, _),) = alices_memories(echo, alice)
    exchange = re.fullmatch(r"echo:receipt:[0-9]+:([0-9]+)", button(reply, "🧠")["custom_id"])[1]  # type: ignore[index]
    calls = chats(llm_server)
    a, b = alice.id, bob.id
    forged = [
        *(f"echo:{kind}:{a}:{memory_id}" for kind in ("forget", "edit", "edit-memory")),
        *(f"echo:swipe:{action}:{a}:{exchange}" for action in ("prev", "next", "regen")),
        f"echo:receipt:{a}:{exchange}",
        f"echo:pages:{a}:next",
        f"echo:erase:{a}:confirm",
        f"echo:forget:{a}@nobody:{memory_id}",
        f"echo:forget:{b}@{a}:{memory_id}",
        f"echo:forget:{a}:{b}:{memory_id}",
        f"echo:forget:-{a}:{memory_id}",
        f"echo:forget::{memory_id}",
        f"echo:forget:{a} :{memory_id}",
        f"echo:forget:{'١٢٣'}:{memory_id}",
        f"echo:forget:{a}:{memory_id}" + "0" * 100,
        "echo:count:1",
        "",
        "x" * 100,
    ]
    for custom_id in forged:
        kind = 5 if custom_id.startswith("echo:edit-memory:") else 3
        message = dict(
            reply,
            components=[{"type": 1, "components": [{"type": 2, "style": 2, "label": "x", "custom_id": custom_id}]}],
        )
        if kind == 5:
            interaction = await fake_discord.submit_modal(bob, general, custom_id, {"text": "Bob was here."})
        else:
            interaction = await fake_discord.press_button(bob, message, custom_id)
        await refused(fake_discord, interaction)
    # Bob's own key on Alice's memory id, on a message that has no such button: refused too.
    own = f"echo:forget:{b}:{memory_id}"
    await refused(fake_discord, await fake_discord.press_button(bob, reply, own))
    # On a message that has it (forged): the engine, scoped by Bob's key, knows no such memory.
    message = dict(
        reply, components=[{"type": 1, "components": [{"type": 2, "style": 2, "label": "x", "custom_id": own}]}]
    )
    answer = await callback(fake_discord, await fake_discord.press_button(bob, message, own))
    assert answer["data"]["flags"] & EPHEMERAL and "no longer in my memory" in answer["data"]["content"]
    form = await fake_discord.submit_modal(bob, general, f"echo:edit-memory:{b}:{memory_id}", {"text": "Bob."})
    answer = await callback(fake_discord, form)
    assert answer["data"]["flags"] & EPHEMERAL and "Edited" not in answer["data"]["content"]

    assert alices_memories(echo, alice) == [(memory_id, CAT)]
    assert query(echo, "SELECT COUNT(*) FROM memory_history") == history
    assert chats(llm_server) == calls


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
async def test_alices_own_components_with_ids_past_a_row_s_range_answer_not_there(scene: Scene) -> None:
    """Alice's own key on ids no row can have (20 nines could not even be bound: OverflowError):
    each button and the edit form answer privately as for any id that is not there; nothing
    fails, nothing is logged as an error, nothing is written, no model is called."""
    echo, fake_discord, llm_server, general, alice = (
        scene.echo,
        scene.fake_discord,
        scene.llm_server,
        scene.channel,
        scene.alice,
    )
    script(llm_server, ["Pixel !"], learns_the_cat)
    reply = await alice_tells_about_the_cat(fake_discord, general, alice)
    ((memory_id, _),) = alices_memories(echo, alice)
    history = query(echo, "SELECT COUNT(*) FROM memory_history")
    log_start, calls = echo.log_size(), chats(llm_server)
    a, huge = alice.id, "9" * 20
    ids = [
        *(f"echo:swipe:{action}:{a}:{huge}" for action in ("prev", "next", "regen")),
        f"echo:receipt:{a}:{huge}", f"echo:forget:{a}:{huge}", f"echo:edit:{a}:{huge}", f"echo:forget:{a}:{2**63}",
    ]  # fmt: skip
    answers = []
    for custom_id in ids:
        message = dict(
            reply,
            components=[{"type": 1, "components": [{"type": 2, "style": 2, "label": "x", "custom_id": custom_id}]}],
        )
        answers.append(await callback(fake_discord, await fake_discord.press_button(alice, message, custom_id)))
    form = await fake_discord.submit_modal(
        alice, general, f"echo:edit-memory:{a}:{huge}", {"text": "Alice a un chien."}
    )
    answers.append(await callback(fake_discord, form))
    for custom_id, answer in zip([*ids, "edit form"], answers, strict=True):
        content = str(answer.get("data", {}).get("content", ""))
        assert "Something went wrong" not in content, (custom_id, answer)
    log = echo.log(log_start)
    assert "OverflowError" not in log and "Traceback" not in log, log[-3000:]
    assert alices_memories(echo, alice) == [(memory_id, CAT)]
    assert query(echo, "SELECT COUNT(*) FROM memory_history") == history
    assert chats(llm_server) == calls


async def test_autocomplete_shows_only_the_callers_own_memories(scene: Scene) -> None:
    fake_discord, channel = scene.fake_discord, scene.channel
    for user, text in ((scene.alice, "J'ai un chat."), (scene.bob, "J'ai un chien.")):
        remember = await fake_discord.run_command(
            user, channel, "remember", [{"name": "text", "type": 3, "value": text}]
        )
        await callback(fake_discord, remember)
    for user, own, other in ((scene.alice, "chat", "chien"), (scene.bob, "chien", "chat")):
        for command, option in (("forget", "id"), ("pin", "id"), ("restore", "history_id")):
            typed = await fake_discord.autocomplete(
                user, channel, command, [{"name": option, "type": 4, "value": "", "focused": True}]
            )
            answer = await callback(fake_discord, typed)
            assert answer["type"] == AUTOCOMPLETE_RESULT
            names = " ".join(c["name"] for c in answer["data"]["choices"])
            assert other not in names
            assert (own in names) == (command != "restore")  # nothing archived yet


async def test_an_edit_form_open_across_a_restart_is_not_lost(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    """Nothing of the form is kept in the process: its custom id says whose memory it edits."""
    echo = await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0")
    script(llm_server, ["Pixel !"], learns_the_cat)
    memory_id, modal = await alice_opens_the_edit_form(echo, fake_discord)
    (field,) = [c for row in modal["components"] for c in row["components"]]
    database = echo.database_path
    echo.process.terminate()
    await echo.process.wait()
    await until(lambda: not fake_discord.sessions)
    echo = await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0", DATABASE_PATH=str(database))
    echo.database_path = database

    submitted = await fake_discord.submit_modal(
        ALICE, fake_discord.general, modal["custom_id"], {field["custom_id"]: "L'utilisateur a deux chats."}
    )
    assert "Edited" in (await callback(fake_discord, submitted))["data"]["content"]
    assert alices_memories(echo) == [(memory_id, "L'utilisateur a deux chats.")]
