"""A turn's message and reply, each written with the erase check in its statement, on both
stores: kept while the person's epoch holds, never after an erase, never in another person's
exchange."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.clients.erasures import Erasure
from bot.clients.storage import Database, fetch_one
from bot.memory.model import PersonId
from bot.memory.stores.epoch import begin_turn, end_epoch
from bot.memory.stores.exchanges import answer_exchange, save_exchange

pytestmark = pytest.mark.both_stores

NOW = datetime(2026, 12, 5, 15, 0, tzinfo=UTC)
ALICE, BOB = PersonId("111"), PersonId("222")


async def new_exchange(db: Database, user_id: str, text: str) -> int:
    async with db.write() as conn:
        return await save_exchange(
            conn, user_id, user_name="A", story_id="s", place="p", message_id=None, text=text, now=NOW
        )


async def exchange(db: Database, user_id: str, exchange_id: int) -> dict[str, object] | None:
    row = await fetch_one(
        db.reader,
        "SELECT reply, answered_at, settled_at FROM exchanges WHERE user_id = ? AND id = ?",
        (user_id, exchange_id),
    )
    return dict(row) if row is not None else None


async def test_the_reply_is_stored_and_settled_while_the_epoch_holds(db: Database) -> None:
    epoch = await begin_turn(db, ALICE)
    exchange_id = await new_exchange(db, ALICE, "bonjour")

    assert await answer_exchange(db, ALICE, exchange_id, "Salut !", now=NOW, person=ALICE, epoch=epoch)
    row = await exchange(db, ALICE, exchange_id)
    assert row is not None and row["reply"] == "Salut !"
    assert row["answered_at"] is not None and row["settled_at"] == row["answered_at"]


async def test_after_an_erase_nothing_is_stored_even_in_the_persons_next_exchange(db: Database) -> None:
    """The erase commits while the turn waits for its model; the person writes again and gets a
    new epoch. The first turn's reply lands nowhere, even where its exchange's id names the new
    exchange (an id freed by the erase can be given again)."""
    epoch = await begin_turn(db, ALICE)
    first = await new_exchange(db, ALICE, "bonjour")
    async with db.write() as conn:
        await conn.execute("DELETE FROM exchanges WHERE user_id = ?", (ALICE,))
        await end_epoch(conn, ALICE, Erasure.of(ALICE, NOW))
    new_epoch = await begin_turn(db, ALICE)
    second = await new_exchange(db, ALICE, "me revoilà")

    assert new_epoch != epoch
    assert not await answer_exchange(db, ALICE, first, "Salut !", now=NOW, person=ALICE, epoch=epoch)
    assert not await answer_exchange(db, ALICE, second, "Salut !", now=NOW, person=ALICE, epoch=epoch)
    row = await exchange(db, ALICE, second)
    assert row is not None and row["reply"] is None and row["settled_at"] is None


async def test_another_persons_exchange_is_never_written(db: Database) -> None:
    alice_epoch = await begin_turn(db, ALICE)
    await begin_turn(db, BOB)
    bobs = await new_exchange(db, BOB, "salut")

    assert not await answer_exchange(db, ALICE, bobs, "Pas pour toi", now=NOW, person=ALICE, epoch=alice_epoch)
    row = await exchange(db, BOB, bobs)
    assert row is not None and row["reply"] is None


async def turn_exchange(db: Database, text: str, epoch: int) -> int | None:
    async with db.write() as conn:
        return await save_exchange(
            conn, ALICE, user_name="A", story_id="s", place="p", message_id="m1", text=text, now=NOW,
            current=(ALICE, epoch),
        )  # fmt: skip


async def test_a_turns_message_is_stored_while_the_epoch_holds_and_never_after_an_erase(db: Database) -> None:
    epoch = await begin_turn(db, ALICE)
    kept = await turn_exchange(db, "bonjour", epoch)
    assert kept is not None
    row = await fetch_one(
        db.reader, "SELECT user_message, message_id FROM exchanges WHERE user_id = ? AND id = ?", (ALICE, kept)
    )
    assert row is not None and (row["user_message"], row["message_id"]) == ("bonjour", "m1")

    async with db.write() as conn:
        await end_epoch(conn, ALICE, Erasure.of(ALICE, NOW))
    assert await turn_exchange(db, "encore là ?", epoch) is None
    row = await fetch_one(
        db.reader, "SELECT COUNT(*) AS n FROM exchanges WHERE user_id = ? AND user_message = ?", (ALICE, "encore là ?")
    )
    assert row is not None and row["n"] == 0
