"""A consolidated series as a Discord user sees it: the real bot process runs the consolidation
job against the fake Discord and the scripted LLM; /history shows what was consolidated into
what, and one /restore brings the whole series back."""

from __future__ import annotations

import json

from tests.discord_e2e.conftest import StartEcho
from tests.discord_e2e.test_swipes_and_memory import bot_messages, callback, query, until
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.discord.rest import EPHEMERAL
from tests.fakes.llm_server import FakeLLMServer, LLMRequest

YEARS = (2016, 2017, 2019)
CONSOLIDATED = "L'utilisateur a visité Trieste en 2016, 2017 et 2019."


async def test_history_shows_a_consolidation_and_one_restore_brings_the_series_back(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    def answer(request: LLMRequest) -> str:
        if request.json_schema is None:
            return "Quel beau voyage !"
        if "The series (" in request.last_user:
            return json.dumps({"text": CONSOLIDATED, "confidence": 0.95})
        year = next(y for y in YEARS if str(y) in request.last_user.rsplit("<message", 1)[-1])
        return json.dumps(
            {
                "memories": [
                    {"text": f"L'utilisateur a visité Trieste en {year}.", "type": "episode", "confidence": 0.95}
                ]
            }
        )

    llm_server.handler = answer
    echo = await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0", CONSOLIDATION_INTERVAL_SECONDS="1")
    for year in YEARS:
        await fake_discord.user_says(ALICE, fake_discord.general, f"J'étais à Trieste en {year}", mention_bot=True)
        answered = YEARS.index(year) + 1
        await until(lambda answered=answered: len(bot_messages(fake_discord)) >= answered)
    user = str(ALICE.id)
    rows = await until(
        lambda: query(echo, "SELECT id, text FROM memories WHERE user_id = ? AND text = ?", (user, CONSOLIDATED))
    )
    ((new_id, _),) = rows
    members = query(
        echo, "SELECT id, memory_id FROM memory_history WHERE user_id = ? AND operation = 'consolidate'", (user,)
    )
    assert len(members) == len(YEARS)
    assert query(echo, "SELECT COUNT(*) FROM memories WHERE user_id = ?", (user,)) == [(1,)]

    history = await fake_discord.run_command(ALICE, fake_discord.general, "history")
    shown = await callback(fake_discord, history)
    assert int(shown["data"].get("flags") or 0) & EPHEMERAL
    content = shown["data"]["content"]
    assert f"consolidated into #{new_id}" in content and CONSOLIDATED in content
    undo = max(h for h, _ in members)  # any member undoes it all; /history names the last archived
    assert f"/restore {undo} undoes it" in content

    restore = await fake_discord.run_command(
        ALICE, fake_discord.general, "restore", [{"name": "history_id", "type": 4, "value": undo}]
    )
    await callback(fake_discord, restore)
    back = sorted(t for (t,) in query(echo, "SELECT text FROM memories WHERE user_id = ?", (user,)))
    assert back == sorted(f"L'utilisateur a visité Trieste en {y}." for y in YEARS)
