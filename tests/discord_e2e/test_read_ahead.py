"""The conversation's lines are embedded while a burst waits, not on its turn: the real bot
process against the fake Discord and the scripted embedding server over HTTP, which records
what the bot asks it to embed and in which order (issue 23)."""

from __future__ import annotations

import time

from tests.discord_e2e.conftest import StartEcho
from tests.discord_e2e.test_swipes_and_memory import script, until
from tests.fakes.discord import ALICE, BOB, FakeDiscord
from tests.fakes.embedding_server import EmbeddingServer
from tests.fakes.llm_server import FakeLLMServer

BOB_SAYS = ["Le match de ce soir est reporté à jeudi.", "Il paraît que la salle est inondée."]
ALICE_SAYS = "Tu crois qu'on pourra jouer quand même ?"


async def test_others_lines_before_a_burst_are_embedded_during_its_wait_and_its_turn_embeds_only_the_message(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer, embedding_server: EmbeddingServer
) -> None:
    await start_echo(
        BURST_SECONDS="1.5", EMBEDDINGS="ollama", EMBEDDINGS_BASE_URL=embedding_server.url, EMBEDDINGS_MODEL="fake-embed"
    )
    script(llm_server, ["Sûrement, on verra jeudi !"], lambda r: {"memories": []})
    channel = fake_discord.general
    for line in BOB_SAYS:  # not addressed to the character: never a turn, only history
        await fake_discord.user_says(BOB, channel, line)
    started = len(embedding_server.requests)

    said_at = time.monotonic()
    await fake_discord.user_says(ALICE, channel, ALICE_SAYS, mention_bot=True)
    await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages", timeout=20)
    # The reply's own line is embedded after it, for the next turn.
    await until(lambda: any("Sûrement" in " ".join(r.body["input"]) for r in embedding_server.requests[started:]))

    asked = [(r.body["input"], r.at - said_at) for r in embedding_server.requests[started:]]
    inputs = [texts for texts, _ in asked]
    assert inputs == [BOB_SAYS, [ALICE_SAYS], ["Sûrement, on verra jeudi !"]]
    (_, ahead_at), (_, turn_at) = asked[0], asked[1]
    assert ahead_at < 1.0, "read as the burst began, not when it closed"
    assert turn_at >= 1.5, "the turn comes after the burst's wait"
