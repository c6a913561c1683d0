"""Lenient parsing of the reflection JSON and the prompt it is asked with."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pytest

from bot.errors import ReflectionParseError
from bot.memory.model import Memory
from bot.memory.write.reflection import parse_reflection, reflection_json_schema
from bot.memory.write.reflection_prompt import CONTINUED_OPENING, build_reflection_messages, memory_task

GOOD_MEMORY = {"text": "L'utilisateur habite à Nantes.", "type": "fact", "scope": "global", "confidence": 0.95}


def test_a_complete_reflection_parses():
    raw = json.dumps(
        {
            "memories": [GOOD_MEMORY],
            "replace": [{"id": 7, "text": "L'utilisateur fait partie de l'équipe Logistique."}],
            "delete": [3],
            "summary": "Camille arrive chez Atelier.",
            "anchors": {
                "add": ["Camille est allergique aux arachides."],
                "remove": [{"id": 2, "reason": "corrigé par l'utilisateur"}],
            },
            "positions": [
                {
                    "subject": "vélo",
                    "stance": "Le personnage trouve ça courageux.",
                    "justification": "Elle vient tous les jours en vélo.",
                }
            ],
            "state": {"mood": 1, "trust": -0.5},
        }
    )
    parsed = parse_reflection(raw)
    r = parsed.reflection
    assert parsed.problems == []
    assert [m.text for m in r.memories] == ["L'utilisateur habite à Nantes."]
    assert [(x.id, x.text) for x in r.replace] == [(7, "L'utilisateur fait partie de l'équipe Logistique.")]
    assert r.delete == [3] and r.summary == "Camille arrive chez Atelier."
    assert r.anchors.add == ["Camille est allergique aux arachides."] and r.anchors.remove[0].id == 2
    assert r.positions[0].subject == "vélo" and r.state == {"mood": 1.0, "trust": -0.5}


def test_an_invalid_item_is_dropped_alone_and_the_rest_applies():
    raw = json.dumps(
        {
            "memories": [
                GOOD_MEMORY,
                {"text": "L'utilisateur a un chat.", "type": "opinion", "confidence": 0.9},
                {"text": "L'utilisateur a un chien.", "type": "fact"},  # no confidence
                {"text": "x" * 1000, "type": "fact", "confidence": 0.9},
                "not an object",
            ],
            "replace": [{"id": "seven", "text": "…"}, {"id": 4, "text": "L'utilisateur boit du thé."}],
            "delete": [5, "#6", "abc", None, True],
            "state": {"mood": "beaucoup", "trust": 1, "calm": float("nan")},
        }
    )
    parsed = parse_reflection(raw)
    r = parsed.reflection
    assert [m.text for m in r.memories] == ["L'utilisateur habite à Nantes."]
    assert [x.id for x in r.replace] == [4]
    assert r.delete == [5, 6]
    assert r.state == {"trust": 1.0}
    assert len(parsed.problems) == 4 + 1 + 3 + 2


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "Je n'ai rien trouvé.",
        '{"memories": [',
        "[1, 2, 3]",
        "null",
    ],
)
def test_unparseable_json_raises_and_changes_nothing(raw):
    with pytest.raises(ReflectionParseError):
        parse_reflection(raw)


def test_json_wrapped_in_a_code_fence_or_prose_is_found():
    fenced = "Voici :\n```json\n" + json.dumps({"memories": [GOOD_MEMORY]}) + "\n```"
    assert len(parse_reflection(fenced).reflection.memories) == 1
    prose = "Sure! " + json.dumps({"delete": [2]}) + " Hope it helps."
    assert parse_reflection(prose).reflection.delete == [2]


def test_wrong_container_types_are_ignored_with_a_problem():
    parsed = parse_reflection(json.dumps({"memories": {"text": "x"}, "anchors": ["a"], "state": [1], "summary": 3}))
    r = parsed.reflection
    assert r.memories == [] and r.anchors.add == [] and r.state == {} and r.summary is None
    assert len(parsed.problems) == 4


def test_a_bare_date_expires_at_the_end_of_that_day():
    raw = json.dumps({"memories": [dict(GOOD_MEMORY, expires_at="2026-08-31")]})
    [m] = parse_reflection(raw).reflection.memories
    assert m.expires_at == datetime(2026, 8, 31, 23, 59, 59, tzinfo=UTC)


def test_type_and_scope_are_case_insensitive():
    raw = json.dumps({"memories": [dict(GOOD_MEMORY, type="Preference", scope="STORY")]})
    [m] = parse_reflection(raw).reflection.memories
    assert (m.type, m.scope) == ("preference", "story")


def test_too_many_items_are_cut():
    raw = json.dumps({"memories": [GOOD_MEMORY] * 100})
    parsed = parse_reflection(raw)
    assert len(parsed.reflection.memories) == 40 and parsed.problems


def test_prompt_shows_known_memories_with_their_ids_and_the_exchange():
    now = datetime(2026, 11, 1, tzinfo=UTC)
    known = [
        Memory(
            id=7,
            user_id="u",
            text="L'utilisateur fait partie de l'équipe Paiements.",
            type="fact",
            scope="global",
            pinned=False,
            confidence=1.0,
            created_at=now,
            updated_at=now,
        )
    ]
    messages = build_reflection_messages(
        character="Écho",
        user="Camille",
        exchanges=[("J'ai quitté l'équipe Paiements pour la Logistique.", "Bienvenue chez les logisticiens !")],
        known=known,
        today=date(2026, 11, 2),
    )
    system, user = messages[0]["content"], messages[1]["content"]
    assert "[7] (fact) L'utilisateur fait partie de l'équipe Paiements." in user
    assert "J'ai quitté l'équipe Paiements" in user and "Bienvenue" in user
    assert "L'utilisateur" in system and "The user" in system
    assert "one-off requests" in system and "politeness" in system
    assert "Today is 2026-11-02" in system


def _memory(id_: int, text: str) -> Memory:
    now = datetime(2026, 11, 1, tzinfo=UTC)
    return Memory(id=id_, user_id="u", text=text, type="fact", scope="global", pinned=False, confidence=1.0,
                  created_at=now, updated_at=now)  # fmt: skip


def test_two_reflections_of_one_person_start_alike_and_end_with_their_exchange():
    """What a prompt cache keeps from one reflection to the next: the same system message, the
    known memories as given (the worker gives them in id order: a list that grows at its end),
    the exchange last."""
    common = {"character": "Écho", "user": "Camille", "today": date(2026, 11, 2), "state_keys": ["mood"]}
    first = build_reflection_messages(
        exchanges=[("J'ai un chat.", "Oh !")],
        known=[_memory(3, "L'utilisateur a 30 ans."), _memory(9, "L'utilisateur a un chien.")],
        **common,
    )
    second = build_reflection_messages(
        exchanges=[("Il s'appelle Pixel.", "Joli nom.")],
        known=[
            _memory(3, "L'utilisateur a 30 ans."),
            _memory(9, "L'utilisateur a un chien."),
            _memory(12, "L'utilisateur a un chat."),
        ],
        **common,
    )
    assert first[0] == second[0]
    known = second[1]["content"].split("Known memories about Camille:\n", 1)[1].split("\n\n", 1)[0]
    assert [line[:4] for line in known.splitlines()] == ["[3] ", "[9] ", "[12]"]
    assert first[1]["content"].split("The exchange:")[0] in second[1]["content"].replace(
        "[12] (fact) L'utilisateur a un chat.\n", ""
    )
    assert second[1]["content"].rstrip().endswith("Answer with the JSON object only.")
    assert second[1]["content"].index("Known memories") < second[1]["content"].index("The exchange:")


def test_a_reflection_that_continues_the_reply_asks_its_part_after_the_conversation():
    conversation = [
        {"role": "system", "content": "You are Écho. [the memory task is in this head]"},
        {"role": "user", "content": "Camille: J'ai un chat."},
        {"role": "assistant", "content": "Oh !"},
    ]
    messages = build_reflection_messages(
        character="Écho",
        user="Camille",
        exchanges=[("J'ai un chat.", "Oh !")],
        known=[_memory(3, "L'utilisateur a 30 ans.")],
        today=date(2026, 11, 2),
        others=["Bob"],
        conversation=conversation,
    )
    assert messages[: len(conversation)] == conversation
    (request,) = messages[len(conversation) :]
    assert request["role"] == "user" and request["content"].startswith(CONTINUED_OPENING)
    assert "Today is 2026-11-02" in request["content"] and "Bob spoke there too" in request["content"]
    assert "[3] (fact) L'utilisateur a 30 ans." in request["content"]
    assert '<message author="Camille">\nJ\'ai un chat.\n</message>' in request["content"]
    # The task itself is in the reply's head, not repeated here.
    assert "What to keep (as memories)" not in request["content"]
    assert "What to keep (as memories)" in memory_task(character="Écho", user="Camille")


def test_schema_is_json_and_carries_the_position_wording():
    schema = reflection_json_schema()
    json.dumps(schema)
    stance = schema["$defs"]["PositionIn"]["properties"]["stance"]["description"]
    assert "dans ses termes" not in stance and "in its own terms" not in stance.lower()
    assert set(schema["properties"]) >= {"memories", "replace", "delete", "summary", "anchors", "positions", "state"}


def test_replace_ids_are_as_lenient_as_delete_ids():
    parsed = parse_reflection(
        json.dumps({"replace": [{"id": "#7", "text": "L'utilisateur boit du thé."}], "delete": ["#8"]})
    )
    assert [r.id for r in parsed.reflection.replace] == [7] and parsed.reflection.delete == [8]


def test_an_expiry_without_a_utc_instant_is_an_invalid_item():
    parsed = parse_reflection(
        json.dumps({"memories": [dict(GOOD_MEMORY, expires_at="9999-12-31T23:59:59-05:00"), GOOD_MEMORY]})
    )
    assert len(parsed.reflection.memories) == 1 and "out of range" in parsed.problems[0]
