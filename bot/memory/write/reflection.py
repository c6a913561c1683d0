"""The reflection: the second LLM call after a reply, its JSON schema and lenient parser (its
prompt: bot/memory/write/reflection_prompt.py).

The model proposes; `bot.memory.write.apply` decides. Parsing is lenient item by item and field by
field: one invalid memory, operation, anchor, position, state value or summary is dropped with a
line in `problems` (wrong type, number past the float range, NaN, text empty once made storable…)
and the rest of the batch still applies. Every string of the answer is made storable first (a
JSON escape can carry a lone surrogate, a model can write NUL). Unparseable JSON raises
`ReflectionParseError` and changes nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import reprlib
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError, field_validator

from bot.errors import ReflectionParseError
from bot.memory.model import Scope, UserMemoryType, checked_expiry
from bot.memory.story.plans import MAX_SUMMARY_CHARS, POSITION_FIELD_DESCRIPTIONS
from bot.memory.story.state import is_finite_number
from bot.memory.text import canonical, storable

log = logging.getLogger(__name__)

MAX_CANDIDATE_CHARS = 300
MAX_ITEMS = 40


def _expiry_before(value: Any) -> Any:
    # "2026-08-31" means the whole day of the 31st is still true.
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        day = date.fromisoformat(value.strip())
        return datetime.combine(day, time(23, 59, 59), tzinfo=UTC)
    if value == "":
        return None
    return value


Expiry = Annotated[datetime | None, BeforeValidator(_expiry_before), AfterValidator(checked_expiry)]
EXPIRY_DESCRIPTION = (
    "For a dated fact only (a trip, a leave, an appointment): the ISO date after which it is no "
    "longer true. Omit for durable facts."
)


# An SQLite integer has at most 19 digits; longer digit strings are not ids (and past 4300
# digits `int()` refuses them outright).
_ID_DIGITS = re.compile(r"#?\d{1,19}")


def _memory_id(value: Any) -> Any:
    # Models write ids as 7, "7" or "#7"; delete accepts all three, so does replace.
    if isinstance(value, str) and _ID_DIGITS.fullmatch(value.strip()):
        return int(value.strip().lstrip("#"))
    return value


class CandidateIn(BaseModel):
    text: str = Field(
        min_length=3,
        max_length=MAX_CANDIDATE_CHARS,
        description="One short self-contained sentence about the user, starting with "
        "'L'utilisateur' / 'The user', in the conversation's language.",
    )
    type: UserMemoryType = Field(
        description="fact: durable fact about the user; preference: what the user likes or "
        "dislikes; promise: something the user or the character committed to; episode: "
        "a notable event that happened."
    )
    scope: Scope = Field(
        default="global",
        description="global: true of the user everywhere; story: only meaningful in this story.",
    )
    confidence: float = Field(ge=0.0, le=1.0, description="How sure you are, from 0 to 1.")
    expires_at: Expiry = Field(default=None, description=EXPIRY_DESCRIPTION)

    @field_validator("type", "scope", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("text", mode="before")
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        return " ".join(canonical(value).split()) if isinstance(value, str) else value


class ReplaceIn(BaseModel):
    id: Annotated[int, BeforeValidator(_memory_id)] = Field(description="The id of a known memory shown above.")
    text: str = Field(
        min_length=3,
        max_length=MAX_CANDIDATE_CHARS,
        description="The corrected sentence. Only for a correction of THE SAME fact; a new, "
        "different fact goes to memories.",
    )
    expires_at: Expiry = Field(default=None, description=EXPIRY_DESCRIPTION)

    @field_validator("text", mode="before")
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        return " ".join(canonical(value).split()) if isinstance(value, str) else value


class AnchorRemovalIn(BaseModel):
    id: int
    reason: str = Field(default="", max_length=400, description="Why this anchored fact is no longer true.")


class AnchorsIn(BaseModel):
    add: list[str] = Field(default_factory=list, description="Key story facts to hold above the summary.")
    remove: list[AnchorRemovalIn] = Field(
        default_factory=list, description="Anchors to drop, each with its id and a reason."
    )


class PositionIn(BaseModel):
    subject: str = Field(min_length=1, max_length=120)
    stance: str = Field(min_length=1, max_length=400)
    justification: str = Field(default="", max_length=400)


class Reflection(BaseModel):
    """What the reflection proposes for one exchange. Every field is optional."""

    memories: list[CandidateIn] = Field(default_factory=list)
    replace: list[ReplaceIn] = Field(default_factory=list)
    delete: list[int] = Field(
        default_factory=list, description="Ids of known memories the user said are no longer true."
    )
    summary: str | None = Field(
        default=None,
        description=f"The whole story summary, rewritten in full, at most {MAX_SUMMARY_CHARS} "
        "characters: shorten older events, the anchors keep the key facts (null: unchanged).",
    )
    anchors: AnchorsIn = Field(default_factory=AnchorsIn)
    positions: list[PositionIn] = Field(default_factory=list)
    state: dict[str, float] = Field(default_factory=dict)


def reflection_json_schema() -> dict[str, Any]:
    """The JSON schema sent as structured-output format to Ollama / OpenAI-compatible servers: a
    copy of one made once (pydantic took 1.5-7 ms of the event loop each reflection)."""
    return dict(json.loads(_reflection_schema_text()))


@functools.cache
def _reflection_schema_text() -> str:
    schema = Reflection.model_json_schema()
    props = schema.get("$defs", {}).get("PositionIn", {}).get("properties", {})
    for name, description in POSITION_FIELD_DESCRIPTIONS.items():
        if name in props:
            props[name]["description"] = description
    return json.dumps(schema)


@dataclass(slots=True)
class ParsedReflection:
    reflection: Reflection
    problems: list[str] = field(default_factory=list)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def _json_int(digits: str) -> int | float:
    # An integer past the float range is read as inf, which the number checks refuse field by
    # field; `int()` would refuse it past 4300 digits and take the whole answer down with it.
    return int(digits) if len(digits) <= 300 else float(digits)


def _loads(text: str) -> Any:
    return json.loads(text, parse_int=_json_int)


def _storable_tree(value: Any) -> Any:
    """The parsed JSON with every string, key or value, made storable."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, list):
        return [_storable_tree(v) for v in value]
    if isinstance(value, dict):
        return {storable(k): _storable_tree(v) for k, v in value.items()}
    return value


