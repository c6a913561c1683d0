"""Item-by-item leniency for every field of a reflection: a malformed field drops itself, with a
line saying why, never its neighbours; nothing it holds can make the whole reflection crash."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.clients.db import SQLiteDatabase
from bot.memory.model import NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.stories import load_story
from bot.memory.story.state import parse_state_specs
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.reflection import parse_reflection
from tests.lanes import examples

SPECS = parse_state_specs({"mood": {"min": -5, "max": 5, "default": 0, "max_delta": 1}})
FIRST = "L'utilisateur habite à Nantes."
SECOND = "L'utilisateur joue du violoncelle."
ANCHOR = "Le pacte entre Alice et Écho est scellé."
SUMMARY = "Alice a rencontré Écho à la bibliothèque et ils ont scellé un pacte."


def valid(known_id: int) -> dict[str, Any]:
    """A reflection in which every field is valid and lands."""
    return {
        "memories": [
            {"text": FIRST, "type": "fact", "scope": "global", "confidence": 0.9, "expires_at": "2027-08-31"},
            {"text": SECOND, "type": "fact", "scope": "global", "confidence": 0.9},
        ],
        "replace": [{"id": known_id, "text": "L'utilisateur fait partie de l'équipe Logistique."}],
        "delete": [],
        "summary": SUMMARY,
        "anchors": {"add": [ANCHOR], "remove": [{"id": 99, "reason": "l'utilisateur a corrigé ce point"}]},
        "positions": [
            {
                "subject": "bibliothèque",
                "stance": "Le personnage pense que la bibliothèque est un refuge.",
                "justification": "Alice y passe ses après-midis.",
            }
        ],
        "state": {"mood": 1},
    }


async def _apply(root: Path, raw: str):
    db = await SQLiteDatabase.open(root / "echo.sqlite3")
    try:
        store = MemoryStore(db)
        known = await store.add("u", NewMemory(text="L'utilisateur fait partie de l'équipe Paiements.", place="p"))
        assert known == 1
        parsed = parse_reflection(raw)
        ctx = ReflectionContext(
            user_id="u",
            allowed_ids=frozenset({known}),
            character_name="Écho",
            user_message="J'ai quitté l'équipe Paiements pour la Logistique. J'habite à Nantes, je joue du violoncelle.",
            story_id="s",
            place="p",
            state_specs=SPECS,
        )
        report = await apply_reflection(db, parsed.reflection, ctx, problems=parsed.problems)
        return report, [m.text for m in await store.list("u")], await load_story(db, "u", "s")
    finally:
        await db.close()


def apply(raw: str):
    with tempfile.TemporaryDirectory() as root:
        return asyncio.run(_apply(Path(root), raw))


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _landed(memories: list[str], story) -> dict[str, bool]:
    return {
        "first": FIRST in memories,
        "second": SECOND in memories,
        "replace": "L'utilisateur fait partie de l'équipe Logistique." in memories,
        "summary": story.summary == SUMMARY,
        "anchors": [a.text for a in story.anchors] == [ANCHOR],
        "positions": [p.subject for p in story.positions] == ["bibliothèque"],
        "state": story.state == {"mood": 1.0},
    }


def _field_of(path: tuple[Any, ...]) -> str:
    top = path[0]
    if top == "memories":
        return "first" if path[1] == 0 else "second"
    return str(top)


def _assert_neighbours_landed(path: tuple[Any, ...], memories: list[str], story) -> None:
    corrupted = _field_of(path)
    missing = [name for name, ok in _landed(memories, story).items() if not ok and name != corrupted]
    assert missing == [], f"corrupting {path} lost {missing}"
    for text in [*memories, story.summary or "", *(a.text for a in story.anchors)]:
        text.encode("utf-8")
        assert "\x00" not in text


def test_the_valid_reflection_lands_whole():
    report, memories, story = apply(json.dumps(valid(1)))
    assert all(_landed(memories, story).values()), (report.decisions, report.problems)
    assert report.problems == [] or all("anchor" in p for p in report.problems)


# The cases the attack found, and their kin, as the model's raw JSON text.
RAW_CASES = {
    "state 10**400": (("state", "mood"), "1" + "0" * 400),
    "state of 5000 digits": (("state", "mood"), "1" + "0" * 5000),
    "state 1e400": (("state", "mood"), "1e400"),
    "state NaN": (("state", "mood"), "NaN"),
    "state -Infinity": (("state", "mood"), "-Infinity"),
    "state true": (("state", "mood"), "true"),
    "state nested": (("state", "mood"), '{"a": [1, {"b": null}]}'),
    "summary NUL first": (("summary",), json.dumps("\x00" + SUMMARY)),
    "summary only NUL": (("summary",), '"\\u0000"'),
    "summary lone surrogate": (("summary",), '"Alice \\ud800 et Écho"'),
    "summary number": (("summary",), "12"),
    "summary huge": (("summary",), json.dumps("x" * 100_000)),
    "anchor NUL first": (("anchors", "add", 0), json.dumps("\x00" + ANCHOR)),
    "anchor surrogate": (("anchors", "add", 0), '"pacte \\udfff scellé"'),
    "anchor number": (("anchors", "add", 0), "10e400"),
    "anchor removal reason surrogate": (("anchors", "remove", 0, "reason"), '"raison \\ud800 longue ici"'),
    "anchor removal huge id": (("anchors", "remove", 0, "id"), "9" * 5000),
    "position surrogate subject": (("positions", 0, "subject"), '"\\ud800"'),
    "position NUL stance": (("positions", 0, "stance"), '"\\u0000"'),
    "replace huge id": (("replace", 0, "id"), "9" * 5000),
    "replace id as long digits": (("replace", 0, "id"), json.dumps("#" + "9" * 5000)),
    "memory surrogate text": (("memories", 0, "text"), '"L\'utilisateur \\ud800 habite"'),
    "memory confidence 10**400": (("memories", 0, "confidence"), "1" + "0" * 400),
    "memory expiry 0999": (("memories", 0, "expires_at"), '"0999-12-31"'),
    "memory expiry huge number": (("memories", 0, "expires_at"), "1" + "0" * 400),
    "delete huge digits": (("delete",), json.dumps(["#" + "9" * 5000, "9" * 30])),
}


@pytest.mark.parametrize("case", RAW_CASES, ids=list(RAW_CASES))
def test_one_malformed_field_drops_alone(case):
    path, literal = RAW_CASES[case]
    marker = "__CORRUPTED__"
    data = valid(1)
    _set(data, path, marker)
    raw = json.dumps(data).replace(json.dumps(marker), literal)
    report, memories, story = apply(raw)
    _assert_neighbours_landed(path, memories, story)
    said = [*report.problems, *(d.detail for d in report.decisions), *(report.story.notes if report.story else [])]
    if not _landed(memories, story).get(_field_of(path), False):
        # A field that did not land (or a delete that could not) says why.
        assert said, case


def test_a_summary_starting_with_nul_is_stored_without_it():
    data = valid(1)
    data["summary"] = "\x00" + SUMMARY
    data["anchors"]["add"] = ["\x00" + ANCHOR]
    _, _, story = apply(json.dumps(data))
    assert story.summary == SUMMARY and [a.text for a in story.anchors] == [ANCHOR]


# --- the property: corrupt one field of a valid reflection at random ------------------------------

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        ["", "\x00", "\x00texte", "\ud800", "a\udfffb", "\u200b", "0999-01-01", "9999-12-31T23:59:59-05:00"]
    ),
    st.text(max_size=40),
    st.builds(lambda n: "é" * n, st.integers(min_value=1_000, max_value=200_000)),
    st.recursive(
        st.one_of(st.none(), st.integers(), st.text(max_size=5)),
        lambda children: st.one_of(
            st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)
        ),
        max_leaves=8,
    ),
)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field and item of the reflection but memories[1], the neighbour that must land."""
    out = []
    if isinstance(data, dict):
        items = data.items()
    elif isinstance(data, list):
        items = enumerate(data)
    else:
        return out
    for key, value in items:
        path = (*prefix, key)
        if path[:2] == ("memories", 1):
            continue
        if path != ("memories",):  # the list itself holds the neighbour
            out.append(path)
        out.extend(_paths(value, path))
    return out


_PATHS = _paths(valid(1))


def _dumps(value: Any) -> str:
    # Huge ints as the model would write them: json.dumps refuses past 4300 digits.
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**300:
        return str(value)
    return json.dumps(value)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_PATHS), junk=_JUNK)
def test_property_one_corrupted_field_never_takes_its_neighbours(path, junk):
    marker = "__CORRUPTED__"
    data = copy.deepcopy(valid(1))
    _set(data, path, marker)
    raw = json.dumps(data).replace(json.dumps(marker), _dumps(junk))
    _report, memories, story = apply(raw)
    _assert_neighbours_landed(path, memories, story)
    assert SECOND in memories
    if isinstance(junk, float) and not math.isfinite(junk) and path == ("state", "mood"):
        assert story.state == {}
