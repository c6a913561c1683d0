"""What a turn reads of its story's follow-ups, in one statement on both stores: the one its turns
still carry (the latest offered), whether one awaits its answer, and nothing of another story or
another person."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.clients.storage import Database
from bot.memory.model import OwnerKey, StoryId
from bot.memory.stores.followups import Due, offer, story_followups

pytestmark = pytest.mark.both_stores

NOW = datetime(2026, 12, 5, 18, 0, tzinfo=UTC)
ALICE, BOB = OwnerKey("111"), OwnerKey("222")
HERE, ELSEWHERE = StoryId("chan-1"), StoryId("chan-2")


async def follow(db: Database, owner: OwnerKey, memory_id: int, story: StoryId, *, asked: bool, minutes: int) -> None:
    due = Due(
        memory_id,
        f"fait {memory_id}",
        f"h{memory_id}",
        NOW - timedelta(days=1),
        NOW - timedelta(days=9),
        "event",
        False,
    )
    async with db.write() as conn:
        assert await offer(
            conn, owner, due, story_id=story, exchange_id=memory_id, asked=asked, spent=False,
            now=NOW + timedelta(minutes=minutes),
        )  # fmt: skip


async def test_a_story_without_follow_ups_reads_as_none(db: Database) -> None:
    assert await story_followups(db, ALICE, HERE) == []


async def test_the_latest_offered_and_an_awaited_answer_come_in_one_read(db: Database) -> None:
    await follow(db, ALICE, 1, HERE, asked=False, minutes=1)
    await follow(db, ALICE, 2, HERE, asked=False, minutes=2)
    await follow(db, ALICE, 3, HERE, asked=True, minutes=3)
    rows = await story_followups(db, ALICE, HERE)
    assert sorted((row.memory_id, row.state) for row in rows) == [(2, "offered"), (3, "asked")]


async def test_another_story_and_another_person_are_not_read(db: Database) -> None:
    await follow(db, ALICE, 1, ELSEWHERE, asked=True, minutes=1)
    await follow(db, ALICE, 2, ELSEWHERE, asked=False, minutes=2)
    await follow(db, BOB, 3, HERE, asked=True, minutes=3)
    await follow(db, BOB, 4, HERE, asked=False, minutes=4)
    assert await story_followups(db, ALICE, HERE) == []
