"""Storage of the derived indexes over memories: vectors per embedding model, and full-text.

Both are indexes, never truth (docs/design.md, "Principles" 1): anything here can be deleted
and rebuilt from `memories`. A vector is served only while its content hash matches the memory's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import numpy as np

from bot.clients.storage import Connection, Database, Row, Sql, fetch_all, fetch_pages, to_db
from bot.memory.model import OwnerKey, utcnow
from bot.memory.text import content_words, words

log = logging.getLogger(__name__)

# Vectors are stored as little-endian float32, whatever the machine.
VECTOR_DTYPE = np.dtype("<f4")
# A 2000-character query has a few hundred words; the best-ranked memories are found with far
# fewer terms, and each term is one more posting list for FTS5 to merge.
LEXICAL_MAX_TERMS = 32

# Models already reported as holding vectors of several dimensions: said once, not every turn.
_MIXED_DIMENSIONS_REPORTED: set[str] = set()


class StaleMemory(NamedTuple):
    id: int
    user_id: OwnerKey
    text: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class VectorRow:
    memory_id: int
    user_id: OwnerKey
    model: str
    # The hash of the text the vector was computed from, as read with that text.
    content_hash: str
    vector: np.ndarray


def _active_after(now: datetime | None) -> str:
    # Expired dated facts stay in the database but are not served, so they get no score either.
    return to_db(now or utcnow()) or ""


async def load_user_matrix(
    db: Database, user_id: OwnerKey, model: str, *, now: datetime | None = None
) -> tuple[list[int], np.ndarray]:
    """Ids and (n, d) float32 vectors of the user's active memories with a fresh vector.

    A memory whose text changed since it was embedded (hash mismatch) is left out until the
    indexer catches up. No vector at all: ([], an array of shape (0, 0)).
    """
    rows = await fetch_all(
        db.reader,
        """
        SELECT v.memory_id, v.dim, v.vector, v.embedded_at
        FROM memory_vectors AS v
        JOIN memories AS m ON m.id = v.memory_id AND m.user_id = v.user_id
        WHERE v.user_id = ? AND v.model = ?
          AND v.content_hash = m.content_hash
          AND (m.expires_at IS NULL OR m.expires_at > ?)
        ORDER BY v.memory_id
        """,
        (user_id, model, _active_after(now)),
    )
    if not rows:
        return [], np.empty((0, 0), dtype=np.float32)
    # One model name gives one dimension, unless the server behind it was swapped: then only
    # the newest vectors are comparable with today's queries.
    dim = int(max(rows, key=lambda row: row["embedded_at"])["dim"])
    kept = [row for row in rows if row["dim"] == dim]
    if len(kept) < len(rows) and model not in _MIXED_DIMENSIONS_REPORTED:
        _MIXED_DIMENSIONS_REPORTED.add(model)
        log.warning(
            "model %s has vectors of several dimensions; serving the %d-dimension ones "
            "(delete all vectors to re-index)",
            model,
            dim,
        )
    ids = [int(row["memory_id"]) for row in kept]
    matrix = np.frombuffer(b"".join(row["vector"] for row in kept), dtype=VECTOR_DTYPE)
    return ids, matrix.reshape(len(kept), dim).astype(np.float32)


async def vector_rows(conn: Connection, user_id: OwnerKey, model: str, among: Sequence[int] | None = None) -> list[Row]:
    """(memory_id, content_hash, dim, vector, embedded_at) of the user's vectors for `model`, stale
    ones included (the caller compares hashes): those of `among` when given, else all of them,
    in one step."""
    if among is None:
        return await fetch_all(conn, _VECTORS, (user_id, model))
    return await fetch_all(conn, _VECTORS_AMONG, (user_id, model, json.dumps(list(map(int, among)))))


def vector_pages(conn: Connection, user_id: OwnerKey, model: str, size: int) -> AsyncGenerator[list[Row], None]:
    """All the rows of `vector_rows`, in no particular order, `size` at a time from one
    statement: on a connection of `Database.reading()` only (bot.clients.storage.fetch_pages)."""
    return fetch_pages(conn, _VECTORS, (user_id, model), size)


_VECTORS = (
    "SELECT memory_id, content_hash, dim, vector, embedded_at FROM memory_vectors WHERE user_id = ? AND model = ?"
)
# `+user_id`: the listed vectors by primary key, not every vector of the user through their
# index (350 ms for one changed memory of a person of 100,000; bot/memory/stores/counters.py).
_VECTORS_AMONG = Sql(
    "SELECT memory_id, content_hash, dim, vector, embedded_at FROM memory_vectors "
    "WHERE +user_id = ? AND model = ? AND memory_id IN (SELECT value FROM json_each(?))",
    postgresql="SELECT memory_id, content_hash, dim, vector, embedded_at FROM memory_vectors "
    "WHERE user_id = ? AND model = ? AND memory_id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))::bigint)",
)


async def stale_memories(db: Database, model: str, limit: int, *, now: datetime | None = None) -> list[StaleMemory]:
    """Active memories with no vector for `model`, or one computed from an older text.

    Spans all users by design: this is the indexer's work list, not a read on a user's behalf.
    Newest first, so a fresh memory gets its score before a backlog of old ones.
    """
    rows = await fetch_all(
        db.reader,
        """
        SELECT m.id, m.user_id, m.text, m.content_hash
        FROM memories AS m
        LEFT JOIN memory_vectors AS v ON v.memory_id = m.id AND v.model = ?
        WHERE (v.memory_id IS NULL OR v.content_hash != m.content_hash)
          AND (m.expires_at IS NULL OR m.expires_at > ?)
        ORDER BY m.id DESC
        LIMIT ?
        """,
        (model, _active_after(now), limit),
    )
    return [StaleMemory(int(r["id"]), OwnerKey(r["user_id"]), str(r["text"]), str(r["content_hash"])) for r in rows]


# `+user_id`: the listed memories by primary key, as in _VECTORS_AMONG.
_STALE_AMONG = Sql(
    """
    SELECT m.id, m.user_id, m.text, m.content_hash
    FROM memories AS m
    LEFT JOIN memory_vectors AS v ON v.memory_id = m.id AND v.model = ?
    WHERE +m.user_id = ? AND m.id IN (SELECT value FROM json_each(?))
      AND (v.memory_id IS NULL OR v.content_hash != m.content_hash)
      AND (m.expires_at IS NULL OR m.expires_at > ?)
    ORDER BY m.id
    """,
    postgresql="""
    SELECT m.id, m.user_id, m.text, m.content_hash
    FROM memories AS m
    LEFT JOIN memory_vectors AS v ON v.memory_id = m.id AND v.model = ?
    WHERE m.user_id = ? AND m.id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))::bigint)
      AND (v.memory_id IS NULL OR v.content_hash != m.content_hash)
      AND (m.expires_at IS NULL OR m.expires_at > ?)
    ORDER BY m.id
    """,
)


async def stale_among(
    db: Database, model: str, user_id: OwnerKey, ids: Sequence[int], *, now: datetime | None = None
) -> list[StaleMemory]:
    """Which of these memories of one user (active ones) have no vector for `model`, or one
    computed from an older text: read by id, never by a scan of everyone's memories."""
    if not ids:
        return []
    rows = await fetch_all(
        db.reader, _STALE_AMONG, (model, user_id, json.dumps(list(map(int, ids))), _active_after(now))
    )
    return [StaleMemory(int(r["id"]), OwnerKey(r["user_id"]), str(r["text"]), str(r["content_hash"])) for r in rows]


