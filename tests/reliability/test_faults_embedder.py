"""Embedder faults, over real HTTP: every turn is answered, memory stays within its bound, and a
turn without semantic scores is counted as degraded and moves no memory counter.

The embedding server (tests/fakes/embedding_server.py) speaks Ollama's /api/embed; a refused
connection is a bound port that never listens. The turn's bound is lowered from 5 s to 1 s so
that a hanging server costs the suite seconds, not minutes: the mechanism is the same.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest

from bot.clients.embeddings import Embedder, OllamaEmbedder
from bot.memory.model import NewMemory
from bot.memory.read import recall as recall_module
from bot.memory.read.indexing import Indexer
from tests.builders import make_engine, msg
from tests.fakes.embedding_server import EmbeddingServer

BOUND = 1.0
# Everything in a turn but the embedding: SQLite reads, selection, the local LLM call.
SLACK = 2.0
FAULT_TURNS = 3
HEALTHY_TURNS = 2
USER = "alice"

FACTS = [
    "L'utilisateur est allergique aux arachides.",
    "L'utilisateur habite à Nantes.",
    "L'utilisateur joue du violoncelle le mardi.",
]


class Mended:
    """The engine's embedder: the faulty one until the test mends it (the server is back)."""

    def __init__(self, faulty: Embedder) -> None:
        self.current = faulty

    @property
    def model(self) -> str:
        return self.current.model

    @property
    def dim(self) -> int | None:
        return self.current.dim

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return await self.current.embed_passages(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return await self.current.embed_query(text)

    async def embed_queries(self, texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        return await self.current.embed_queries(texts, background=background)


async def counters(store) -> dict[int, tuple[int, int, int]]:
    return {m.id: (m.times_candidate, m.times_served, m.times_semantic) for m in await store.list(USER)}


@pytest.fixture(params=["hang", "refused", "error", "malformed", "wrong_count", "wrong_dim"])
def fault(request) -> str:
    return request.param


async def test_turns_survive_an_embedder_fault_and_count_as_degraded(
    fault: str, db, http, llm_server, tmp_path, embedding_server: EmbeddingServer, refused_url: str, store, monkeypatch
):
    monkeypatch.setattr(recall_module, "TURN_EMBEDDING_TIMEOUT", BOUND)
    url = refused_url if fault == "refused" else embedding_server.url
    healthy = OllamaEmbedder(http, base_url=embedding_server.url, model="fake-embed")
    embedder = Mended(OllamaEmbedder(http, base_url=url, model="fake-embed"))
    engine = make_engine(db, http, llm_server, tmp_path, embedder=embedder)
    for fact in FACTS:
        await store.add(USER, NewMemory(text=fact, place="guild-1"))
    # Every memory has a vector before the fault: a degraded turn is not "nothing to score".
    assert await Indexer(db, healthy).run_once() == len(FACTS)
    before = await counters(store)

    if fault != "refused":
        embedding_server.mode = fault
    for n in range(FAULT_TURNS):
        started = time.monotonic()
        result = await engine.conversation.turn(msg(f"Tu te souviens de mes arachides ? ({n})", user=USER))
        assert time.monotonic() - started < BOUND + SLACK
        assert result.reply is not None
        assert result.selection is not None and result.selection.degraded
    await engine.conversation.wait_recorded(USER)
    assert await counters(store) == before
    stats = await engine.memories.stats(USER)
    assert (stats.turns, stats.degraded_turns) == (FAULT_TURNS, FAULT_TURNS)

    # The server comes back: the same engine scores again and counters move, so the check above
    # would have seen a degraded turn that counted.
    embedding_server.mode = "normal"
    embedder.current = healthy
    for n in range(HEALTHY_TURNS):
        result = await engine.conversation.turn(msg(f"Et mon violoncelle ? ({n})", user=USER))
        assert result.selection is not None and not result.selection.degraded
    await engine.conversation.wait_recorded(USER)
    after = await counters(store)
    assert all(after[i][0] == before[i][0] + HEALTHY_TURNS for i in before)
    stats = await engine.memories.stats(USER)
    assert (stats.turns, stats.degraded_turns) == (FAULT_TURNS + HEALTHY_TURNS, FAULT_TURNS)