def _extract_object(raw: str) -> dict[str, Any]:
    text = raw.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        try:
            value = _loads(text)
        except json.JSONDecodeError:
            start, end = text.find("{"), text.rfind("}")
            if start < 0 or end <= start:
                raise ReflectionParseError("the reflection holds no JSON object") from None
            try:
                value = _loads(text[start : end + 1])
            except json.JSONDecodeError as exc:
                raise ReflectionParseError(f"the reflection's JSON is invalid: {exc}") from None
        value = _storable_tree(value)
    except RecursionError:
        raise ReflectionParseError("the reflection's JSON is nested too deeply") from None
    if not isinstance(value, dict):
        raise ReflectionParseError(f"the reflection's JSON is a {type(value).__name__}, not an object")
    return value


def _show(value: Any) -> str:
    """A value in a problem line: short whatever the model wrote."""
    return reprlib.repr(value)


def _items(data: dict[str, Any], key: str, problems: list[str]) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{key}: expected a list, got {type(value).__name__}; ignored")
        return []
    if len(value) > MAX_ITEMS:
        problems.append(f"{key}: {len(value)} items, only the first {MAX_ITEMS} kept")
    return value[:MAX_ITEMS]


def _validate_each(model: type[BaseModel], items: list[Any], key: str, problems: list[str]) -> list[Any]:
    kept = []
    for index, item in enumerate(items):
        try:
            kept.append(model.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "item"
            problems.append(f"{key}[{index}] dropped: {where}: {first.get('msg')}")
    return kept


def _as_id(value: Any) -> int | None:
    value = _memory_id(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_reflection(raw: str) -> ParsedReflection:
    """Parse the model's answer leniently. Raises ReflectionParseError when nothing is usable."""
    data = _extract_object(raw)
    problems: list[str] = []

    memories = _validate_each(CandidateIn, _items(data, "memories", problems), "memories", problems)
    replace = _validate_each(ReplaceIn, _items(data, "replace", problems), "replace", problems)

    delete: list[int] = []
    for index, value in enumerate(_items(data, "delete", problems)):
        if isinstance(value, dict):
            value = value.get("id")
        memory_id = _as_id(value)
        if memory_id is None:
            problems.append(f"delete[{index}] dropped: not a memory id: {_show(value)}")
        else:
            delete.append(memory_id)

    summary = data.get("summary")
    if summary is not None and not isinstance(summary, str):
        problems.append("summary: not a string; ignored")
        summary = None
    if isinstance(summary, str) and not summary.strip():
        summary = None

    anchors = AnchorsIn()
    raw_anchors = data.get("anchors")
    if isinstance(raw_anchors, dict):
        adds = []
        for index, anchor in enumerate(_items(raw_anchors, "add", problems)):
            if isinstance(anchor, str) and anchor.strip():
                adds.append(anchor.strip())
            else:
                problems.append(f"anchors.add[{index}] dropped: not a sentence: {_show(anchor)}")
        removes = _validate_each(AnchorRemovalIn, _items(raw_anchors, "remove", problems), "anchors.remove", problems)
        anchors = AnchorsIn(add=adds, remove=removes)
    elif raw_anchors is not None:
        problems.append("anchors: expected an object with add/remove; ignored")

    positions = _validate_each(PositionIn, _items(data, "positions", problems), "positions", problems)

    state: dict[str, float] = {}
    raw_state = data.get("state")
    if isinstance(raw_state, dict):
        for key, value in raw_state.items():
            if is_finite_number(value):
                state[key] = float(value)
            else:
                problems.append(f"state[{_show(key)}] dropped: not a finite number: {_show(value)}")
    elif raw_state is not None:
        problems.append("state: expected an object of numbers; ignored")

    for problem in problems:
        log.warning("reflection item dropped: %s", problem)
    reflection = Reflection(
        memories=memories,
        replace=replace,
        delete=delete,
        summary=summary,
        anchors=anchors,
        positions=positions,
        state=state,
    )
    return ParsedReflection(reflection=reflection, problems=problems)
