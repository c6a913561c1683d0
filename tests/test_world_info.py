"""SillyTavern lorebooks as a character's `lore:` file or a card's `character_book`: every shape
real files have loads unchanged (tests/data/sillytavern/README.md says whose shapes), one reader
gives the same entries for the World Info and the card forms, and what Écho does not act on is
ignored with one log line per file, never refused."""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from bot.characters.character import load_character
from bot.characters.lore_entries import Reading
from bot.characters.lore_files import load_lore_file
from bot.errors import CharacterError, LoreError
from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_chat
from tests.test_character import v2_card

DATA = Path(__file__).parent / "data" / "sillytavern"
EXPORTS = sorted(p.name for p in DATA.glob("vellmar_*.json"))
NAMES = ["The harbour", "The Guild", "Moons", "The quays", "The sky"]
TEXTS = [
    "Is the harbour open?",
    "I lost my passport at the port.",
    "the guild is closed, but the Guild is not",
    "Honeymoon in Vellmar",
    "We walked along the QUAY of Vellmar.",
    "Nothing about the world here.",
]
FIRED = [
    {0: "harbour", 4: "(constant)"},
    {0: "port", 4: "(constant)"},
    {1: "Guild", 4: "(constant)"},
    {2: "moon", 4: "(constant)"},
    {3: "/quays? of vellmar/", 4: "(constant)"},
    {4: "(constant)"},
]


def character_book() -> dict[str, Any]:
    """The Vellmar entries as a V2 card's character_book, as SillyTavern exports a card."""
    world = json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8"))
    return {
        "entries": [
            {
                "id": int(uid),
                "keys": e["key"],
                "secondary_keys": e["keysecondary"],
                "comment": e["comment"],
                "content": e["content"],
                "constant": e["constant"],
                "selective": e["selective"],
                "insertion_order": e["order"],
                "enabled": not e["disable"],
                "position": "before_char",
                "extensions": {
                    "position": 0,
                    "case_sensitive": e["caseSensitive"],
                    "match_whole_words": e["matchWholeWords"],
                    "probability": 100,
                    "useProbability": True,
                    "depth": 4,
                    "selectiveLogic": 0,
                },
            }
            for uid, e in world["entries"].items()
        ]
    }


@pytest.mark.parametrize("export", EXPORTS)
def test_every_shape_of_world_info_loads_unchanged_and_fires_like_the_cards_book(tmp_path: Path, export: str) -> None:
    (tmp_path / "card.json").write_text(json.dumps(v2_card(character_book=character_book())), encoding="utf-8")
    book = load_lore_file(DATA / export)
    card = load_character(tmp_path / "card.json").lore
    assert card is not None
    assert [e.name for e in book.entries] == NAMES, "the disabled entry is left out"
    assert [e.keys for e in book.entries] == [e.keys for e in card.entries]
    assert [book.fired(text) for text in TEXTS] == [card.fired(text) for text in TEXTS] == FIRED
    assert book.ignored == (), f"{export} holds nothing Écho leaves aside"


def test_book_settings_exporters_write_are_read(tmp_path: Path) -> None:
    hybrid = load_lore_file(DATA / "vellmar_hybrid_export.json")
    assert (hybrid.budget_chars, hybrid.scan_depth, hybrid.recursive) == (800 * 4, 4, False)
    assert [e.priority for e in hybrid.entries] == [10] * 5
    v3 = load_lore_file(DATA / "vellmar_lorebook_v3.json")
    assert (v3.budget_chars, v3.scan_depth, v3.recursive) == (800 * 4, 5, False)
    assert {e.position for e in v3.entries} == {"before"}


def test_a_field_echo_does_not_act_on_is_ignored_with_one_log_line_per_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8"))
    world["entries"]["0"].update(vectorized=True, automationId="weather", futureField=3)
    world["entries"]["1"].update(futureField=4, matchPersonaDescription=True)
    world["world_info_settings"] = {"world_info_depth": 2}
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="bot.characters.world_info"):
        book = load_lore_file(tmp_path / "world.json")
    assert [e.name for e in book.entries] == NAMES, "nothing refused, nothing dropped"
    assert set(book.ignored) == {
        "vectorized (matching by embeddings)",
        "automationId (Quick Reply scripts)",
        "futureField",
        "matchPersonaDescription (Écho has no persona)",
        "world_info_settings",
    }
    lines = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(lines) == 1 and all(name in lines[0] for name in book.ignored)


