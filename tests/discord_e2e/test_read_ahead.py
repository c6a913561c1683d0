"""A burst's message is read in its conversation while the burst waits, not on its turn: the
real bot process against the fake Discord and the scripted embedding server over HTTP, which
records what the bot asks it to embed and in which order (issues 23 and 32)."""

from __future__ import annotations

import asyncio
import time

from tests.discord_e2e.conftest import StartEcho
from tests.discord_e2e.test_swipes_and_memory import script, until
from tests.fakes.discord import ALICE, BOB, FakeDiscord
from tests.fakes.embedding_server import EmbeddingServer
from tests.fakes.llm_server import FakeLLMServer

ALICE_EARLIER = "Je m'étais entraînée toute la semaine pour ce match."
BOB_SAYS = ["Le match de ce soir est reporté à jeudi.", "Il paraît que la salle est inondée."]
ALICE_SAYS = ["Tu crois qu'on pourra jouer quand même ?", "Ou bien ailleurs ?"]


async def test_a_burst_is_read_in_its_conversation_during_its_wait_and_its_turn_embeds_nothing(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer, embedding_server: EmbeddingServer
) -> None:
    await start_echo(
        BURST_SECONDS="1.5",
        EMBEDDINGS="ollama",
        EMBEDDINGS_BASE_URL=embedding_server.url,
        EMBEDDINGS_MODEL="fake-embed",
    )
    script(llm_server, ["Sûrement, on verra jeudi !"], lambda r: {"memories": []})
    channel = fake_discord.general
    await fake_discord.user_says(ALICE, channel, ALICE_EARLIER)  # not addressed to the character
    for line in BOB_SAYS:
        await fake_discord.user_says(BOB, channel, line)
    started = len(embedding_server.requests)

    said_at = time.monotonic()
    await fake_discord.user_says(ALICE, channel, ALICE_SAYS[0], mention_bot=True)
    await asyncio.sleep(0.5)
    await fake_discord.user_says(ALICE, channel, ALICE_SAYS[1], mention_bot=True)  # joins the burst
    await fake_discord.wait_for_call("POST", f"/channels/{channel.id}/messages", timeout=20)
    # Alice's own line, and of Bob's the one her message answers.
    context = [ALICE_EARLIER, BOB_SAYS[-1]]
    first, both = ALICE_SAYS[0], "\n".join(ALICE_SAYS)
    await until(lambda: [both, "\n".join([*context, both])] in [r.body["input"] for r in embedding_server.requests])

    asked = [(r.body["input"], r.at - said_at) for r in embedding_server.requests[started:]]
    assert [texts for texts, _ in asked] == [
        [first, "\n".join([*context, first])],
        [both, "\n".join([*context, both])],
    ]
    (_, ahead_at), (_, again_at) = asked
    assert ahead_at < 1.0, "read as the burst began, not when it closed"
    assert again_at < 2.0, "read again when a message joined, before the burst closed"