async def store_vectors(conn: Connection, rows: Iterable[VectorRow], *, now: datetime | None = None) -> int:
    """Insert or replace vectors inside the caller's write transaction. Returns how many landed.

    A memory deleted while its text was being embedded is skipped rather than failing the
    whole batch on the foreign key.
    """
    embedded_at = to_db(now or utcnow())
    stored = 0
    for row in rows:
        vector = np.asarray(row.vector, dtype=VECTOR_DTYPE)
        if vector.ndim != 1 or vector.size == 0:
            raise ValueError(f"memory {row.memory_id}: a vector must be 1-D and non-empty")
        cur = await conn.execute(
            """
            INSERT INTO memory_vectors
                (memory_id, user_id, model, content_hash, dim, vector, embedded_at)
            SELECT id, user_id, ?, ?, ?, ?, ? FROM memories WHERE id = ? AND user_id = ?
            ON CONFLICT (memory_id, model) DO UPDATE SET
                content_hash = excluded.content_hash,
                dim = excluded.dim,
                vector = excluded.vector,
                embedded_at = excluded.embedded_at
            """,
            (
                row.model,
                row.content_hash,
                int(vector.size),
                vector.tobytes(),
                embedded_at,
                row.memory_id,
                row.user_id,
            ),
        )
        stored += cur.rowcount
    return stored


