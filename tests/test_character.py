import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.characters.character import (
    CHAR,
    DEFAULT_CHARACTER_FILE,
    MAX_RULE_CHARS,
    MAX_RULES,
    USER,
    fill_turn,
    load_character,
    render_character_prompt,
)
from bot.characters.macros import TurnValues
from bot.config import load_settings
from bot.errors import CharacterError
from bot.memory.story.state import parse_state_specs


def turn(user: str) -> TurnValues:
    return TurnValues(user, datetime(2026, 1, 2, 20, 30, tzinfo=UTC), seed="s", story="c")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def write_json(tmp_path: Path, name: str, document: object) -> Path:
    return write(tmp_path, name, json.dumps(document, ensure_ascii=False))


# --- the shipped character ------------------------------------------------------------------


def test_the_default_setting_loads_the_shipped_echo():
    settings = load_settings(_env_file=None, character_file=None)
    echo = load_character(settings.storage.character_file)
    assert echo.source == DEFAULT_CHARACTER_FILE
    assert DEFAULT_CHARACTER_FILE.parent.name == "characters"  # shipped as package data
    assert echo.name == "Écho"
    assert echo.language == "fr"
    assert 8 <= len(echo.persona.splitlines()) <= 12
    assert echo.greeting
    assert 3 <= [speaker for speaker, _ in echo.example_dialogue].count(USER) <= 4
    assert 4 <= len(echo.rules) <= 6


def test_the_shipped_state_is_accepted_by_the_story_engine():
    specs = parse_state_specs(load_character(None).state)
    assert (specs["mood"].minimum, specs["mood"].maximum, specs["mood"].max_delta) == (-5, 5, 1)
    assert (specs["trust"].minimum, specs["trust"].maximum, specs["trust"].max_delta) == (0, 10, 1)


def test_the_shipped_prompt_names_the_user_and_leaves_no_placeholder():
    echo = load_character(None)
    prompt = render_character_prompt(echo, turn("Alice"))
    assert prompt.startswith("You are Écho.")
    assert "Alice: " in prompt and "Écho: " in prompt
    assert "{{" not in prompt and "<USER>" not in prompt.upper()
    # Rules are rendered by bot.engine.prompting from the rule memories: not twice.
    assert not any(rule in prompt for rule in echo.rules)
    assert "Alice" in fill_turn(echo.greeting, turn("Alice"))


# --- Écho's own format ----------------------------------------------------------------------

NATIVE_YAML = """\
name: Zed
language: en
persona: |
  {{char}} is a retired lighthouse keeper.
  He calls {{user}} "sailor".
scenario: A stormy night at the lighthouse.
greeting: Ahoy, {{user}}.
examples:
  - user: Who are you?
    char: "{{char}}, keeper of this light: forty years."
rules:
  - "Never tell {{char}}'s age."
state:
  patience: {min: 0, max: 3, default: 3, max_delta: 1}
"""


def test_native_yaml(tmp_path):
    zed = load_character(write(tmp_path, "zed.yaml", NATIVE_YAML))
    assert zed.name == "Zed"
    assert zed.persona == 'Zed is a retired lighthouse keeper.\nHe calls {{user}} "sailor".'
    assert zed.scenario == "A stormy night at the lighthouse."
    assert zed.example_dialogue == [(USER, "Who are you?"), (CHAR, "Zed, keeper of this light: forty years.")]
    assert zed.rules == ["Never tell Zed's age."]
    assert zed.state == {"patience": {"min": 0, "max": 3, "default": 3, "max_delta": 1}}
    prompt = render_character_prompt(zed, turn("Bea"))
    assert 'He calls Bea "sailor".' in prompt
    assert "Bea: Who are you?\nZed: Zed, keeper of this light: forty years." in prompt
    assert "Scenario:\nA stormy night at the lighthouse." in prompt
    assert fill_turn(zed.greeting, turn("Bea")) == "Ahoy, Bea."


def test_native_json_with_examples_as_text(tmp_path):
    path = write_json(
        tmp_path,
        "zed.json",
        {
            "name": "Zed",
            "persona": "A keeper.",
            "examples": "<START>\n{{user}}: Hi\nZed: Hello,\nsailor.\n<START>\n<USER>: Bye\n{{char}}: Farewell",
        },
    )
    zed = load_character(path)
    assert zed.language is None
    assert zed.example_dialogue == [
        (USER, "Hi"),
        (CHAR, "Hello,\nsailor."),
        (USER, "Bye"),
        (CHAR, "Farewell"),
    ]


