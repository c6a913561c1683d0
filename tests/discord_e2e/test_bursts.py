"""A burst (messages a user sends less than BURST_SECONDS apart) as Discord sees it: one answer,
as a reply to the last message, counted once by the rate limit; an exchange that follows the
edits and deletes of each of its messages; and what an erase does to a burst still waiting.
The real bot process against the fake Discord (issue 22, items 4 and 12)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tests.discord_e2e.conftest import StartEcho
from tests.discord_e2e.test_swipes_and_memory import callback, query, script, until
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.llm_server import FakeLLMServer, LLMRequest

FACTS = {
    "Pixel": "L'utilisateur a un chat qui s'appelle Pixel.",
    "violon": "L'utilisateur joue du violon le jeudi.",
    "Lyon": "L'utilisateur habite à Lyon depuis l'été.",
}
SAID = {
    "Pixel": "Mon chat s'appelle Pixel, il dort toute la journée.",
    "violon": "Le jeudi soir je joue du violon.",
    "Lyon": "J'habite à Lyon depuis cet été.",
}


def said_facts(request: LLMRequest) -> dict[str, Any]:
    """A reflection that remembers what the exchange's own words say (not the memories shown)."""
    said = " ".join(re.findall(r"<message [^>]*>\n(.*?)\n</message>", request.last_user, re.DOTALL))
    return {"memories": [{"text": f, "type": "fact", "confidence": 0.95} for w, f in FACTS.items() if w in said]}


def reply_calls(llm_server: FakeLLMServer) -> list[LLMRequest]:
    return [r for r in llm_server.chats if r.json_schema is None]


async def test_eight_quick_messages_are_one_answer_to_the_last_and_count_once(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(BURST_SECONDS="1.5")  # the default rate limit: 6 answers per 30 s
    script(llm_server, [f"réponse {n}" for n in range(1, 9)], lambda r: {})
    channel = fake_discord.general
    said = [await fake_discord.user_says(ALICE, channel, f"message {n}", mention_bot=True) for n in range(1, 9)]
    (answer,) = await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages", timeout=20)
    (asked,) = [r.last_user for r in reply_calls(llm_server)]
    assert asked == "Alice: " + "\n".join(f"message {n}" for n in range(1, 9)), "all eight are read"
    assert str(answer.json["message_reference"]["message_id"]) == said[-1]["id"], "a reply to the last"
    # The window holds one answer: five more fit in it, and nothing was refused.
    for n in range(2, 7):
        await fake_discord.user_says(ALICE, channel, f"encore {n}", mention_bot=True)
        await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages", count=n, timeout=20)
    assert len(reply_calls(llm_server)) == 6
    assert fake_discord.calls_to("PUT", f"/channels/{channel.id}/messages/") == [], "no ⏳ anywhere"


async def test_an_edit_or_a_delete_of_any_message_of_a_burst_reaches_its_exchange(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(BURST_SECONDS="1.5", SETTLE_SECONDS="0")
    script(llm_server, ["Noté."], said_facts)
    channel, alice = fake_discord.general, str(ALICE.id)
    said = [
        await fake_discord.user_says(ALICE, channel, SAID[w], mention_bot=True) for w in ("Pixel", "violon", "Lyon")
    ]

    def transcript() -> list[tuple[str]]:
        return query(echo, "SELECT user_message FROM exchanges WHERE user_id = ?", (alice,))

    def live() -> set[str]:
        return {t for (t,) in query(echo, "SELECT text FROM memories WHERE user_id = ?", (alice,))}

    await until(lambda: live() == set(FACTS.values()))
    await fake_discord.user_edits(said[0], "Mon chat s'appelle Biscuit.")
    await until(lambda: transcript() == [("Mon chat s'appelle Biscuit.\n" + SAID["violon"] + "\n" + SAID["Lyon"],)])

    await fake_discord.user_deletes(said[1])
    await until(lambda: transcript() == [("Mon chat s'appelle Biscuit.\n" + SAID["Lyon"],)])
    # What the exchange alone produced is archived; what the messages left say is learnt again.
    await until(lambda: live() == {FACTS["Lyon"]})
    archived = query(echo, "SELECT text FROM memory_history WHERE user_id = ? AND cause = 'message deleted'", (alice,))
    assert (FACTS["violon"],) in archived
    why = await fake_discord.run_command(ALICE, channel, "why")
    shown = (await callback(fake_discord, why))["data"]["content"]
    assert "Biscuit" in shown and "violon" not in shown and "Pixel" not in shown


async def test_a_message_sent_just_before_the_erase_is_confirmed_is_neither_answered_nor_stored(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(BURST_SECONDS="2")
    script(llm_server, ["Noté."], said_facts)
    channel, alice = fake_discord.general, str(ALICE.id)
    await fake_discord.user_says(ALICE, channel, SAID["Pixel"], mention_bot=True)
    ask = await fake_discord.run_command(ALICE, channel, "erase-me")
    await callback(fake_discord, ask)
    confirm = ask.original
    assert confirm is not None
    (erase_id,) = [
        c["custom_id"] for row in confirm["components"] for c in row["components"] if c["label"] == "Erase everything"
    ]
    press = await fake_discord.press_button(ALICE, confirm, erase_id)
    await callback(fake_discord, press)
    await fake_discord.wait_for_call(
        "PATCH", f"/webhooks/{fake_discord.application_id}/{press.token}/messages/@original"
    )
    await asyncio.sleep(4)  # past the burst's 2 s, and a turn's time
    assert reply_calls(llm_server) == [] and llm_server.chats == []
    assert query(echo, "SELECT COUNT(*) FROM exchanges WHERE user_id = ?", (alice,)) == [(0,)]
    assert query(echo, "SELECT COUNT(*) FROM exchange_messages WHERE user_id = ?", (alice,)) == [(0,)]
    assert query(echo, "SELECT COUNT(*) FROM memories WHERE user_id = ?", (alice,)) == [(0,)]
    assert fake_discord.calls_to("POST", f"/channels/{channel.id}/messages") == []