async def delete_all_vectors(db: Database) -> int:
    """Drop every vector of every user and model: they are an index, re-indexing restores them."""
    async with db.write() as conn:
        cur = await conn.execute("DELETE FROM memory_vectors")
        return cur.rowcount


async def delete_vectors_of_other_models(conn: Connection, model: str) -> int:
    """Index maintenance across all users, inside the caller's transaction."""
    cur = await conn.execute("DELETE FROM memory_vectors WHERE model != ?", (model,))
    return cur.rowcount


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression that ORs the text's content words, each one quoted.

    Quoting makes every token a plain string: AND, NEAR, *, ^, quotes and parentheses typed by
    a user can never become query syntax. Empty when the text has no content word.
    """
    keep = content_words(text)
    terms = [w for w in dict.fromkeys(words(text)) if w in keep][:LEXICAL_MAX_TERMS]
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


# The rank is better when lower, as FTS5's bm25. PostgreSQL reads the same FTS5 expression:
# its terms are quoted words (letters, digits and inner hyphens, never a quote), so turning the
# double quotes into single ones and OR into | makes it a tsquery of the same words.
_LEXICAL_MATCHES = Sql(
    """
    SELECT m.id, bm25(memories_fts) AS rank
    FROM memories_fts
    JOIN memories AS m ON m.id = memories_fts.rowid
    WHERE memories_fts MATCH ? AND m.user_id = ?
      AND (m.expires_at IS NULL OR m.expires_at > ?)
      AND (? IS NULL OR m.id IN (SELECT value FROM json_each(?)))
    ORDER BY rank
    LIMIT ?
    """,
    postgresql="""
    SELECT m.id, -ts_rank(m.search, q.query) AS rank
    FROM memories AS m,
         (SELECT to_tsquery('simple', echo_fold(translate(replace(?, ' OR ', ' | '), '"', chr(39)))) AS query) AS q
    WHERE m.search @@ q.query AND m.user_id = ?
      AND (m.expires_at IS NULL OR m.expires_at > ?)
      AND (CAST(? AS TEXT) IS NULL OR m.id IN (SELECT jsonb_array_elements_text(CAST(? AS jsonb))::bigint))
    ORDER BY rank, m.id
    LIMIT ?
    """,
)


async def lexical_matches(
    db: Database,
    user_id: OwnerKey,
    query: str,
    limit: int,
    *,
    now: datetime | None = None,
    among: Sequence[int] | None = None,
) -> dict[int, float]:
    """The user's active memories sharing words with `query`: memory id -> score in [0, 1).

    `among` restricts the search to those memory ids before the `limit` applies: the caller's
    candidates that need a stand-in score, so that the user's other memories (another place,
    another story, already scored) cannot take the places. None searches all the user's
    memories.

    The score is FTS5's bm25 (s >= 0, higher is better) mapped to s / (1 + s): it keeps the
    order and is 0 for no match, but it is not a cosine and not calibrated against one; rank by
    it rather than thresholding it like a cosine.
    """
    expression = fts_query(query)
    if not expression or limit <= 0 or (among is not None and not among):
        return {}
    ids_json = None if among is None else json.dumps(list(map(int, among)))
    # The ids travel as one JSON array, as in bot.memory.stores.counters: one SQL text whatever their
    # number, and no bound-variable limit.
    rows = await fetch_all(
        db.reader, _LEXICAL_MATCHES, (expression, user_id, _active_after(now), ids_json, ids_json, limit)
    )
    out: dict[int, float] = {}
    for row in rows:
        strength = max(0.0, -float(row["rank"]))
        out[int(row["id"])] = strength / (1.0 + strength)
    return out