def test_a_user_name_is_inserted_as_written():
    # A display name is not a regex replacement template nor a placeholder to expand again.
    assert fill_turn("Hi {{user}}!", turn(r"\1 {{user}}  Bob")) == r"Hi \1 {{user}} Bob!"


# --- SillyTavern cards ----------------------------------------------------------------------


def v2_card(**data: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "name": "Haruhi",
        "description": "{{char}} is the brigade chief. <BOT> drags <USER> into schemes.",
        "personality": "energetic, bossy",
        "scenario": "After school, in the club room.",
        "first_mes": "You, {{user}}! You're joining my brigade.",
        "mes_example": (
            "<START>\n{{user}}: hi\n{{char}}: hello\n"
            "<START>\n{{user}}: what now?\nHaruhi: We find aliens.\nObviously.\n"
        ),
        "creator_notes": "CREATOR NOTE: never shown to the model",
        "system_prompt": "{{original}}\nWrite {{char}}'s next reply.",
        "post_history_instructions": "Keep {{char}} in character.",
        "alternate_greetings": ["Yo."],
        "tags": ["anime"],
        "creator": "someone",
        "character_version": "1",
        "extensions": {},
    }
    fields.update(data)
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": fields}


def test_v2_card(tmp_path):
    haruhi = load_character(write_json(tmp_path, "haruhi.json", v2_card()))
    assert haruhi.name == "Haruhi"
    assert haruhi.persona == (
        "Haruhi is the brigade chief. Haruhi drags {{user}} into schemes.\nHaruhi's personality: energetic, bossy"
    )
    assert haruhi.greeting == "You, {{user}}! You're joining my brigade."
    assert haruhi.scenario == "After school, in the club room."
    assert haruhi.example_dialogue == [
        (USER, "hi"),
        (CHAR, "hello"),
        (USER, "what now?"),
        (CHAR, "We find aliens.\nObviously."),
    ]
    assert haruhi.system_prompt == "Write Haruhi's next reply."
    assert haruhi.post_history_instructions == "Keep Haruhi in character."
    assert haruhi.rules == [] and haruhi.state == {} and haruhi.language is None
    prompt = render_character_prompt(haruhi, turn("Kyon"))
    assert prompt.startswith("Write Haruhi's next reply.\n\nYou are Haruhi.")
    assert "Haruhi drags Kyon into schemes." in prompt
    assert "Kyon: what now?\nHaruhi: We find aliens.\nObviously." in prompt
    assert "CREATOR NOTE" not in prompt
    # Post-history instructions belong after the chat, not in the character description.
    assert "Keep Haruhi in character." not in prompt


def test_a_v3_card_is_read_through_its_v2_fields(tmp_path):
    card = {**v2_card(), "spec": "chara_card_v3", "spec_version": "3.0"}
    haruhi = load_character(write_json(tmp_path, "haruhi.json", card))
    assert (haruhi.name, haruhi.scenario) == ("Haruhi", "After school, in the club room.")


def test_a_v2_character_book_is_read_as_the_characters_lore_not_its_prompt(tmp_path):
    book = {
        "extensions": {},
        "token_budget": 100,
        "scan_depth": 2,
        "entries": [
            {
                "keys": ["SOS"],
                "content": "LOREBOOK ENTRY",
                "extensions": {},
                "enabled": True,
                "insertion_order": 0,
                "case_sensitive": True,
                "name": "brigade",
            },
            {"keys": ["off"], "content": "DISABLED", "extensions": {}, "enabled": False, "insertion_order": 1},
        ],
    }
    haruhi = load_character(write_json(tmp_path, "haruhi.json", v2_card(character_book=book)))
    assert haruhi.lore is not None
    assert [(e.name, e.keys, e.case_sensitive) for e in haruhi.lore.entries] == [("brigade", ("SOS",), True)]
    assert (haruhi.lore.budget_chars, haruhi.lore.scan_depth) == (400, 2)
    # Lore enters the context only when it fires, never through the character's description.
    assert "LOREBOOK ENTRY" not in render_character_prompt(haruhi, turn("Kyon"))


def test_v1_card(tmp_path):
    card = {
        "name": "Haruhi",
        "description": "The brigade chief.",
        "personality": "",
        "scenario": "",
        "first_mes": "Hi {{user}}.",
        "mes_example": "<START>\n<USER>: hi\n<BOT>: hello",
        "avatar": "none",
        "chat": "Haruhi - 2023-5-4",
    }
    haruhi = load_character(write_json(tmp_path, "haruhi.json", card))
    assert haruhi.persona == "The brigade chief."
    assert haruhi.greeting == "Hi {{user}}."
    assert haruhi.example_dialogue == [(USER, "hi"), (CHAR, "hello")]
    assert haruhi.system_prompt == ""


