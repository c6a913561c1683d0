"""The memory store on a real SQLite file: scoping by user, history, restore, erase."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.errors import InvalidMemory
from bot.memory.model import Cause, NewMemory
from bot.memory.stores.memories import MEMORY_COLUMNS, MemoryRow, erase_user_memories
from bot.memory.stores.memory_store import MemoryStore

pytestmark = pytest.mark.both_stores


@pytest.fixture
def store(db, clock) -> MemoryStore:
    return MemoryStore(db, clock=clock)


async def test_add_and_get_round_trip_every_field(store, clock):
    expires = clock.now + timedelta(days=30)
    memory_id = await store.add(
        "alice",
        NewMemory(
            text="  L'utilisateur   part en congé en août. ",
            type="fact",
            scope="story",
            story_id="chan-1",
            place="guild-9",
            confidence=0.9,
            expires_at=expires,
            source="msg-42",
        ),
    )
    m = await store.get("alice", memory_id)
    assert m is not None
    assert (m.text, m.type, m.scope, m.story_id, m.place, m.source) == (
        "L'utilisateur part en congé en août.",
        "fact",
        "story",
        "chan-1",
        "guild-9",
        "msg-42",
    )
    assert m.confidence == 0.9 and m.expires_at == expires and m.created_at == clock.now
    assert (m.times_candidate, m.times_served, m.times_semantic) == (0, 0, 0)
    assert m.content_hash


@pytest.mark.parametrize(
    "new, message",
    [
        (NewMemory(text="   "), "needs some visible text"),
        (NewMemory(text="\u200b\u200d\ufeff \x00"), "needs some visible text"),
        (NewMemory(text="x" * 501), "one short sentence"),
        (NewMemory(text="ok text", type="opinion"), "unknown memory type"),
        (NewMemory(text="ok text", scope="galaxy"), "unknown scope"),
        (NewMemory(text="ok text", scope="story"), "needs the story"),
    ],
)
async def test_invalid_memories_are_refused_with_a_reason(store, new, message):
    with pytest.raises(InvalidMemory, match=message):
        await store.add("alice", new)
    assert await store.list("alice") == []


async def test_another_users_id_behaves_like_a_missing_id(store):
    bob_id = await store.add("bob", NewMemory(text="L'utilisateur aime le vélo."))
    assert await store.get("alice", bob_id) is None
    assert await store.replace("alice", bob_id, "L'utilisateur déteste le vélo.", cause=Cause("edit")) is False
    assert await store.forget("alice", bob_id, cause=Cause("forget")) is False
    assert await store.set_pinned("alice", bob_id, True) is False
    bob = await store.get("bob", bob_id)
    assert bob is not None and bob.text == "L'utilisateur aime le vélo." and not bob.pinned
    assert await store.history("alice") == [] and await store.history("bob") == []
    assert await store.get("alice", 999_999) is None


async def test_replace_archives_the_old_version_first(store, clock):
    memory_id = await store.add("alice", NewMemory(text="L'utilisateur fait partie de l'équipe Paiements."))
    clock.advance(days=1)
    assert await store.replace(
        "alice", memory_id, "L'utilisateur fait partie de l'équipe Logistique.", cause=Cause("edit")
    )
    m = await store.get("alice", memory_id)
    assert m.text == "L'utilisateur fait partie de l'équipe Logistique." and m.updated_at == clock.now
    [entry] = await store.history("alice")
    assert (entry.memory_id, entry.operation, entry.text, entry.cause) == (
        memory_id,
        "replace",
        "L'utilisateur fait partie de l'équipe Paiements.",
        Cause("edit"),
    )
    assert entry.archived_at == clock.now and not entry.restored


async def test_delete_then_restore_brings_the_memory_back_under_its_id(store):
    keep = await store.add("alice", NewMemory(text="L'utilisateur habite à Nantes.", pinned=True))
    gone = await store.add("alice", NewMemory(text="L'utilisateur vient au bureau en vélo."))
    assert await store.forget("alice", gone, cause=Cause("forget"))
    assert await store.get("alice", gone) is None
    [entry] = await store.history("alice")
    assert entry.operation == "delete" and entry.memory_id == gone
    assert await store.restore("alice", entry.id) == gone
    back = await store.get("alice", gone)
    assert back.text == "L'utilisateur vient au bureau en vélo."
    assert (await store.history("alice"))[0].restored
    # Ids are never reused: a new memory does not take the deleted id.
    new_id = await store.add("alice", NewMemory(text="L'utilisateur boit du thé."))
    assert new_id not in (keep, gone)


async def test_restoring_a_replaced_version_archives_the_current_one(store):
    memory_id = await store.add("alice", NewMemory(text="L'utilisateur vient au bureau en vélo."))
    await store.replace("alice", memory_id, "L'utilisateur n'est jamais disponible le mercredi.", cause=Cause("edit"))
    [replaced] = await store.history("alice")
    assert await store.restore("alice", replaced.id) == memory_id
    assert (await store.get("alice", memory_id)).text == "L'utilisateur vient au bureau en vélo."
    latest = (await store.history("alice"))[0]
    assert latest.operation == "restore" and latest.text == "L'utilisateur n'est jamais disponible le mercredi."


async def test_restore_of_another_users_history_entry_does_nothing(store):
    memory_id = await store.add("bob", NewMemory(text="L'utilisateur aime le jazz."))
    await store.forget("bob", memory_id, cause=Cause("forget"))
    [entry] = await store.history("bob")
    assert await store.restore("alice", entry.id) is None
    assert await store.get("bob", memory_id) is None and await store.get("alice", memory_id) is None


async def test_pin_is_a_flag_without_history(store):
    memory_id = await store.add("alice", NewMemory(text="L'utilisateur aime le jazz."))
    assert await store.set_pinned("alice", memory_id, True)
    assert (await store.get("alice", memory_id)).pinned
    assert await store.history("alice") == []


async def test_list_filters_types_and_expired(store, clock):
    await store.add("alice", NewMemory(text="L'utilisateur aime le jazz.", type="preference"))
    await store.add("alice", NewMemory(text="L'utilisateur est en congé.", expires_at=clock.now + timedelta(days=1)))
    assert [m.type for m in await store.list("alice", types=["preference"])] == ["preference"]
    clock.advance(days=2)
    assert len(await store.list("alice")) == 2  # expired memories stay in the database
    assert [m.text for m in await store.list("alice", include_expired=False)] == ["L'utilisateur aime le jazz."]


async def test_erase_deletes_memories_and_history_of_that_user_only(store, db):
    a = await store.add("alice", NewMemory(text="L'utilisateur aime le jazz."))
    await store.forget("alice", a, cause=Cause("forget"))
    await store.add("alice", NewMemory(text="L'utilisateur habite à Lyon."))
    b = await store.add("bob", NewMemory(text="L'utilisateur aime le rock."))
    async with db.write() as conn:
        report = await erase_user_memories(conn, "alice")
    assert (report.memories, report.history) == (1, 1)
    assert await store.list("alice") == [] and await store.history("alice") == []
    assert (await store.get("bob", b)) is not None


def test_the_memory_columns_are_the_rows_fields_in_order():
    assert MEMORY_COLUMNS.split(", ") == list(MemoryRow._fields)
