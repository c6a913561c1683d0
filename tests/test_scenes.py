"""The scene the reflection is told about: who else spoke lately in each channel, bounded."""

from __future__ import annotations

from bot.engine.context import Scenes


def test_the_others_of_a_channel_exclude_the_author_and_the_latest_noting_wins() -> None:
    scenes = Scenes()
    scenes.note("tavern", ["Bob", "Carol", "Alice"])
    assert scenes.others("tavern", besides="Alice") == ["Bob", "Carol"]
    scenes.note("tavern", ["Dan"])
    assert scenes.others("tavern", besides="Alice") == ["Dan"]
    assert scenes.others("elsewhere", besides="Alice") == []


def test_only_the_most_recently_active_channels_are_kept() -> None:
    scenes = Scenes(max_stories=3)
    for n in range(5):
        scenes.note(f"chan-{n}", [f"person {n}"])
    scenes.note("chan-2", ["again"])  # active again: kept past newer ones
    scenes.note("chan-5", ["new"])
    assert len(scenes) == 3
    assert scenes.others("chan-0", besides="x") == [] and scenes.others("chan-3", besides="x") == []
    assert scenes.others("chan-2", besides="x") == ["again"]
    assert scenes.others("chan-4", besides="x") == ["person 4"]
