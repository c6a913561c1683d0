"""Plain-text renderings shared by Discord and the terminal."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.i18n import use_locale
from bot.memory.choice import REASONS, Slot, TurnSelection
from bot.memory.model import Cause, HistoryEntry
from bot.memory.stores.stories import StoryHistoryEntry
from bot.presenting import closeness, groups, history_text, why_text

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def story_entry(operation: str, **payload) -> StoryHistoryEntry:
    return StoryHistoryEntry(
        id=1,
        user_id="u",
        story_id="s",
        operation=operation,
        item_id=3,
        payload=payload,
        reason="Camille a déménagé à Lyon." if operation == "anchor_removed" else None,
        cause=Cause("reflection"),
        at=NOW,
    )


def test_history_of_state_changes_only_reads_as_empty():
    assert history_text([], [story_entry("state_changed", name="mood")]).startswith("History is empty")


def test_history_lists_archived_versions_and_anchor_removals_with_reasons():
    entry = HistoryEntry(
        id=4,
        user_id="u",
        memory_id=9,
        operation="replace",
        text="L'utilisateur habite à Nantes.",
        type="fact",
        scope="global",
        pinned=False,
        confidence=1.0,
        created_at=NOW,
        updated_at=NOW,
        archived_at=NOW,
        cause=Cause("reflection"),
    )
    text = history_text([entry], [story_entry("anchor_removed", text="Camille habite à Nantes.")])
    assert "h4: #9 replaced" in text and "L'utilisateur habite à Nantes." in text
    assert "Anchor removals:" in text and "Camille a déménagé à Lyon." in text


def test_why_says_when_a_turn_was_degraded_and_marks_lexical_matches():
    selection = TurnSelection(
        turn_id=1,
        user_id="u",
        story_id="s",
        query="arachides ?",
        degraded=True,
        slots=[
            Slot(
                id=3,
                reason="semantic",
                score=None,
                type="fact",
                pinned=True,
                text="L'utilisateur est allergique.",
                lexical=True,
            )
        ],
        rules=["Reste toujours Écho."],
        created_at=NOW,
        candidates=1,
    )
    text = why_text(selection)
    assert "Degraded turn" in text and "your words" in text and "📌" in text
    assert "1 memory chosen out of 1 candidate" in text and "Reste toujours Écho." in text
    assert why_text(None).startswith("No turn of yours")


def test_why_says_whether_a_memory_came_by_the_message_or_by_the_conversation_in_both_languages():
    selection = TurnSelection(
        turn_id=1,
        user_id="u",
        story_id="s",
        query="Can I do it again?",
        degraded=False,
        slots=[
            Slot(id=3, reason="conversation", score=2.1, type="episode", pinned=False, text="Danced at the party."),
            Slot(id=4, reason="semantic", score=1.2, type="fact", pinned=False, text="Likes dancing."),
        ],
        rules=[],
        created_at=NOW,
        candidates=2,
    )
    english = why_text(selection)
    with use_locale("fr"):
        french = why_text(selection)
    assert "Close to your message, closest first:\n- #4 [fact] 88% — Likes dancing." in english
    assert "Close to the conversation around it, closest first:\n- #3 [episode] 98% — Danced at the party." in english
    assert "Proches de ton message, les plus proches d'abord :\n- #4 [fait] 88 % — Likes dancing." in french
    assert "Proches de la conversation en cours" in french and "#3 [épisode] 98 %" in french


# --- /why a person can read (issue 33, item 6) ---------------------------------------------------


def test_closeness_is_one_scale_of_percent_where_the_average_memory_is_50():
    # Scores are z-scores over the person's memories that turn: 0 is the average one.
    assert [closeness(z) for z in (0.0, 1.0, -1.0, 2.0, 9.0, -9.0)] == [50, 84, 16, 98, 99, 1]
    assert closeness(None) is None and closeness(float("nan")) is None


def test_the_order_is_the_order_of_the_passes_each_group_named_in_plain_words():
    slots = [
        Slot(id=n, reason=r, score=0.5, type="fact", pinned=r == "pinned", text=f"memory {n}")
        for n, r in enumerate(reversed(REASONS))
    ]
    selection = TurnSelection(
        turn_id=1,
        user_id="u",
        story_id="s",
        query="?",
        degraded=False,
        slots=slots,
        rules=[],
        created_at=NOW,
        candidates=6,
    )
    assert [g.reason for g in groups(selection)] == list(REASONS), "pinned, general, message, conversation, mix, fill"
    shown = why_text(selection)
    titles = [line for line in shown.splitlines() if line.endswith(":") and not line.startswith("-")]
    assert titles == [
        "Pinned by you, always in:",
        "About you in general (a quarter of the places goes to what is true everywhere), closest first:",
        "Close to your message, closest first:",
        "Close to the conversation around it, closest first:",
        "To keep a mix of facts, preferences, promises and episodes:",
        "To fill the places left, most certain and most recent first:",
    ]
    legend = next(line for line in shown.splitlines() if line.startswith("In %"))
    assert "50 % is average" in legend and "—" in legend, "one line says what the numbers mean"
    assert "global" not in shown and "score" not in shown, "no word of the code's"
