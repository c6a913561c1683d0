"""Story storage against a real SQLite file: plans applied, archived first, scoped by user and story."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.clients.db import SQLiteDatabase
from bot.memory.model import Cause
from bot.memory.stores.stories import apply_story_reflection, erase_user_story_data, load_story, story_history
from bot.memory.story.report import StoryReport
from bot.memory.story.state import parse_state_specs

pytestmark = pytest.mark.both_stores

FIRST = Cause.reflection("1")
T0 = datetime(2026, 3, 1, 20, 0, tzinfo=UTC)
SPECS = parse_state_specs(
    {
        "humeur": {"min": -1, "max": 1, "default": 0, "max_delta": 0.2},
        "confiance": {"min": 0, "max": 1, "default": 0.3, "max_delta": 0.1},
    }
)
ALICE, BOB = "111", "222"
HARBOUR, TAVERN = "chan-port", "thread-taverne"

STANCE = "Le personnage pense que trier ses bouquins par couleurs, c'est cesser de lire : on expose, on ne lit plus."
SELF_CITING = (
    "Le personnage a répondu «trier ses bouquins par couleurs, c'est cesser de lire», ce que l'utilisateur a approuvé."
)
LEGITIMATE = "L'utilisateur a montré ses étagères rangées par couleur et n'a su citer aucun titre."


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteDatabase]:
    database = await SQLiteDatabase.open(tmp_path / "x.db")
    try:
        yield database
    finally:
        await database.close()


async def reflect(
    db: SQLiteDatabase,
    user_id: str = ALICE,
    story_id: str = HARBOUR,
    *,
    now: datetime = T0,
    cause: Cause = FIRST,
    **proposals: Any,
) -> StoryReport:
    args: dict[str, Any] = {
        "summary": None,
        "anchor_add": [],
        "anchor_remove": [],
        "positions": [],
        "state_deltas": {},
    }
    args.update(proposals)
    async with db.write() as conn:
        return await apply_story_reflection(conn, user_id, story_id, specs=SPECS, cause=cause, now=now, **args)


async def test_first_reflection_stores_summary_anchors_positions_and_state(db: SQLiteDatabase) -> None:
    report = await reflect(
        db,
        summary="Alice arrive au port et cherche le capitaine Morel.",
        anchor_add=["Le capitaine Morel a disparu en mer."],
        positions=[
            {
                "subject": "la mer",
                "stance": "Le personnage craint la mer d'hiver.",
                "justification": "Alice raconte que trois bateaux ont coulé cet hiver.",
            }
        ],
        state_deltas={"humeur": 0.1},
    )
    story = await load_story(db, ALICE, HARBOUR)
    assert story.summary == "Alice arrive au port et cherche le capitaine Morel."
    assert [(a.id, a.text) for a in story.anchors] == [
        (report.added_anchor_ids[0], "Le capitaine Morel a disparu en mer.")
    ]
    assert [(p.id, p.subject, p.updated_at) for p in story.positions] == [
        (report.inserted_position_ids[0], "la mer", T0)
    ]
    assert story.state == {"humeur": 0.1}
    assert report.summary_replaced
    # Nothing existed before: nothing was archived except the state change.
    assert [h.operation for h in await story_history(db, ALICE, HARBOUR)] == ["state_changed"]


async def test_summary_dropping_an_anchored_fact_keeps_the_anchor_and_archives_the_old_summary(
    db: SQLiteDatabase,
) -> None:
    await reflect(
        db,
        summary="Alice cherche le capitaine Morel, disparu en mer.",
        anchor_add=["Le capitaine Morel a disparu en mer."],
    )
    later = T0 + timedelta(minutes=3)
    await reflect(
        db, now=later, cause=Cause.reflection("2"), summary="Alice boit un verre à la taverne et parle du temps."
    )
    story = await load_story(db, ALICE, HARBOUR)
    assert story.summary == "Alice boit un verre à la taverne et parle du temps."
    assert [a.text for a in story.anchors] == ["Le capitaine Morel a disparu en mer."]
    [entry] = await story_history(db, ALICE, HARBOUR)
    assert (entry.operation, entry.cause, entry.at) == ("summary_replaced", Cause.reflection("2"), later)
    assert entry.payload["summary"] == "Alice cherche le capitaine Morel, disparu en mer."


async def test_summary_repeating_an_anchor_is_stored_as_is(db: SQLiteDatabase) -> None:
    await reflect(db, anchor_add=["Le capitaine Morel a disparu en mer."])
    await reflect(db, summary="Le capitaine Morel a disparu en mer. Alice le cherche.")
    story = await load_story(db, ALICE, HARBOUR)
    assert story.summary == "Le capitaine Morel a disparu en mer. Alice le cherche."
    assert len(story.anchors) == 1


async def test_anchor_removal_without_reason_is_refused_with_one_it_is_archived(db: SQLiteDatabase) -> None:
    report = await reflect(db, anchor_add=["Alice a promis de rapporter la carte du phare."])
    anchor_id = report.added_anchor_ids[0]

    refused = await reflect(db, cause=Cause.reflection("2"), anchor_remove=[{"id": anchor_id, "reason": ""}])
    assert [r.anchor_id for r in refused.anchors.refused] == [anchor_id]
    assert [a.id for a in (await load_story(db, ALICE, HARBOUR)).anchors] == [anchor_id]
    assert await story_history(db, ALICE, HARBOUR) == []

    reason = "Alice a rapporté la carte : la promesse est tenue."
    when = T0 + timedelta(minutes=9)
    await reflect(db, now=when, cause=Cause.reflection("3"), anchor_remove=[(anchor_id, reason)])
    assert (await load_story(db, ALICE, HARBOUR)).anchors == []
    [entry] = await story_history(db, ALICE, HARBOUR)
    assert (entry.operation, entry.item_id, entry.reason, entry.cause, entry.at) == (
        "anchor_removed",
        anchor_id,
        reason,
        Cause.reflection("3"),
        when,
    )
    assert entry.payload["text"] == "Alice a promis de rapporter la carte du phare."


async def test_another_users_or_storys_anchor_id_is_unknown(db: SQLiteDatabase) -> None:
    bobs = (await reflect(db, BOB, HARBOUR, anchor_add=["Bob a une dette envers le passeur."])).added_anchor_ids[0]
    tavern = (await reflect(db, ALICE, TAVERN, anchor_add=["Alice a perdu sa bague à la taverne."])).added_anchor_ids[0]
    await reflect(db, ALICE, HARBOUR, anchor_add=["Alice cherche Morel."])

    reason = "ce fait ne concerne plus l'histoire en cours"
    report = await reflect(db, ALICE, HARBOUR, anchor_remove=[(bobs, reason), (tavern, reason)])
    assert [r.why for r in report.anchors.refused] == ["unknown anchor id", "unknown anchor id"]
    assert [a.id for a in (await load_story(db, BOB, HARBOUR)).anchors] == [bobs]
    assert [a.id for a in (await load_story(db, ALICE, TAVERN)).anchors] == [tavern]
    assert await story_history(db, BOB) == [] and await story_history(db, ALICE) == []


async def test_self_citing_justification_keeps_the_date_legitimate_one_refreshes(db: SQLiteDatabase) -> None:
    other_stance = "Le personnage pense que la musique aide à se concentrer."
    await reflect(
        db,
        positions=[
            {
                "subject": "rangement des livres",
                "stance": STANCE,
                "justification": "Alice range ses livres par taille.",
            },
            {"subject": "musique", "stance": other_stance, "justification": "Alice code avec un casque."},
        ],
    )
    later = T0 + timedelta(hours=5)
    report = await reflect(
        db,
        now=later,
        cause=Cause.reflection("2"),
        positions=[
            {"subject": "rangement des livres", "stance": STANCE, "justification": SELF_CITING},
            {"subject": "musique", "stance": other_stance, "justification": LEGITIMATE},
        ],
    )
    by_subject = {p.subject: p for p in (await load_story(db, ALICE, HARBOUR)).positions}
    books, music = by_subject["rangement des livres"], by_subject["musique"]
    assert books.updated_at == T0 and books.justification == "Alice range ses livres par taille."
    assert music.updated_at == later and music.justification == LEGITIMATE
    assert [n.position.id for n in report.positions.not_reanchored] == [books.id]
    [entry] = await story_history(db, ALICE, HARBOUR)
    assert (entry.operation, entry.item_id) == ("position_updated", music.id)
    assert entry.payload["justification"] == "Alice code avec un casque."


async def test_evicted_position_goes_to_history(db: SQLiteDatabase) -> None:
    from bot.memory.story.plans import MAX_POSITIONS

    for i in range(MAX_POSITIONS):
        await reflect(
            db,
            now=T0 + timedelta(minutes=i),
            positions=[
                {
                    "subject": f"sujet {i}",
                    "stance": f"Le personnage a l'avis {i}.",
                    "justification": "Alice en a parlé.",
                }
            ],
        )
    await reflect(
        db,
        now=T0 + timedelta(hours=1),
        cause=Cause.reflection("last"),
        positions=[{"subject": "nouveau", "stance": "Le personnage découvre.", "justification": "Alice en parle."}],
    )
    subjects = {p.subject for p in (await load_story(db, ALICE, HARBOUR)).positions}
    assert len(subjects) == MAX_POSITIONS and "sujet 0" not in subjects and "nouveau" in subjects
    [entry] = await story_history(db, ALICE, HARBOUR)
    assert (entry.operation, entry.payload["subject"], entry.cause) == (
        "position_evicted",
        "sujet 0",
        Cause.reflection("last"),
    )


async def test_state_deltas_are_clamped_unknown_keys_ignored_changes_recorded(db: SQLiteDatabase) -> None:
    report = await reflect(db, state_deltas={"humeur": 5, "confiance": -0.05, "colère": 1, "Humeur": 0.1})
    assert (await load_story(db, ALICE, HARBOUR)).state == {"humeur": 0.2, "confiance": 0.25}
    assert len(report.state.notes) == 3
    for _ in range(6):
        await reflect(db, state_deltas={"humeur": 0.9})
    assert (await load_story(db, ALICE, HARBOUR)).state["humeur"] == 1.0
    changes = [h.payload for h in await story_history(db, ALICE, HARBOUR) if h.operation == "state_changed"]
    humeur = sorted(c["after"] for c in changes if c["name"] == "humeur")
    # +0.2 per turn up to the bound, then nothing changes and nothing is recorded.
    assert humeur == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert all(c["proposed"] in (5, 0.9) and c["applied"] == 0.2 for c in changes if c["name"] == "humeur")


async def test_story_writes_join_the_callers_transaction(db: SQLiteDatabase) -> None:
    with pytest.raises(RuntimeError):
        async with db.write() as conn:
            await apply_story_reflection(
                conn,
                ALICE,
                HARBOUR,
                summary="Un résumé qui ne doit pas rester.",
                anchor_add=["Un fait perdu avec la transaction."],
                anchor_remove=[],
                positions=[],
                state_deltas={"humeur": 0.1},
                specs=SPECS,
                cause=Cause.reflection("x"),
                now=T0,
            )
            raise RuntimeError("the reflection's memory write failed")
    story = await load_story(db, ALICE, HARBOUR)
    assert (story.summary, story.anchors, story.state) == (None, [], {})


async def test_history_is_scoped_by_user_and_optionally_by_story(db: SQLiteDatabase) -> None:
    for user, story in ((ALICE, HARBOUR), (ALICE, TAVERN), (BOB, HARBOUR)):
        await reflect(db, user, story, state_deltas={"humeur": 0.1})
    assert {h.story_id for h in await story_history(db, ALICE)} == {HARBOUR, TAVERN}
    assert [(h.user_id, h.story_id) for h in await story_history(db, ALICE, TAVERN)] == [(ALICE, TAVERN)]
    assert [(h.user_id, h.story_id) for h in await story_history(db, BOB, None)] == [(BOB, HARBOUR)]


async def test_erase_removes_only_that_users_rows(db: SQLiteDatabase) -> None:
    for user in (ALICE, BOB):
        await reflect(
            db,
            user,
            summary="Résumé initial.",
            anchor_add=["Un fait."],
            state_deltas={"humeur": 0.1},
            positions=[
                {"subject": "mer", "stance": "Le personnage craint la mer.", "justification": "Naufrage raconté."}
            ],
        )
        await reflect(db, user, summary="Résumé suivant.")
    async with db.write() as conn:
        erased = await erase_user_story_data(conn, ALICE)
    # summary + anchor + position + state + 2 history rows (state change, summary replaced)
    assert erased == 6
    alice, bob = await load_story(db, ALICE, HARBOUR), await load_story(db, BOB, HARBOUR)
    assert (alice.summary, alice.anchors, alice.positions, alice.state) == (None, [], [], {})
    assert await story_history(db, ALICE) == []
    assert bob.summary == "Résumé suivant." and len(bob.anchors) == len(bob.positions) == 1
    assert len(await story_history(db, BOB)) == 2


async def test_anchor_removals_survive_fifty_newer_history_rows_when_asked_for_by_kind(db: SQLiteDatabase) -> None:
    anchor_id = (await reflect(db, anchor_add=["Alice a promis de rapporter la carte du phare."])).added_anchor_ids[0]
    reason = "Alice a rapporté la carte : la promesse est tenue."
    await reflect(db, now=T0 + timedelta(minutes=1), anchor_remove=[(anchor_id, reason)])
    # Every later reflection rewrites the summary and moves the mood: two rows each.
    for i in range(30):
        await reflect(
            db,
            now=T0 + timedelta(minutes=2 + i),
            summary=f"Résumé numéro {i}.",
            state_deltas={"humeur": 0.1 if i % 2 else -0.1},
        )
    newest = await story_history(db, ALICE, None)
    assert len(newest) == 50 and "anchor_removed" not in {h.operation for h in newest}

    [removal] = await story_history(db, ALICE, None, operations=("anchor_removed",))
    assert (removal.item_id, removal.reason) == (anchor_id, reason)
    both = await story_history(db, ALICE, HARBOUR, limit=5, operations=["anchor_removed", "summary_replaced"])
    assert len(both) == 5 and {h.operation for h in both} == {"summary_replaced"}
    assert await story_history(db, ALICE, TAVERN, operations=("anchor_removed",)) == []
    assert await story_history(db, BOB, None, operations=("anchor_removed",)) == []


async def test_operations_are_values_not_sql(db: SQLiteDatabase) -> None:
    await reflect(db, state_deltas={"humeur": 0.1})
    assert await story_history(db, ALICE, operations=("x') OR 1=1 --", 'x" OR 1=1 --')) == []
    assert await story_history(db, ALICE, operations=()) == []
    with pytest.raises(TypeError):
        await story_history(db, ALICE, operations="state_changed")


async def test_reworded_subject_quoting_the_stored_stance_is_not_inserted(db: SQLiteDatabase) -> None:
    await reflect(
        db,
        positions=[
            {
                "subject": "rangement des livres",
                "stance": STANCE,
                "justification": "Alice range ses livres par taille.",
            },
        ],
    )
    later = T0 + timedelta(hours=5)
    report = await reflect(
        db,
        now=later,
        cause=Cause.reflection("2"),
        positions=[
            {"subject": "livres rangés par couleur", "stance": STANCE, "justification": SELF_CITING},
        ],
    )
    [books] = (await load_story(db, ALICE, HARBOUR)).positions
    assert (books.subject, books.updated_at) == ("rangement des livres", T0)
    assert report.inserted_position_ids == [] and len(report.positions.refused) == 1
    assert any("refused" in n for n in report.notes)


async def test_oversized_summary_is_refused_and_the_previous_one_stays(db: SQLiteDatabase) -> None:
    from bot.memory.story.plans import MAX_SUMMARY_CHARS

    await reflect(db, summary="Alice cherche le capitaine Morel.")
    report = await reflect(db, now=T0 + timedelta(minutes=1), summary="Alice marche. " * (MAX_SUMMARY_CHARS // 10))
    assert (await load_story(db, ALICE, HARBOUR)).summary == "Alice cherche le capitaine Morel."
    assert not report.summary_replaced
    assert any(str(MAX_SUMMARY_CHARS) in n for n in report.notes)
    assert await story_history(db, ALICE, HARBOUR) == []
