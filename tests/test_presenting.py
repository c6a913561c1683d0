"""Plain-text renderings shared by Discord and the terminal."""

from __future__ import annotations

from datetime import datetime, timezone

from bot.memory.choice import Slot, TurnSelection
from bot.memory.model import Cause, HistoryEntry
from bot.memory.stores.stories import StoryHistoryEntry
from bot.presenting import history_text, why_text

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


def story_entry(operation: str, **payload) -> StoryHistoryEntry:
    return StoryHistoryEntry(
        id=1, user_id="u", story_id="s", operation=operation, item_id=3, payload=payload,
        reason="Camille a déménagé à Lyon." if operation == "anchor_removed" else None, cause=Cause("reflection"), at=NOW,
    )


def test_history_of_state_changes_only_reads_as_empty():
    assert history_text([], [story_entry("state_changed", name="mood")]).startswith("History is empty")


def test_history_lists_archived_versions_and_anchor_removals_with_reasons():
    entry = HistoryEntry(
        id=4, user_id="u", memory_id=9, operation="replace", text="L'utilisateur habite à Nantes.", type="fact",
        scope="global", pinned=False, confidence=1.0, created_at=NOW, updated_at=NOW, archived_at=NOW, cause=Cause("reflection"),
    )
    text = history_text([entry], [story_entry("anchor_removed", text="Camille habite à Nantes.")])
    assert "h4: #9 replaced" in text and "L'utilisateur habite à Nantes." in text
    assert "Anchor removals:" in text and "Camille a déménagé à Lyon." in text


def test_why_says_when_a_turn_was_degraded_and_marks_lexical_matches():
    selection = TurnSelection(
        turn_id=1, user_id="u", story_id="s", query="arachides ?", degraded=True,
        slots=[Slot(id=3, reason="semantic", score=None, type="fact", pinned=True, text="L'utilisateur est allergique.", lexical=True)],
        rules=["Reste toujours Écho."], created_at=NOW, candidates=1,
    )
    text = why_text(selection)
    assert "Degraded turn" in text and "lexical match" in text and "📌" in text
    assert "1 memory chosen out of 1 candidate" in text and "Reste toujours Écho." in text
    assert why_text(None).startswith("No turn of yours")


def test_why_says_whether_a_memory_came_by_the_message_or_by_the_conversation_in_both_languages():
    selection = TurnSelection(
        turn_id=1, user_id="u", story_id="s", query="Can I do it again?", degraded=False,
        slots=[
            Slot(id=3, reason="conversation", score=2.1, type="episode", pinned=False, text="Danced at the party."),
            Slot(id=4, reason="semantic", score=1.2, type="fact", pinned=False, text="Likes dancing."),
        ],
        rules=[], created_at=NOW, candidates=2,
    )
    english, french = why_text(selection), why_text(selection, lang="fr")
    assert "#3 [episode] recalled by the conversation" in english and "#4 [fact] recalled by the message" in english
    assert "#3 [épisode] rappelé par la conversation" in french and "#4 [fait] rappelé par le message" in french
