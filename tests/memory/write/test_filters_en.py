"""The write path's filters on English memories, the French cases' counterparts, and the group
scene's guard (a memory naming another person of the channel) in both languages."""

from __future__ import annotations

import pytest

from bot.memory.write.filters import about_someone_else, check_candidate
from bot.memory.write.negation import flipped_negation

CHARACTER = "Echo"


def rejected_by(text: str, **kwargs) -> str | None:  # type: ignore[no-untyped-def]
    rejection = check_candidate(text, 0.95, character_name=CHARACTER, user_name="Sam", **kwargs)
    return rejection.filter if rejection else None


@pytest.mark.parametrize(
    "text",
    [
        "Echo loves jasmine tea.",
        "The character lives in a tavern.",
        "The bot likes jazz.",
        "Echo's favourite colour is blue.",
        "The tavern is lit by candles.",
        "It is raining on the harbour.",
        "There is a fireplace in the tavern.",
        "This town has two moons.",
        "The harbour of Vellmar freezes every winter.",  # lore told back by the character
    ],
)
def test_english_memories_about_the_character_or_the_setting_are_dropped(text):
    assert rejected_by(text) == "not_about_user"


@pytest.mark.parametrize(
    "text",
    [
        "The user likes jazz.",
        "She works nights.",
        "He lives in Leeds.",
        "They are vegetarian.",
        "Coffee is his favourite drink.",
        "The user gives flowers to Echo.",
        "Echo promised the user a song.",
        "The user finds Echo funny.",
        "The user thinks the tavern is cosy.",
        "Sam is afraid of the dark.",
        "Likes hiking.",
        "The user makes Echo a cake.",
    ],
)
def test_english_memories_about_the_user_are_kept(text):
    assert rejected_by(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "Echo finds the user charming.",
        "Echo is fond of the user.",
        "Echo teases the user.",
        "The user is appreciated by Echo.",
        "The user annoys the character.",
        "The user makes Echo laugh.",
        "The user made the character blush.",
    ],
)
def test_the_characters_attitude_in_english_is_not_a_user_fact(text):
    assert rejected_by(text) == "character_attitude"


def test_a_negation_flipped_while_copying_in_english_is_caught_unless_the_user_said_it():
    known = [(7, "The user doesn't like coriander.")]
    assert flipped_negation("The user likes coriander.", known, "What herbs do you use?") == 7
    assert flipped_negation("The user likes coriander.", known, "Actually I like coriander now.") is None
    assert rejected_by("The user likes coriander.", existing=known, user_message="hmm") == "flipped_negation"


@pytest.mark.parametrize(
    ("text", "others", "dropped"),
    [
        ("Bob has a cat named Pixel.", ["Bob", "Carol"], True),
        ("Carol works as a night nurse.", ["Bob", "Carol"], True),
        ("Bob a un chat qui s'appelle Pixel.", ["Bob"], True),
        ("The user has a cat named Pixel.", ["Bob"], False),
        ("The user has known Bob since school.", ["Bob"], False),
        ("L'utilisateur connaît Bob depuis l'école.", ["Bob"], False),
        ("She lives next door to Bob.", ["Bob"], False),
        ("Sam has a cat.", ["Bob"], False),
        ("Bob has a cat.", [], False),
    ],
)
def test_a_memory_about_another_person_of_the_channel_is_not_the_users(text, others, dropped):
    assert about_someone_else(text, others, "Sam") is dropped
    assert (rejected_by(text, other_names=others) == "about_someone_else") is dropped
