"""Who may use a component or a modal, as Discord sees it: the real bot process against the fake
Discord. Another person's press, pick or form submission, or one with a forged custom id, is
refused privately; no model is called and nothing is written. Autocomplete shows only the
caller's own memories."""

from __future__ import annotations

import re
from typing import Any

from tests.discord_e2e.conftest import EchoProcess, StartEcho
from tests.discord_e2e.test_swipes_and_memory import (
    CAT,
    CHANNEL_MESSAGE,
    MODAL,
    bot_messages,
    button,
    buttons,
    callback,
    query,
    script,
    until,
)
from tests.fakes.discord import ALICE, BOB, FakeDiscord
from tests.fakes.discord.rest import EPHEMERAL
from tests.fakes.discord.state import Interaction
from tests.fakes.llm_server import FakeLLMServer, LLMRequest

AUTOCOMPLETE_RESULT = 8


def learns_the_cat(request: LLMRequest) -> dict[str, Any]:
    return {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]} if "Pixel" in request.last_user else {}


def alices_memories(echo: EchoProcess) -> list[tuple[Any, ...]]:
    return query(echo, "SELECT id, text FROM memories WHERE user_id = ? ORDER BY id", (str(ALICE.id),))


def chats(llm_server: FakeLLMServer) -> int:
    return len(llm_server.chats)


async def refused(discord: FakeDiscord, interaction: Interaction) -> str:
    """The one answer to `interaction`: a private message, not an update, a modal or a deferral."""
    answer = await callback(discord, interaction)
    assert answer["type"] == CHANNEL_MESSAGE, answer
    assert answer["data"]["flags"] & EPHEMERAL, answer
    return str(answer["data"]["content"])


async def alice_opens_the_edit_form(echo: EchoProcess, discord: FakeDiscord) -> tuple[int, dict[str, Any]]:
    """Alice's memory of the cat, and the modal its receipt's Edit button opened for her."""
    await discord.user_says(ALICE, discord.general, "j'ai un chat qui s'appelle Pixel", mention_bot=True)
    reply = (await until(lambda: [m for m in bot_messages(discord) if buttons(m)]))[0]
    ((memory_id, _),) = alices_memories(echo)
    press = await discord.press_button(ALICE, reply, button(reply, "🧠")["custom_id"])
    await callback(discord, press)
    assert press.original is not None
    edit = await discord.press_button(ALICE, press.original, button(press.original, "Edit")["custom_id"])
    modal = await callback(discord, edit)
    assert modal["type"] == MODAL
    return memory_id, modal["data"]


async def test_another_person_cannot_submit_someones_memory_edit_form(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0")
    script(llm_server, ["Pixel !"], learns_the_cat)
    memory_id, modal = await alice_opens_the_edit_form(echo, fake_discord)
    (field,) = [c for row in modal["components"] for c in row["components"]]

    # While Alice's form is open, Bob submits one with the same custom id.
    forged = await fake_discord.submit_modal(BOB, fake_discord.general, modal["custom_id"], {field["custom_id"]: "Bob was here."})
    assert "belong to" in await refused(fake_discord, forged)
    assert alices_memories(echo) == [(memory_id, CAT)]
    assert query(echo, "SELECT COUNT(*) FROM memory_history") == [(0,)]

    # Alice's own submission still goes through.
    submitted = await fake_discord.submit_modal(
        ALICE, fake_discord.general, modal["custom_id"], {field["custom_id"]: "L'utilisateur a deux chats."}
    )
    assert "Edited" in (await callback(fake_discord, submitted))["data"]["content"]
    assert alices_memories(echo) == [(memory_id, "L'utilisateur a deux chats.")]