@pytest.mark.parametrize(
    ("document", "names"),
    [
        # Agnai's memory book, NovelAI's lorebook and Risu's, which SillyTavern converts on import.
        (
            {
                "kind": "memory",
                "name": "V",
                "entries": [
                    {"name": "Port", "keywords": ["harbour"], "entry": "It freezes.", "weight": 5, "enabled": True}
                ],
            },
            ["Port"],
        ),
        (
            {
                "lorebookVersion": 5,
                "entries": [{"displayName": "Port", "keys": ["harbour"], "text": "It freezes.", "enabled": True}],
            },
            ["Port"],
        ),
        (
            {
                "type": "risu",
                "ver": 1,
                "data": [
                    {
                        "key": "harbour, port",
                        "secondkey": "",
                        "comment": "Port",
                        "content": "It freezes.",
                        "insertorder": 100,
                        "alwaysActive": False,
                        "selective": False,
                    }
                ],
            },
            ["Port"],
        ),
    ],
)
def test_the_lorebooks_sillytavern_converts_on_import_are_read_as_it_converts_them(
    tmp_path: Path, document: dict[str, Any], names: list[str]
) -> None:
    (tmp_path / "book.json").write_text(json.dumps(document), encoding="utf-8")
    book = load_lore_file(tmp_path / "book.json")
    assert [e.name for e in book.entries] == names
    assert book.fired("the harbour") == {0: "harbour"}


def test_empty_and_keyless_entries_are_skipped_as_sillytavern_never_fires_them(tmp_path: Path) -> None:
    world = json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8"))
    world["entries"]["7"] = {**world["entries"]["0"], "uid": 7, "content": ""}
    world["entries"]["8"] = {**world["entries"]["0"], "uid": 8, "key": [], "comment": "Notes"}
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    assert [e.name for e in load_lore_file(tmp_path / "world.json").entries] == NAMES


def test_an_unnamed_entry_is_named_by_its_first_key(tmp_path: Path) -> None:
    book = load_lore_file(DATA / "vellmar_st_default.json")
    world = json.loads((DATA / "vellmar_st_default.json").read_text(encoding="utf-8"))
    for entry in world["entries"].values():
        entry["comment"] = ""
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    unnamed = load_lore_file(tmp_path / "world.json")
    assert [e.name for e in unnamed.entries] == ["harbour", "Guild", "moon", "/quays? of vellmar/", "#4"]
    assert len(book.entries) == len(unnamed.entries)


def test_the_character_filter_keeps_an_entry_for_the_characters_it_names(tmp_path: Path) -> None:
    world = json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8"))
    world["entries"]["0"]["characterFilter"] = {"isExclude": False, "names": ["lina"], "tags": []}
    world["entries"]["1"]["characterFilter"] = {"isExclude": True, "names": ["lina"], "tags": []}
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    for_lina = load_lore_file(tmp_path / "world.json", reading=Reading(tmp_path, char="Lina", char_key="lina"))
    for_marc = load_lore_file(tmp_path / "world.json", reading=Reading(tmp_path, char="Marc", char_key="marc"))
    assert "The harbour" in [e.name for e in for_lina.entries] and "The Guild" not in [e.name for e in for_lina.entries]
    assert "The harbour" not in [e.name for e in for_marc.entries] and "The Guild" in [e.name for e in for_marc.entries]


def test_an_entry_for_other_generation_types_never_fires_and_is_named(tmp_path: Path) -> None:
    world = json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8"))
    world["entries"]["0"]["triggers"] = ["continue", "impersonate"]
    world["entries"]["1"]["triggers"] = ["normal", "swipe"]
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    book = load_lore_file(tmp_path / "world.json")
    assert [e.name for e in book.entries] == NAMES[1:]
    assert book.ignored == ("triggers without normal (such entries never fire in Écho)",)


