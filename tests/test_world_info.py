"""SillyTavern World Info files as a character's `lore:` file: their entries fire as the same
entries do in a card's character_book, and a field Écho cannot honour is refused by name."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.characters.character import load_character
from bot.characters.lore import load_lore_file
from bot.errors import CharacterError, LoreError
from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_chat
from tests.test_character import v2_card

# (name, keys, content, constant, order, case sensitive, whole words, disabled)
ENTRIES = [
    ("The harbour", ["harbour", "port"], "The harbour of Vellmar freezes every winter.", False, 10, False, True, False),
    ("The Guild", ["Guild"], "The Guild rules the docks.", False, 20, True, True, False),
    ("Moons", ["moon"], "Vellmar has two moons.", False, 30, False, False, False),
    ("The quays", ["/quays? of vellmar/i"], "The quays are of black stone.", False, 40, False, True, False),
    ("The sky", [], "The sky is always grey.", True, 50, False, True, False),
    ("Retired", ["harbour"], "RETIRED ENTRY", False, 60, False, True, True),
]


def world_info_entry(uid: int, name, keys, content, constant, order, case, whole, disabled) -> dict[str, Any]:
    """An entry as SillyTavern's World Info editor saves it, every field present."""
    return {
        "uid": uid, "key": keys, "keysecondary": [], "comment": name, "content": content,
        "constant": constant, "vectorized": False, "selective": True, "selectiveLogic": 0, "addMemo": True,
        "order": order, "position": 0, "disable": disabled, "excludeRecursion": False,
        "preventRecursion": False, "delayUntilRecursion": False, "probability": 100, "useProbability": True,
        "depth": 4, "group": "", "groupOverride": False, "groupWeight": 100, "scanDepth": None,
        "caseSensitive": case, "matchWholeWords": whole, "useGroupScoring": None, "automationId": "",
        "role": None, "sticky": 0, "cooldown": 0, "delay": 0, "displayIndex": uid,
        "characterFilter": {"isExclude": False, "names": [], "tags": []},
    }


def world_info() -> dict[str, Any]:
    return {"entries": {str(uid): world_info_entry(uid, *entry) for uid, entry in enumerate(ENTRIES)}}


def character_book() -> dict[str, Any]:
    return {"entries": [
        {"name": name, "keys": keys, "content": content, "constant": constant, "insertion_order": order,
         "case_sensitive": case, "enabled": not disabled, "extensions": {"match_whole_words": whole}}
        for name, keys, content, constant, order, case, whole, disabled in ENTRIES
    ]}


TEXTS = [
    "Is the harbour open?",
    "I lost my passport at the port.",
    "the guild is closed, but the Guild is not",
    "Honeymoon in Vellmar",
    "We walked along the quay of Vellmar.",
    "Nothing about the world here.",
]


def test_a_world_info_file_fires_its_entries_like_the_same_entries_in_a_card(tmp_path: Path) -> None:
    (tmp_path / "world.json").write_text(json.dumps(world_info()), encoding="utf-8")
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    (tmp_path / "card.json").write_text(json.dumps(v2_card(character_book=character_book())), encoding="utf-8")
    from_file = load_character(tmp_path / "lina.yaml").lore
    from_card = load_character(tmp_path / "card.json").lore
    assert from_file is not None and from_card is not None
    assert from_file.entries == from_card.entries
    assert [e.name for e in from_file.entries] == ["The harbour", "The Guild", "Moons", "The quays", "The sky"]
    fired = [from_file.fired(text) for text in TEXTS]
    assert fired == [from_card.fired(text) for text in TEXTS]
    assert fired == [
        {0: "harbour", 4: "(constant)"},
        {0: "port", 4: "(constant)"},
        {1: "Guild", 4: "(constant)"},
        {2: "moon", 4: "(constant)"},
        {3: "/quays? of vellmar/", 4: "(constant)"},
        {4: "(constant)"},
    ]
    for text in TEXTS:
        assert from_file.match([text], budget_chars=500, scan_depth=0) == from_card.match([text], budget_chars=500, scan_depth=0)


async def test_a_world_info_entry_reaches_the_model_through_the_real_chat(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    (tmp_path / "world.json").write_text(json.dumps(world_info()), encoding="utf-8")
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    env = chat_env(llm_server.url, tmp_path / "echo.sqlite3", CHARACTER_FILE=str(tmp_path / "lina.yaml"))
    run = await run_chat(env, tmp_path, b"Is the harbour open?\n")
    assert run.code == 0, run.stderr
    system = [r for r in llm_server.chats if r.json_schema is None][-1].context
    lore = re.search(r"<lore>\n(.*)\n</lore>", system, re.DOTALL)
    assert lore is not None
    assert "freezes every winter" in lore.group(1) and "always grey" in lore.group(1)
    assert "RETIRED" not in system and "black stone" not in system


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"keysecondary": ["winter"]}, "secondary keys (keysecondary, selective) are not supported"),
        ({"probability": 40}, "probability 40 is not supported"),
        ({"group": "weather"}, "group (inclusion groups) is not supported"),
        ({"sticky": 3}, "sticky (timed effects) is not supported"),
        ({"scanDepth": 10}, "scanDepth (a scan depth per entry) is not supported"),
        ({"vectorized": True}, "vectorized (vector matching) is not supported"),
        ({"characterFilter": {"isExclude": False, "names": ["Lina"], "tags": []}}, "characterFilter (character filters)"),
        ({"matchScenario": True}, "unknown World Info field 'matchScenario'"),
        ({"content": ""}, "content must be a non-empty text"),
    ],
)
def test_a_world_info_field_echo_cannot_honour_is_refused_by_name(tmp_path: Path, change: dict, said: str) -> None:
    book = world_info()
    book["entries"]["0"].update(change)
    (tmp_path / "world.json").write_text(json.dumps(book), encoding="utf-8")
    with pytest.raises(LoreError) as caught:
        load_lore_file(tmp_path / "world.json")
    assert str(caught.value).startswith(f"{tmp_path / 'world.json'}: entries[") and said in str(caught.value)


def test_features_left_at_their_neutral_value_and_secondary_keys_without_selective_load(tmp_path: Path) -> None:
    book = world_info()
    book["entries"]["0"].update(selective=False, keysecondary=["winter"], matchScenario=False, triggers=[])
    book["name"] = "Vellmar"
    (tmp_path / "world.json").write_text(json.dumps(book), encoding="utf-8")
    assert len(load_lore_file(tmp_path / "world.json").entries) == 5


def test_a_character_naming_a_bad_world_info_file_does_not_start(tmp_path: Path) -> None:
    book = world_info()
    book["entries"]["1"]["group"] = "weather"
    (tmp_path / "world.json").write_text(json.dumps(book), encoding="utf-8")
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    with pytest.raises(CharacterError, match=r"lore: .*entries\['1'\]: group \(inclusion groups\) is not supported"):
        load_character(tmp_path / "lina.yaml")


def test_a_world_info_file_beside_the_characters_of_a_folder_is_lore_not_a_character(tmp_path: Path) -> None:
    from bot.characters.cast import load_cast

    (tmp_path / "vellmar.json").write_text(json.dumps(world_info()), encoding="utf-8")
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: vellmar.json\n", encoding="utf-8")
    cast = load_cast(tmp_path, None)
    assert list(cast.characters) == ["lina"]
    assert cast.characters["lina"].lore is not None and len(cast.characters["lina"].lore.entries) == 5
