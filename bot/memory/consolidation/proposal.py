"""Consolidation of a series: the model proposes one memory for the whole series, the code
checks it. Pure: the prompt, the JSON schema, the lenient parse and the checks; the job that
calls the model and applies an accepted proposal is bot/engine/consolidation_worker.py, its SQL
bot/memory/stores/consolidations.py.

A proposal is accepted only when nothing of any member is lost or invented:
- every carrier token of every member (bot/memory/carriers.py: numbers, years, times, weekdays,
  months, relative days, seasons, number words) and every name (a capitalised word) is in the
  new text, spelled out or inside a stated range of numbers ("de 2017 à 2025", "2012–2025",
  "from 2017 to 2025", "entre 2017 et 2025");
- a range is read only when every number it spans is a member's (a range that would claim a
  year no member holds is refused: it would invent a visit), within MAX_RANGE_SPAN;
- the new text carries no carrier token no member has, but the number of members ("14 fois");
- it says what the members say: every word of their frame (their text but its carriers: "prend
  du sertraline chaque matin", "est allergique aux arachides", "a visité") is in the new text,
  or the same word inflected as the replace guard reads it (bot/memory/write/replace_guard.py,
  `unmatched`: the guard refuses these rewrites, and so does this), and the new text has no
  word no member has but the few that join a list ("fois", "chaque année", "every year");
- the write path's filters (bot/memory/write/filters.py) do not refuse it where they pass every member
  (confidence, about the user, about someone else of the channel, the character's attitude),
  and its negation is the members' (a series is all positive or all negative by its frame);
- it is written in the members' language.
Otherwise the series stays as it is; the refusal and its reason are logged and counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from bot.clients.llm_wire import ChatMessage
from bot.errors import ReflectionParseError
from bot.memory.carriers import carrier_tokens, dedup_text
from bot.memory.model import MAX_MEMORY_CHARS, Memory
from bot.memory.quoting import quote_line
from bot.memory.series import frame
from bot.memory.text import capitalised_words, content_words, words
from bot.memory.write.filters import about_someone_else, character_attitude, low_confidence, not_about_user
from bot.memory.write.negation import flipped_negation
from bot.memory.write.reflection import _extract_object
from bot.memory.write.replace_guard import unmatched

# A range spanning more numbers than this is not read as a range (1–100000 is no list of years).
MAX_RANGE_SPAN = 200
_NEGATION_MARKS = frozenset({"ne", "not", "pas", "jamais", "rien", "aucun", "guère", "plus", "never", "no",
                             "nothing", "none", "nobody", "sans", "without"})  # fmt: skip
_INTEGER = re.compile(r"\d+")
# On the dedup text (lower case, one kind of dash): "2012-2025", "2012 - 2025", "de 2017 à 2025",
# "du 3 au 9", "from 2017 to 2025", "between 2017 and 2025", "entre 2017 et 2025". A bare
# "2015 et 2017" is a list, not a range.
_RANGES = (
    re.compile(r"(?<![\d.,])(\d+) ?- ?(\d+)(?![\d.,])"),
    re.compile(r"\b(?:de|du|from|since)\s+(\d+)\s+(?:à|au|a|to|through|until|till|jusqu'en|jusqu'à)\s+(\d+)(?![\d.,])"),
    re.compile(r"\b(?:entre|between)\s+(\d+)\s+(?:et|and)\s+(\d+)(?![\d.,])"),
)
# Words a text that lists a series may add without saying anything its members do not: a count,
# a period, a link between the list's items.
_JOINING = frozenset(
    "fois année années an ans chaque puis respectivement times time year years every each between until till through "
    "then respectively".split()
)
_FRENCH = frozenset(
    "le la les un une des du de et est a en au aux chaque depuis fois avec pour sur dans qui que ne pas".split()
)
_ENGLISH = frozenset("the a an and is was has in on at every since times with for of to who that not does did".split())

CONSOLIDATION_SYSTEM_PROMPT = """You rewrite a series of memories {character} keeps about {user} \
into ONE memory that holds all of them.

The memories say the same thing at different dates, numbers or days. Write one short sentence \
that keeps every one of them: every year, date, number, weekday, month and name must stay \
readable in your sentence, spelled out ("en 2012, 2013 et 2015") or as a range that covers \
only years of the list ("de 2017 à 2025", "2012–2025"). Never add a year, number or name that \
is not in the list, never drop one. Keep the memories' language and their subject. Answer \
with JSON: {{"text": "...", "confidence": 0.0-1.0}}.
"""


class ProposalIn(BaseModel):
    text: str = Field(
        min_length=3, max_length=MAX_MEMORY_CHARS, description="The one memory that holds the whole series."
    )
    confidence: float = Field(ge=0.0, le=1.0, description="How sure you are that it keeps every memory of the series.")


def consolidation_json_schema() -> dict[str, Any]:
    return ProposalIn.model_json_schema()


@dataclass(frozen=True, slots=True)
class Proposal:
    text: str
    confidence: float


def parse_proposal(raw: str) -> Proposal:
    """The model's answer; ReflectionParseError when it holds no usable proposal."""
    data = _extract_object(raw)
    try:
        proposal = ProposalIn.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "answer"
        raise ReflectionParseError(f"unusable consolidation: {where}: {first.get('msg')}") from None
    return Proposal(" ".join(proposal.text.split()), proposal.confidence)