def test_a_character_book_and_a_world_info_file_go_through_one_reader(tmp_path: Path) -> None:
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    (tmp_path / "world.json").write_text(
        (DATA / "vellmar_st_export.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "card.json").write_text(json.dumps(v2_card(character_book=character_book())), encoding="utf-8")
    from_file, from_card = load_character(tmp_path / "lina.yaml").lore, load_character(tmp_path / "card.json").lore
    assert from_file is not None and from_card is not None
    assert [(e.name, e.keys, e.case_sensitive, e.whole_words, e.constant, e.order) for e in from_file.entries] == [
        (e.name, e.keys, e.case_sensitive, e.whole_words, e.constant, e.order) for e in from_card.entries
    ]
    for text in TEXTS:
        file_hits = from_file.match([text], budget_chars=500, scan_depth=0).hits
        card_hits = from_card.match([text], budget_chars=500, scan_depth=0).hits
        assert [(h.name, h.kept) for h in file_hits] == [(h.name, h.kept) for h in card_hits]


async def test_a_world_info_entry_reaches_the_model_through_the_real_chat(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    (tmp_path / "world.json").write_text(
        (DATA / "vellmar_hybrid_export.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    env = chat_env(llm_server.url, tmp_path / "echo.sqlite3", CHARACTER_FILE=str(tmp_path / "lina.yaml"))
    run = await run_chat(env, tmp_path, b"Is the harbour open?\n")
    assert run.code == 0, run.stderr
    system = [r for r in llm_server.chats if r.json_schema is None][-1].context
    lore = re.findall(r"<lore>\n(.*?)\n</lore>", system, re.DOTALL)
    assert lore and "freezes every winter" in "".join(lore) and "always grey" in "".join(lore)
    assert "RETIRED" not in system and "black stone" not in system


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"content": 3}, "content must be a non-empty text"),
        ({"key": [3]}, "keys must be a list of texts"),
    ],
)
def test_a_broken_entry_is_refused_by_name(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    world = copy.deepcopy(json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8")))
    world["entries"]["0"].update(change)
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    with pytest.raises(LoreError) as caught:
        load_lore_file(tmp_path / "world.json")
    assert str(caught.value).startswith(f"{tmp_path / 'world.json'}: entries['0']") and said in str(caught.value)


def test_an_invalid_regex_key_is_a_plain_key_as_in_sillytavern(tmp_path: Path) -> None:
    world = json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8"))
    world["entries"]["1"]["key"] = ["/guild(/"]
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    book = load_lore_file(tmp_path / "world.json")
    assert book.fired("the /guild(/ mark") == {1: "/guild(/", 4: "(constant)"}
    assert book.ignored == ("key '/guild(/' (not a valid regular expression: matched as plain text)",)


def test_a_character_naming_a_broken_world_info_file_does_not_start(tmp_path: Path) -> None:
    world = json.loads((DATA / "vellmar_st_export.json").read_text(encoding="utf-8"))
    world["entries"]["1"]["content"] = ["not", "a", "text"]
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    with pytest.raises(CharacterError, match=r"lore: .*entries\['1'\]: content must be a non-empty text"):
        load_character(tmp_path / "lina.yaml")


def test_a_world_info_file_beside_the_characters_of_a_folder_is_lore_not_a_character(tmp_path: Path) -> None:
    from bot.characters.cast import load_cast

    for name in EXPORTS:
        (tmp_path / name).write_text((DATA / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "lina.yaml").write_text(
        "name: Lina\npersona: Une marinière.\nlore: vellmar_list_export.json\n", encoding="utf-8"
    )
    cast = load_cast(tmp_path, None)
    assert list(cast.characters) == ["lina"]
    assert cast.characters["lina"].lore is not None and len(cast.characters["lina"].lore.entries) == 5


def test_a_keys_char_macro_is_the_characters_name_as_sillytavern_substitutes_it(tmp_path: Path) -> None:
    world = {
        "entries": {
            "0": {"uid": 0, "key": ["{{char}}'s ship"], "keysecondary": [], "content": "The Gull, a sloop."},
            "1": {"uid": 1, "key": ["{{user}}"], "keysecondary": [], "content": "Who asks."},
        }
    }
    (tmp_path / "world.json").write_text(json.dumps(world), encoding="utf-8")
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    lore = load_character(tmp_path / "lina.yaml").lore
    assert lore is not None and lore.fired("Where is Lina's ship?") == {0: "Lina's ship"}
    assert lore.ignored == ("key '{{user}}' (a macro of the turn: matched as written)",)


def test_a_v3_book_with_use_regex_reads_every_key_as_a_pattern(tmp_path: Path) -> None:
    book = {
        "spec": "lorebook_v3",
        "data": {
            "entries": [
                {
                    "keys": ["quays? of vellmar"],
                    "content": "Black stone.",
                    "enabled": True,
                    "insertion_order": 1,
                    "use_regex": True,
                    "extensions": {},
                },
                {
                    "keys": ["quays? of vellmar"],
                    "content": "Plain words.",
                    "enabled": True,
                    "insertion_order": 2,
                    "use_regex": False,
                    "extensions": {},
                },
            ]
        },
    }
    (tmp_path / "book.json").write_text(json.dumps(book), encoding="utf-8")
    lore = load_lore_file(tmp_path / "book.json")
    assert lore.fired("the quays of vellmar") == {0: "/quays? of vellmar/"}
    assert lore.fired("the quays? of vellmar") == {1: "quays? of vellmar"}, "without use_regex, the words as written"
