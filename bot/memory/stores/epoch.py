"""The epoch of each person: how an erase in one process stops the turns of every other.

A person's row (migration 0009) holds a random epoch while they have turns; their erase deletes
it inside the erase's transaction. A turn reads the epoch when it begins (`begin_turn`), and
each of its write transactions asks `still_current` first: an indexed read, inside the
transaction, so that an erase committed by any process sharing the database, between the turn's
start and that write, makes the write store nothing about the person. Every statement filters on
user_id (the person's own key). Functions taking `conn` join the caller's write transaction.
"""

from __future__ import annotations

import secrets

from bot.clients.erasures import Erasure
from bot.clients.storage import Connection, Database, fetch_one
from bot.memory.model import PersonId

_EPOCH = "SELECT epoch FROM user_epochs WHERE user_id = ?"
# `still_current` as a condition of a statement that is its own transaction (its parameters: the
# person, then the epoch): the same indexed read, in the write itself.
STILL_CURRENT = "EXISTS (SELECT 1 FROM user_epochs WHERE user_id = ? AND epoch = ?)"


async def begin_turn(db: Database, person: PersonId) -> int:
    """The person's epoch, drawn now when they have none (their first turn, or the first after
    an erase): one read, and a write transaction only then."""
    row = await fetch_one(db.reader, _EPOCH, (person,))
    if row is not None:
        return int(row["epoch"])
    async with db.write() as conn:
        # Another process may have drawn it since the read: the one stored is the one used.
        await conn.execute(
            "INSERT OR IGNORE INTO user_epochs (user_id, epoch) VALUES (?, ?)", (person, secrets.randbits(62))
        )
        row = await fetch_one(conn, _EPOCH, (person,))
    assert row is not None  # written above, in this transaction
    return int(row["epoch"])


async def still_current(conn: Connection, person: PersonId, epoch: int) -> bool:
    """Whether no erase of the person committed since their turn read `epoch`."""
    row = await fetch_one(conn, _EPOCH, (person,))
    return row is not None and int(row["epoch"]) == epoch


async def end_epoch(conn: Connection, person: PersonId, erasure: Erasure) -> None:
    """In the erase's transaction: every turn of the person under way writes nothing more, and
    the erase is recorded (a hash of the person, its time: the pair its ledger line holds)."""
    await conn.execute("DELETE FROM user_epochs WHERE user_id = ?", (person,))
    await conn.execute(
        "INSERT OR IGNORE INTO erasures (person_hash, erased_at) VALUES (?, ?)", (erasure.person_hash, erasure.at)
    )