def build_consolidation_messages(*, character: str, user: str, members: Sequence[Memory]) -> list[ChatMessage]:
    listed = "\n".join(f"- {quote_line(m.text)}" for m in members)
    return [
        {"role": "system", "content": CONSOLIDATION_SYSTEM_PROMPT.format(character=character, user=user)},
        {
            "role": "user",
            "content": f"The series ({len(members)} memories):\n{listed}\n\nAnswer with the JSON object only.",
        },
    ]


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # a short key, the metric's label
    detail: str


def _ranges(canonical: str, member_numbers: set[int]) -> tuple[set[int], str | None]:
    """Numbers covered by the stated ranges, or the first range that claims a number no member has."""
    covered: set[int] = set()
    for pattern in _RANGES:
        for match in pattern.finditer(canonical):
            low, high = int(match.group(1)), int(match.group(2))
            if high <= low or high - low > MAX_RANGE_SPAN:
                continue
            span = set(range(low, high + 1))
            if not span <= member_numbers:
                missing = sorted(span - member_numbers)[:3]
                return covered, f"the range {low}–{high} claims {', '.join(map(str, missing))}, which no member holds"
            covered |= span
    return covered, None


def _said(text: str) -> set[str]:
    """The content words of a text but its carriers (read one by one by the checks above):
    what it says of its subject. Negations are words here."""
    return content_words(frame(text) or dedup_text(text))


def _language(texts: Sequence[str]) -> str | None:
    french = english = 0
    for t in texts:
        tokens = words(t)
        french += sum(w in _FRENCH for w in tokens)
        english += sum(w in _ENGLISH for w in tokens)
    if french == english:
        return None
    return "fr" if french > english else "en"


def check_proposal(
    members: Sequence[Memory],
    proposal: Proposal,
    *,
    character_name: str,
    user_name: str | None = None,
    other_names: Sequence[str] = (),
) -> Refusal | None:
    """Why the proposal cannot replace the series, or None when it keeps every member."""
    canonical = dedup_text(proposal.text)
    proposed = set(carrier_tokens(proposal.text))
    proposed_words = set(words(canonical))
    member_carriers: set[str] = set()
    for m in members:
        member_carriers.update(carrier_tokens(m.text))
    member_numbers = {int(t) for t in member_carriers if t.isdigit()}
    covered, bad_range = _ranges(canonical, member_numbers)
    if bad_range is not None:
        return Refusal("range_claims_more", bad_range)
    for m in members:
        for token in carrier_tokens(m.text):
            if token in proposed or (token.isdigit() and int(token) in covered):
                continue
            return Refusal("carrier_lost", f"“{token}” of #{m.id} is not in the new text")
        for name in capitalised_words(m.text):
            if name not in proposed_words:
                return Refusal("name_lost", f"“{name}” of #{m.id} is not in the new text")
    member_words = {w for m in members for w in words(dedup_text(m.text))}
    new_names = sorted(capitalised_words(proposal.text) - member_words)
    if new_names:
        return Refusal("name_invented", f"“{new_names[0]}” is in no member")
    allowed = member_carriers | {str(len(members))}
    invented = sorted(t for t in proposed if t not in allowed and t not in _NEGATION_MARKS)
    if invented:
        return Refusal("carrier_invented", f"“{invented[0]}” is in no member")
    if low_confidence(proposal.confidence):
        return Refusal("low_confidence", f"confidence {proposal.confidence:.2f}")
    # The filters judge the new text where they let every member through: a member the filter
    # would refuse (its wording predates it) does not make the series unconsolidable.
    filters: tuple[tuple[str, Callable[[str], bool]], ...] = (
        ("not_about_user", lambda t: not_about_user(t, character_name, user_name=user_name)),
        ("about_someone_else", lambda t: about_someone_else(t, other_names, user_name)),
        ("character_attitude", lambda t: character_attitude(t, character_name, user_name=user_name)),
    )
    for reason, refuses in filters:
        if refuses(proposal.text) and not any(refuses(m.text) for m in members):
            return Refusal(reason, "the write path's filter refuses it and none of the members")
    # A series shares its negation (it is part of the frame): the new text must say it as well.
    if proposed & _NEGATION_MARKS != member_carriers & _NEGATION_MARKS:
        return Refusal("negation_flipped", "its negation is not the members'")
    flipped = flipped_negation(proposal.text, [(m.id, m.text) for m in members])
    if flipped is not None:
        return Refusal("negation_flipped", f"flips the negation of #{flipped}")
    # What the members say, said again and nothing more: "takes 50 mg every morning" for "takes
    # 50 mg of sertraline every morning" keeps every carrier and loses the fact.
    said = [_said(m.text) for m in members]
    new_words = _said(proposal.text)
    lost = sorted(unmatched(said[0].intersection(*said[1:]), new_words))
    if lost:
        return Refusal("word_lost", f"“{lost[0]}”, which every member says, is not in the new text")
    added = sorted(unmatched(new_words - _JOINING, set().union(*said)))
    if added:
        return Refusal("word_added", f"“{added[0]}” is in no member")
    language = _language([m.text for m in members])
    if language is not None and _language([proposal.text]) not in (language, None):
        return Refusal("language", f"the members are written in {language}")
    return None