def test_example_lines_before_any_speaker_are_dropped_with_a_log_line(tmp_path, caplog):
    path = write_json(tmp_path, "haruhi.json", v2_card(mes_example="*waves*\n{{user}}: hi\n{{char}}: hello"))
    with caplog.at_level(logging.WARNING, logger="bot.characters.reading"):
        haruhi = load_character(path)
    assert haruhi.example_dialogue == [(USER, "hi"), (CHAR, "hello")]
    assert any("1 example line(s)" in r.getMessage() for r in caplog.records)


# --- errors ---------------------------------------------------------------------------------

TOO_MANY_RULES = "name: Zed\npersona: A keeper.\nrules:\n" + "".join(
    f"  - Rule number {i}.\n" for i in range(MAX_RULES + 1)
)
TOO_LONG_RULE = f"name: Zed\npersona: A keeper.\nrules:\n  - {'x' * (MAX_RULE_CHARS + 1)}\n"


@pytest.mark.parametrize(
    ("filename", "content", "expected"),
    [
        ("a.yaml", "persona: A keeper.\n", "missing name"),
        ("a.yaml", "name: '  '\npersona: A keeper.\n", "missing name"),
        ("a.yaml", "name: Zed\npersnoa: A keeper.\n", "unknown top-level key 'persnoa' (did you mean 'persona'?)"),
        ("a.yaml", "name: Zed\npersona: A keeper.\n  greeting: hi\n", "invalid YAML at line 3, column"),
        ("a.json", '{"name": "Zed",\n "persona": "A keeper.",,}', "invalid JSON at line 2"),
        ("a.yaml", "name: Zed\npersona: '   '\n", "persona is empty"),
        ("a.yaml", "name: Zed\n", "persona is empty"),
        ("a.yaml", "name: Zed\npersona: [a, b]\n", "persona must be text, got a list"),
        ("a.yaml", TOO_MANY_RULES, f"{MAX_RULES + 1} rules, at most {MAX_RULES}"),
        ("a.yaml", TOO_LONG_RULE, f"rules[0] is {MAX_RULE_CHARS + 1} characters long, at most {MAX_RULE_CHARS}"),
        ("a.yaml", "name: Zed\npersona: A keeper.\nrules:\n  - Be nice to {{user}}.\n", "rules[0] uses {{user}}"),
        ("a.yaml", "name: Zed\npersona: A keeper.\nrules:\n  - Note : be kind.\n", "between quotes"),
        ("a.yaml", "name: Zed\npersona: A keeper.\nrules: Be kind.\n", "rules must be a list"),
        ("a.yaml", "name: Zed\npersona: A keeper.\nexamples:\n  - user: hi\n", "examples[0] must have exactly"),
        ("a.yaml", "name: Zed\npersona: A keeper.\nstate: [mood]\n", "state must map each name"),
        ("a.yaml", "name: Zed\npersona: A keeper.\nstate:\n  mood: 3\n", "state.mood must be a mapping"),
        ("a.yaml", "name: Zed\npersona: A keeper.\nlanguage: French\n", "language must be a language code"),
        ("a.yaml", "- name: Zed\n", "expected a mapping of keys"),
        ("a.yaml", "", "got nothing"),
        ("a.txt", "name: Zed\n", "unsupported file type '.txt'"),
        ("a.png", "", "not a PNG image"),
        ("a.json", '{"spec": "chara_card_v2", "name": "Zed"}', "data, which is missing"),
        ("a.json", '{"spec": "chara_card_v9", "data": {}}', "unsupported card spec 'chara_card_v9'"),
        ("a.json", '{"spec": "chara_card_v2", "data": {"description": "A keeper."}}', "missing data.name"),
        ("a.json", '{"name": "Zed", "description": "", "first_mes": "hi"}', "neither a description nor a personality"),
        (
            "a.json",
            '{"name": "Zed", "description": "A keeper.", "rules": ["Be kind."]}',
            "unknown top-level key 'description'",
        ),
        ("a.yaml", "name: Zed\ndescription: A keeper.\n", "unknown top-level key 'description'"),
    ],
)
def test_character_errors_are_one_sentence_naming_the_file(tmp_path, filename, content, expected):
    path = write(tmp_path, filename, content)
    with pytest.raises(CharacterError) as caught:
        load_character(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message and message.endswith(".")


def test_a_missing_file_is_a_character_error(tmp_path):
    with pytest.raises(CharacterError, match="no such file"):
        load_character(tmp_path / "nope.yaml")
