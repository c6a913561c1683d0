"""Series: memories of one user that say the same thing but for their carrier tokens.

"Alice a visité Trieste en 2017", "… en 2018", "… en 2019" are three facts that dedup keeps
apart on purpose (bot/memory/write/dedup.py caps look-alikes whose carrier tokens differ). Kept apart
for a year they crowd the context: a series is such a group, from SERIES_MIN_MEMBERS members,
and the selection serves it at most SERIES_MAX_SLOTS slots until the consolidation job
(bot/engine/consolidation_worker.py) rewrites it into one memory.

A memory's *frame* is its dedup text with every carrier token (numbers, years, dates, times,
weekdays, months, relative days, seasons, number words) written `#`, a run of them one `#`.
Negations are not set aside ("n'a pas visité Trieste en 2019" is not a visit), nor are names
("Trieste" and "Porto" visits are two series: a consolidation must not pair a city with another
city's years). Members share user, type, scope, story and place (a DM fact never joins a guild
one); pinned memories and memories with an expiry never join (the user chose to hold the first
as they are, the second leave on their own date).

Pure, no I/O. Frames are memoised by text: the background scan and the turns ask for the same
texts again and again.
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from bot.memory.carriers import AMBIGUOUS_MONTHS, SINGLE_CARRIERS, dedup_text
from bot.memory.model import Memory, StoryId
from bot.memory.text import STOPWORDS, words

DEFAULT_MIN_MEMBERS = 3
DEFAULT_MAX_SLOTS = 3
# Rounds of the selection's series step before it trims instead of refilling (each round drops
# at least one memory; a round costs one selection).
MAX_CAP_ROUNDS = 12
# How much deeper than the turn's limit the series step looks, by cosine, for the next members.
PROBE_FACTOR = 8
FRAME_MEMO = 131_072

# Carriers that change what a fact says rather than when or how many: kept in the frame.
_NEGATIONS = frozenset(
    {"pas", "jamais", "rien", "aucun", "aucune", "guère", "sans", "plus", "not", "never", "no",
     "nothing", "none", "nobody", "without", "cannot"}
)  # fmt: skip
_SET_ASIDE = frozenset(w for w in SINGLE_CARRIERS if w not in _NEGATIONS)
# Words of the multi-word carriers ("ce soir", "semaine prochaine", "next week"): a frame that
# differs only by them is still one series.
_PHRASE_WORDS = frozenset({"semaine", "mois", "année", "an", "fois", "week", "month", "year", "aujourd", "hui"})

SeriesKey = tuple[str, str, str | None, str | None, str]


@functools.lru_cache(maxsize=FRAME_MEMO)
def frame(text: str) -> str:
    """The text with its carrier tokens set aside, or "" when it has none (then it is no
    member of any series: two such texts alike are duplicates, dedup's business) or nothing
    but them and grammar."""
    out: list[str] = []
    carried = False
    for token in words(dedup_text(text)):
        if any(c.isdigit() for c in token) or token in _SET_ASIDE or token in AMBIGUOUS_MONTHS:
            carried = True
            if out and out[-1] == "#":
                continue
            out.append("#")
        elif token in _PHRASE_WORDS and out and out[-1] == "#":
            continue
        else:
            out.append(token)
    # Carriers and grammar alone ("m12", "le 3") say nothing two memories could share.
    said = any(w != "#" and w not in STOPWORDS for w in out)
    return " ".join(out) if carried and said else ""


def key_of(
    memory_type: str,
    scope: str,
    story_id: StoryId | None,
    place: str | None,
    pinned: bool,
    dated: bool,
    text: str,
    frame_of: Callable[[str], str] = frame,
) -> SeriesKey | None:
    """The series a memory may belong to, or None when it never joins one."""
    if pinned or dated or memory_type == "rule":
        return None
    shape = frame_of(text)
    if not shape:
        return None
    return (memory_type, scope, story_id if scope == "story" else None, place, shape)


# What `key_of` reads of a memory, as plain values: type, scope, story, place, pinned, dated, text.
KeyFields = tuple[str, str, StoryId | None, str | None, bool, bool, str]


def keys_of(memories: Sequence[KeyFields]) -> list[SeriesKey | None]:
    """`key_of` of each memory, frames not memoised: the bulk of a scan, run in a worker process
    (bot/clients/offload.py), whose memo would only hold each text once."""
    return [key_of(*fields, frame_of=frame.__wrapped__) for fields in memories]


def memory_key(memory: Memory) -> SeriesKey | None:
    return key_of(
        memory.type,
        memory.scope,
        memory.story_id,
        memory.place,
        memory.pinned,
        memory.expires_at is not None,
        memory.text,
    )


@dataclass(frozen=True, slots=True)
class Series:
    key: SeriesKey
    members: tuple[Memory, ...]  # by id

    @property
    def signature(self) -> str:
        """Which members, in which version: a series read again with one member changed (or one
        more) has another signature."""
        digest = hashlib.sha256()
        for m in self.members:
            digest.update(f"{m.id}:{m.content_hash};".encode())
        return digest.hexdigest()[:32]


def group(keys: Iterable[tuple[int, SeriesKey | None]], min_members: int) -> dict[SeriesKey, list[int]]:
    """Ids by series key, only the keys held by at least `min_members` ids."""
    groups: dict[SeriesKey, list[int]] = defaultdict(list)
    for memory_id, key in keys:
        if key is not None:
            groups[key].append(memory_id)
    return {k: ids for k, ids in groups.items() if len(ids) >= min_members}


def find_series(memories: Iterable[Memory], min_members: int = DEFAULT_MIN_MEMBERS) -> list[Series]:
    """Every series among `memories` (one user's), the largest first."""
    by_id = {m.id: m for m in memories}
    found = group(((m.id, memory_key(m)) for m in by_id.values()), min_members)
    series = [Series(k, tuple(by_id[i] for i in sorted(ids))) for k, ids in found.items()]
    series.sort(key=lambda s: (-len(s.members), s.members[0].id))
    return series


# --- the selection's series step ------------------------------------------------------------


class _Chosen(Protocol):
    """What `cap_series` needs of a selected memory (bot.memory.reference.selection.Selected)."""

    @property
    def memory(self) -> Memory: ...


S = TypeVar("S", bound=_Chosen)


def cap_series(
    run: Callable[[frozenset[int], int], list[S]],
    by_score: Callable[[frozenset[int], int], list[Memory]],
    max_slots: int,
    limit: int,
    *,
    key: Callable[[Memory], Hashable | None] = memory_key,
) -> tuple[list[S], dict[int, int]]:
    """The selection `run` makes once no series holds more than `max_slots` of its slots.

    `run(excluded, limit)` selects `limit` memories without the `excluded` ids; `by_score(excluded,
    depth)` gives the first `depth` eligible memories by cosine. When a series is over its share,
    the step looks PROBE_FACTOR times deeper than the turn, in the order the selection would take
    the next memories (a deeper run, then the cosine order), sets aside every member past its
    series' `max_slots` first ones in that order, and runs the selection again, so that the next
    memories take the slots. Until no series is over: one round in practice (a series of 500
    look-alikes ranked above everything included), MAX_CAP_ROUNDS at most. Returns the selection
    and, for each series that was cut, its kept members' ids mapped to how many members of it the
    rounds saw (what /why says: at least that many).
    """
    excluded: set[int] = set()
    seen: dict[Hashable, set[int]] = defaultdict(set)
    chosen = run(frozenset(), limit)
    for _ in range(MAX_CAP_ROUNDS):
        taken = [s.memory for s in chosen]
        if not _over(taken, max_slots, key, seen):
            break
        ahead = frozenset(excluded)
        deeper = [s.memory for s in run(ahead, limit * PROBE_FACTOR)] + by_score(ahead, limit * PROBE_FACTOR)
        excluded |= _over(taken + deeper, max_slots, key, seen)
        chosen = run(frozenset(excluded), limit)
    else:
        # Still over after every round (never seen outside contrived ties): trimmed, not refilled.
        over = _over([s.memory for s in chosen], max_slots, key, seen)
        chosen = [s for s in chosen if s.memory.id not in over]
    cut: dict[int, int] = {}
    if not any(len(members) > max_slots for members in seen.values()):
        return chosen, cut
    for s in chosen:
        k = key(s.memory)
        if k is not None and len(seen.get(k, ())) > max_slots:
            cut[s.memory.id] = len(seen[k])
    return chosen, cut


def _over(
    memories: Sequence[Memory], max_slots: int, key: Callable[[Memory], Hashable | None], seen: dict[Hashable, set[int]]
) -> set[int]:
    """Ids of the members past their series' `max_slots` first ones, in the order given."""
    placed: dict[Hashable, int] = defaultdict(int)
    over: set[int] = set()
    done: set[int] = set()
    for memory in memories:
        k = key(memory)
        if k is None or memory.id in done:
            continue
        done.add(memory.id)
        seen[k].add(memory.id)
        placed[k] += 1
        if placed[k] > max_slots:
            over.add(memory.id)
    return over
