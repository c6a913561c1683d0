"""Each World Info semantic, as SillyTavern's documentation states it (docs.sillytavern.app,
"World Info"; quoted before each test), on entries read from World Info files by the real reader.

The scan, the keys' logic, groups, probability, recursion, timed effects, budget and positions
are `Lorebook.match`'s; the positions in the prompt are bot/engine/prompting.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.characters.lore_files import load_lore_file
from bot.characters.lore_timing import LoreClock
from bot.characters.lorebook import Lorebook
from bot.engine.prompting import at_depths, build_reply_messages, render_lore, reply_head

_TEMPLATE: dict[str, Any] = {
    "keysecondary": [],
    "comment": "",
    "constant": False,
    "vectorized": False,
    "selective": True,
    "selectiveLogic": 0,
    "addMemo": True,
    "order": 100,
    "position": 0,
    "disable": False,
    "excludeRecursion": False,
    "preventRecursion": False,
    "delayUntilRecursion": False,
    "probability": 100,
    "useProbability": True,
    "depth": 4,
    "group": "",
    "groupOverride": False,
    "groupWeight": 100,
    "scanDepth": None,
    "caseSensitive": None,
    "matchWholeWords": None,
    "useGroupScoring": None,
    "automationId": "",
    "role": None,
    "sticky": 0,
    "cooldown": 0,
    "delay": 0,
}


def world(tmp_path: Path, *entries: dict[str, Any], **book: Any) -> Lorebook:
    """A World Info file of these entries (SillyTavern's template filled in), read as a file."""
    document = {**book, "entries": {str(uid): {**_TEMPLATE, "uid": uid, **e} for uid, e in enumerate(entries)}}
    path = tmp_path / f"world{len(list(tmp_path.glob('world*.json')))}.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return load_lore_file(path)


def entry(name: str, keys: list[str], content: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"comment": name, "key": keys, "content": content or f"About {name}.", **fields}


def kept(
    book: Lorebook,
    *messages: str,
    budget: int = 10_000,
    depth: int = 4,
    clock: LoreClock | None = None,
    seed: str = "s",
) -> list[str]:
    return [
        h.name for h in book.match(list(messages), budget_chars=budget, scan_depth=depth, clock=clock, seed=seed).kept
    ]


# --- keys -------------------------------------------------------------------------------------


def test_keys_are_not_case_sensitive_by_default_and_an_entry_may_ask_for_case(tmp_path: Path) -> None:
    # "Keys are not case-sensitive by default (this is configurable)." / "keys 'rose' and 'Rose'
    # will be treated differently".
    book = world(tmp_path, entry("Any", ["rose"]), entry("Cased", ["Rose"], caseSensitive=True))
    assert kept(book, "A ROSE in the garden") == ["Any"]
    assert kept(book, "Rose came in") == ["Any", "Cased"]


def test_a_one_word_key_matches_whole_words_and_a_longer_key_as_written(tmp_path: Path) -> None:
    # "Entries with keys containing only one word will be matched only if the entire word is
    # present in the search text. Enabled by default. [...] 'king' [...] 'long live the king'
    # would be matched, but 'it's not to my liking' wouldn't."
    book = world(
        tmp_path,
        entry("King", ["king"]),
        entry("Loose", ["king"], matchWholeWords=False),
        entry("Two", ["dragon king"]),
    )
    assert kept(book, "long live the king") == ["King", "Loose"]
    assert kept(book, "it's not to my liking") == ["Loose"]
    assert kept(book, "the dragon kingdom") == ["Loose", "Two"], "a key of several words is matched as written"


def test_a_regex_key_is_matched_by_its_flags_alone(tmp_path: Path) -> None:
    # "If a defined key is a valid regex (Javascript regex style, with / as delimiters. All flags
    # are allowed), it will be treated as such" — and overrides the entry's other options.
    book = world(tmp_path, entry("Insensitive", ["/storm(s)? over (the )?bay/i"]), entry("Sensitive", ["/Storm/"]))
    assert kept(book, "STORMS over the bay") == ["Insensitive"]
    assert kept(book, "a Storm over bay") == ["Insensitive", "Sensitive"]


@pytest.mark.parametrize(
    ("logic", "text", "fires"),
    [
        # "AND ANY = Activates the entry only if the primary key and Any one of the optional filter keys"
        (0, "the tower and the rain", True),
        (0, "the tower in the sun", False),
        # "NOT ALL = Prevents activation [...] if all of the optional filters are in scanned context."
        (1, "the tower, the rain and the wind", False),
        (1, "the tower and the rain", True),
        # "NOT ANY = Activates the entry only if the primary key and None of the optional filter keys"
        (2, "the tower in the sun", True),
        (2, "the tower and the wind", False),
        # "AND ALL = Activates the entry only if the primary key and ALL of the optional filter keys"
        (3, "the tower, the rain and the wind", True),
        (3, "the tower and the rain", False),
    ],
)
def test_the_four_logics_of_the_optional_filter(tmp_path: Path, logic: int, text: str, fires: bool) -> None:
    book = world(tmp_path, entry("Tower", ["tower"], keysecondary=["rain", "wind"], selectiveLogic=logic))
    assert (kept(book, text) == ["Tower"]) is fires
    assert kept(book, "the rain and the wind") == [], "never without the primary key"


def test_optional_filter_keys_are_ignored_when_the_entry_is_not_selective(tmp_path: Path) -> None:
    book = world(tmp_path, entry("Tower", ["tower"], keysecondary=["rain"], selective=False))
    assert kept(book, "the tower in the sun") == ["Tower"]


def test_a_constant_entry_is_always_in(tmp_path: Path) -> None:
    # "🔵 (Blue Circle) = The entry would always be present in the prompt."
    book = world(tmp_path, entry("Sky", [], constant=True), entry("Port", ["port"]))
    assert kept(book, "nothing to see") == ["Sky"]


# --- scan depth ---------------------------------------------------------------------------------


def test_the_book_and_an_entry_scan_as_many_recent_messages_as_they_say(tmp_path: Path) -> None:
    # "If set to 1, then SillyTavern only scans the last message. 2 = two last messages, etc."
    # "Can be overridden on an entry level." ; "If set to 0, then only recursed entries [...]"
    book = world(
        tmp_path,
        entry("Book", ["harbour"]),
        entry("Deep", ["harbour"], scanDepth=3),
        entry("None", ["harbour"], scanDepth=0),
        scan_depth=1,
    )
    assert kept(book, "the harbour", "hello") == ["Deep"]
    assert kept(book, "the harbour", "one", "two") == ["Deep"]
    assert kept(book, "the harbour", "one", "two", "three") == []
    assert kept(book, "hello the harbour") == ["Book", "Deep"]


def test_without_a_book_depth_the_setting_counts_messages_besides_the_one_answered(tmp_path: Path) -> None:
    book = world(tmp_path, entry("Port", ["harbour"]))
    assert kept(book, "the harbour", "a", "b", depth=2) == ["Port"]
    assert kept(book, "the harbour", "a", "b", "c", depth=2) == []


# --- order and position ---------------------------------------------------------------------------


def test_a_larger_order_comes_later_in_the_block(tmp_path: Path) -> None:
    # "an entry with Order number 100 will appear in the context before an entry with Order
    # number 250."
    book = world(tmp_path, entry("Late", ["sea"], order=250), entry("Early", ["sea"], order=100))
    assert kept(book, "the sea") == ["Early", "Late"]


def test_each_insertion_position_has_its_place_in_the_prompt(tmp_path: Path) -> None:
    # Before Char Defs (0) → before the description; After Char Defs (1) and the example
    # messages' positions (5, 6) → the lore block after the character; Top/Bottom of AN (2, 3) →
    # depth 4, where SillyTavern's author's note sits; @ D (4) → that depth; Outlet (7) → nowhere.
    book = world(
        tmp_path,
        entry("Before", ["sea"], "BEFORE-TEXT", position=0),
        entry("After", ["sea"], "AFTER-TEXT", position=1),
        entry("Note", ["sea"], "NOTE-TEXT", position=2),
        entry("Deep", ["sea"], "DEPTH-TEXT", position=4, depth=1),
        entry("Examples", ["sea"], "EXAMPLE-TEXT", position=5),
        entry("Outlet", ["sea"], "OUTLET-TEXT", position=7, outletName="x"),
    )
    hits = book.match(["the sea"], budget_chars=10_000, scan_depth=4).hits
    history = [f"line {n}" for n in range(6)]
    from bot.engine.prompting import ChannelLine

    messages = build_reply_messages(
        head=reply_head(
            character_prompt=f"{render_lore(hits, 'before')}\n\nYou are Lina.", character_name="Lina", rules=[]
        ),
        user_name="Bob",
        memories=[],
        story_context="",
        history=[ChannelLine("Ann", line) for line in history],
        message="the sea",
        lore=hits,
        depths=at_depths(hits),
    ).messages
    system = messages[0]["content"]
    assert system.index("BEFORE-TEXT") < system.index("You are Lina.")
    # After the character and its memories: with the turn's note, which the head does not hold
    # (the lore changes from turn to turn; the head stays the same).
    note = messages[-2]["content"]
    assert "AFTER-TEXT" not in system and note.index("</memories>") < note.index("AFTER-TEXT")
    assert "EXAMPLE-TEXT" in note
    chat = [m["content"] for m in messages[1:]]
    assert "DEPTH-TEXT" in chat[-3] and chat[-1] == "Bob: the sea", "depth 1: before the last message (and its note)"
    assert "NOTE-TEXT" in chat[-7] and chat[-6] == "Ann: line 3", "depth 4: before the fourth message from the end"
    assert "OUTLET-TEXT" not in json.dumps(messages)
    assert "position 7 (an outlet: entries never inserted)" in book.ignored


# --- probability --------------------------------------------------------------------------------


def test_probability_is_a_draw_the_same_message_draws_the_same(tmp_path: Path) -> None:
    # "Probability = 100 means that the entry will be inserted on every activation. [...] 50 [...]
    # with a 1:1 chance. [...] 0 means that the entry will NOT be inserted"
    book = world(
        tmp_path,
        entry("Always", ["moon"], probability=100),
        entry("Half", ["moon"], probability=50),
        entry("Never", ["moon"], probability=0),
        entry("Off", ["moon"], probability=0, useProbability=False),
    )
    draws = [kept(book, "the moon", seed=f"turn {n}") for n in range(400)]
    assert all("Always" in d and "Off" in d and "Never" not in d for d in draws)
    assert 150 < sum("Half" in d for d in draws) < 250
    assert all(kept(book, "the moon", seed="turn 7") == draws[7] for _ in range(5)), "reproducible for a message"
    left = book.match(["the moon"], budget_chars=10_000, scan_depth=4, seed="turn 0").hits
    assert {h.name: h.left_out for h in left if not h.kept}["Never"] == "probability"


# --- inclusion groups -------------------------------------------------------------------------------


def test_one_entry_of_an_inclusion_group_is_inserted(tmp_path: Path) -> None:
    # "If multiple entries having the same group label were activated, only one will be inserted"
    # ; "chosen randomly based on their Group Weight"
    book = world(
        tmp_path,
        entry("Rain", ["weather"], group="sky"),
        entry("Sun", ["weather"], group="sky", groupWeight=300),
        entry("Fog", ["weather"], group="sky, mist"),
        entry("Mist", ["weather"], group="mist"),
    )
    draws = [kept(book, "the weather", seed=f"turn {n}") for n in range(400)]
    assert all(len(set(d) & {"Rain", "Sun", "Fog"}) == 1 for d in draws)
    wins = {name: sum(name in d for d in draws) for name in ("Rain", "Sun", "Fog")}
    assert wins["Sun"] > wins["Rain"] + 100 and wins["Sun"] > wins["Fog"] + 100, wins
    # "A single entry can be part of multiple inclusion groups [...] If that entry is triggered,
    # it will disable all other entries that are part of any of its groups."
    assert all(not ({"Fog", "Mist"} <= set(d)) for d in draws)


def test_prioritize_inclusion_picks_the_highest_order(tmp_path: Path) -> None:
    # "the one with the highest 'Order' value will be selected"
    book = world(
        tmp_path,
        entry("Low", ["weather"], group="sky", groupOverride=True, order=10),
        entry("High", ["weather"], group="sky", groupOverride=True, order=90),
        entry("Plain", ["weather"], group="sky", order=200),
    )
    assert {tuple(kept(book, "weather", seed=f"t{n}")) for n in range(30)} == {("High",)}


def test_group_scoring_keeps_the_entries_matching_the_most_keys(tmp_path: Path) -> None:
    # "Entry 1. Keys: song, sing, Black Cat. Group: songs / Entry 2. Keys: song, sing, Ghosts. [...]
    # `sing me a song` can activate either entry [...] `sing me a song about Ghosts` will activate
    # only Entry 2"
    book = world(
        tmp_path,
        entry("Black Cat", ["song", "sing", "Black Cat"], group="songs", useGroupScoring=True),
        entry("Ghosts", ["song", "sing", "Ghosts"], group="songs", useGroupScoring=True),
    )
    either = {tuple(kept(book, "sing me a song", seed=f"t{n}")) for n in range(60)}
    assert either == {("Black Cat",), ("Ghosts",)}
    assert {tuple(kept(book, "sing me a song about Ghosts", seed=f"t{n}")) for n in range(30)} == {("Ghosts",)}


# --- recursion ------------------------------------------------------------------------------------


def test_entries_activate_other_entries_by_their_keywords(tmp_path: Path) -> None:
    # "Entry #1 Keyword: Bessie Content: Bessie is a cow and is friends with Rufus. / Entry #2
    # Keyword: Rufus Content: Rufus is a dog. Both of them will be pulled into the context if the
    # message text mentions just Bessie."
    bessie = entry("Bessie", ["Bessie"], "Bessie is a cow and is friends with Rufus.")
    rufus = entry("Rufus", ["Rufus"], "Rufus is a dog.")
    assert kept(world(tmp_path, bessie, rufus), "Bessie is here") == ["Bessie", "Rufus"]
    hits = world(tmp_path, bessie, rufus).match(["Bessie is here"], budget_chars=10_000, scan_depth=4).hits
    assert [(h.name, h.how) for h in hits] == [("Bessie", "key"), ("Rufus", "recursion")]
    # A book that turns recursion off (`recursive_scanning: false`) does not.
    assert kept(world(tmp_path, bessie, rufus, recursive_scanning=False), "Bessie is here") == ["Bessie"]


def test_the_three_recursion_settings_of_an_entry(tmp_path: Path) -> None:
    bessie = entry("Bessie", ["Bessie"], "Bessie is a cow and is friends with Rufus.")
    # "Non-recursable: [...] the entry will not be activated by other entries."
    assert kept(world(tmp_path, bessie, entry("Rufus", ["Rufus"], excludeRecursion=True)), "Bessie") == ["Bessie"]
    # "Prevent further recursion: [...] once this entry is activated, it will not trigger any other"
    assert kept(world(tmp_path, {**bessie, "preventRecursion": True}, entry("Rufus", ["Rufus"])), "Bessie") == [
        "Bessie"
    ]
    # "Delay until recursion: This entry will only be activated during recursive checks"
    delayed = entry("Rufus", ["Rufus"], delayUntilRecursion=True)
    assert kept(world(tmp_path, delayed), "Rufus barks") == []
    assert kept(world(tmp_path, bessie, delayed), "Bessie and Rufus") == ["Bessie", "Rufus"]


def test_recursion_is_bounded_however_entries_name_each_other(tmp_path: Path) -> None:
    chain = [entry(f"E{n}", [f"k{n}"], f"Then k{n + 1}.") for n in range(40)]
    names = kept(world(tmp_path, *chain), "k0")
    from bot.characters.lore import MAX_RECURSION_STEPS

    assert names == [f"E{n}" for n in range(MAX_RECURSION_STEPS + 1)]


# --- timed effects ----------------------------------------------------------------------------------


def test_sticky_cooldown_and_delay_follow_the_documented_example_in_turns(tmp_path: Path) -> None:
    # "Entry configuration: sticky = 3, cooldown = 2, delay = 2. Message 0: delay / Message 1:
    # entry activated / Message 2: sticky / Message 3: sticky / Message 4: sticky / Message 5:
    # cooldown / Message 6: cooldown / Message 7: entry can be activated again" — in Écho, turns.
    book = world(tmp_path, entry("Storm", ["storm"], sticky=3, cooldown=2, delay=2))
    clock = LoreClock()
    seen = []
    for turn in range(8):
        text = "a storm" if turn in (0, 1, 5, 6, 7) else "calm"
        result = book.match([text], budget_chars=10_000, scan_depth=0, clock=clock)
        state = {h.name: (h.how if h.kept else h.left_out) for h in result.hits}.get("Storm")
        seen.append(state)
        clock = LoreClock.from_record(result.clock.to_record())  # as the turn record keeps it
    assert seen == ["delay", "key", "sticky", "sticky", "sticky", "cooldown", "cooldown", "key"]


def test_a_sticky_entry_skips_its_probability_roll_and_a_firing_does_not_restart_effects(tmp_path: Path) -> None:
    # "Stickied entries ignore probability checks on consequent scans until they expire." ;
    # "Consequent triggering of keywords does not refresh the effect duration if it's already active."
    book = world(tmp_path, entry("Storm", ["storm"], sticky=2, probability=50))
    seed = next(f"t{n}" for n in range(100) if kept(book, "storm", seed=f"t{n}") == ["Storm"])
    first = book.match(["storm"], budget_chars=10_000, scan_depth=0, clock=LoreClock(), seed=seed)
    clock = first.clock
    states = []
    for n in range(4):
        result = book.match(["storm"], budget_chars=10_000, scan_depth=0, clock=clock, seed=f"other {n}")
        states.append(next((h.how for h in result.hits if h.kept), None))
        clock = result.clock
    assert states[:2] == ["sticky", "sticky"], "two sticky turns, whatever the draw"


# --- budget ------------------------------------------------------------------------------------------


def test_constant_entries_are_kept_first_and_the_rest_by_relevance_to_the_message(tmp_path: Path) -> None:
    # "Constant entries will be inserted first." Then, where SillyTavern takes larger orders
    # first, Écho takes what the message answered names before what an earlier message named.
    book = world(
        tmp_path,
        entry("Old", ["harbour"], "h" * 300, order=900),
        entry("Sky", [], "s" * 300, constant=True),
        entry("Asked", ["storm"], "x" * 300, order=1),
        entry("Storm lore", ["storm"], "y" * 300, order=800),
    )
    hits = book.match(["the harbour at dawn", "what about the storm?"], budget_chars=900, scan_depth=4).hits
    assert [h.name for h in hits if h.kept] == ["Asked", "Sky", "Storm lore"], "kept, in the block's order"
    assert {h.name: h.left_out for h in hits if not h.kept} == {"Old": "budget"}


def test_entries_named_by_the_messages_come_before_those_named_by_other_entries(tmp_path: Path) -> None:
    # "Entries inserted by directly mentioning their keys have higher priority than those that
    # were mentioned in other entries' contents."
    book = world(
        tmp_path,
        entry("Asked", ["storm"], "The storm brings the tide." + "x" * 274),
        entry("Named", ["tide"], "t" * 300, order=900),
        entry("Earlier", ["harbour"], "h" * 300),
    )
    hits = book.match(["the harbour at dawn", "what about the storm?"], budget_chars=700, scan_depth=4).hits
    assert [(h.name, h.how, h.kept) for h in hits] == [
        ("Asked", "key", True),
        ("Earlier", "key", True),
        ("Named", "recursion", False),
    ]


def test_a_constant_entry_is_kept_even_past_the_budget(tmp_path: Path) -> None:
    book = world(tmp_path, entry("Sky", [], "s" * 500, constant=True), entry("Port", ["port"], "p" * 10))
    assert kept(book, "the port", budget=100) == ["Sky"]
    assert book.constant_chars == 500


def test_ignore_budget_entries_are_kept_like_constant_ones(tmp_path: Path) -> None:
    book = world(tmp_path, entry("Big", ["port"], "b" * 500, ignoreBudget=True), entry("Small", ["port"], "p" * 50))
    assert kept(book, "the port", budget=100) == ["Big", "Small"]


# --- decorators and additional sources -------------------------------------------------------------


def test_the_activate_and_dont_activate_decorators(tmp_path: Path) -> None:
    book = world(
        tmp_path, entry("On", ["nothing"], "@@activate\nAlways here."), entry("Off", ["sea"], "@@dont_activate\nNever.")
    )
    result = book.match(["the sea"], budget_chars=10_000, scan_depth=4).hits
    assert [(h.name, h.content) for h in result if h.kept] == [("On", "Always here.")]


def test_an_entry_may_match_the_characters_own_description(tmp_path: Path) -> None:
    # "Character Description: Matches against the character description."
    from bot.characters.lore_entries import Reading

    path = tmp_path / "w.json"
    path.write_text(
        json.dumps(
            {"entries": {"0": {**_TEMPLATE, "uid": 0, **entry("Elf", ["elf"], matchCharacterDescription=True)}}}
        ),
        encoding="utf-8",
    )
    book = load_lore_file(path, reading=Reading(path, char="Lina", sources={"description": "Lina is an elf."}))
    assert kept(book, "hello") == ["Elf"]
