"""Pinned memories change only by their owner's hand, and every change of a memory (text, expiry,
type, scope) by any path is archived first, so /restore can bring the previous version back."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta

from bot.memory.model import Cause, NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.reflection import parse_reflection

TRIP = "L'utilisateur part au Japon en avril."
CHANGED = ("text", "type", "scope", "story_id", "place", "expires_at")


def ctx(allowed=(), message: str = "") -> ReflectionContext:
    return ReflectionContext(
        user_id="camille",
        allowed_ids=frozenset(allowed),
        character_name="Écho",
        user_message=message,
        user_name="Camille",
        story_id="chan-1",
        place="guild-1",
        source="msg-1",
    )


async def reflect(db, clock, allowed=(), message: str = "", **fields):
    parsed = parse_reflection(json.dumps(fields))
    return await apply_reflection(db, parsed.reflection, ctx(allowed, message), problems=parsed.problems, clock=clock)


def fact(text: str, **extra) -> dict:
    return {"text": text, "type": "fact", "scope": "global", "confidence": 0.95, **extra}


async def test_absorbing_a_dated_repeat_never_changes_a_pinned_memory(db, clock):
    store = MemoryStore(db, clock=clock)
    trip = await store.add("camille", NewMemory(text=TRIP, place="guild-1"))
    await store.set_pinned("camille", trip, True)
    before = await store.get("camille", trip)
    report = await reflect(db, clock, memories=[fact("L'utilisateur part au Japon en avril.", expires_at="2026-11-03")])
    [decision] = report.decisions
    assert decision.action == "absorbed" and "pinned by the user" in decision.detail
    clock.advance(days=30)
    after = await store.get("camille", trip)
    assert after == before and not after.is_expired(clock())
    assert await store.history("camille") == []


async def test_a_new_expiry_of_an_absorbed_repeat_is_archived_and_restorable(db, clock):
    store = MemoryStore(db, clock=clock)
    trip = await store.add(
        "camille", NewMemory(text=TRIP, place="guild-1", expires_at=datetime(2027, 4, 30, tzinfo=UTC))
    )
    report = await reflect(db, clock, memories=[fact(TRIP, expires_at="2026-11-03")])
    assert [d.action for d in report.decisions] == ["absorbed"]
    assert (await store.get("camille", trip)).expires_at.date().isoformat() == "2026-11-03"
    [entry] = await store.history("camille")
    assert entry.memory_id == trip and entry.operation == "expiry"
    assert entry.expires_at == datetime(2027, 4, 30, tzinfo=UTC)
    await store.restore("camille", entry.id)
    assert (await store.get("camille", trip)).expires_at == datetime(2027, 4, 30, tzinfo=UTC)


def _rows(path) -> dict[int, dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return {r["id"]: dict(r) for r in conn.execute("SELECT * FROM memories WHERE user_id = 'camille'")}
    finally:
        conn.close()


def _archived(path) -> list[dict]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM memory_history WHERE user_id = 'camille' ORDER BY id")]
    finally:
        conn.close()


async def test_every_change_by_every_path_is_archived_first(db, clock):
    """Drive every path that can change a memory and check, on the raw rows, that each change of
    text, expiry, type or scope left the previous version in memory_history (and that pinned
    memories only changed through their owner's /restore)."""
    store = MemoryStore(db, clock=clock)
    trip = await store.add("camille", NewMemory(text=TRIP, place="guild-1"))
    team = await store.add(
        "camille", NewMemory(text="L'utilisateur fait partie de l'équipe Paiements.", place="guild-1")
    )
    cats = await store.add("camille", NewMemory(text="L'utilisateur a deux chats.", place="guild-1"))
    pinned = await store.add("camille", NewMemory(text="L'utilisateur est allergique aux arachides.", place="guild-1"))
    await store.set_pinned("camille", pinned, True)
    everyone = {trip, team, cats, pinned}

    steps = [
        lambda: reflect(db, clock, memories=[fact(TRIP, expires_at="2027-04-30")]),
        lambda: reflect(
            db, clock, memories=[fact("L'utilisateur part au Japon en avril avec sa sœur.", expires_at="2027-05-01")]
        ),
        lambda: reflect(
            db,
            clock,
            everyone,
            "J'ai quitté l'équipe Paiements pour la Logistique.",
            replace=[
                {"id": team, "text": "L'utilisateur fait partie de l'équipe Logistique.", "expires_at": "2028-01-01"}
            ],
        ),
        lambda: reflect(
            db,
            clock,
            everyone,
            "Je ne suis plus allergique aux arachides.",
            memories=[fact("L'utilisateur est allergique aux arachides.", expires_at="2026-11-03")],
            replace=[{"id": pinned, "text": "L'utilisateur n'est plus allergique aux arachides."}],
            delete=[pinned],
        ),
        lambda: store.replace("camille", cats, "L'utilisateur a trois chats.", cause=Cause("edit")),
        lambda: store.restore("camille", _archived(db.path)[0]["id"]),
        lambda: store.forget("camille", cats, cause=Cause("forget")),
    ]
    for step in steps:
        before, archived_before = _rows(db.path), len(_archived(db.path))
        clock.advance(hours=1)
        await step()
        after, archived = _rows(db.path), _archived(db.path)
        new_entries = archived[archived_before:]
        for memory_id, old in before.items():
            new = after.get(memory_id)
            if new is not None and all(new[c] == old[c] for c in CHANGED):
                continue
            snapshots = [e for e in new_entries if e["memory_id"] == memory_id]
            assert snapshots, f"#{memory_id} changed without an archive: {old} -> {new}"
            assert all(snapshots[0][c] == old[c] for c in CHANGED)
            if old["pinned"]:
                assert snapshots[0]["cause"].startswith("user") or snapshots[0]["operation"] == "restore"
    assert _rows(db.path)[pinned]["text"] == "L'utilisateur est allergique aux arachides."
    assert _rows(db.path)[pinned]["expires_at"] is None


async def test_a_pinned_memory_keeps_its_later_expiry_when_a_repeat_brings_an_earlier_one(db, clock):
    """A shorter date would make the pinned memory leave every context before its owner said so."""
    store = MemoryStore(db, clock=clock)
    leave = await store.add(
        "camille",
        NewMemory(
            text="L'utilisateur est en congé en août.", place="guild-1", expires_at=clock.now + timedelta(days=2)
        ),
    )
    await store.set_pinned("camille", leave, True)
    report = await reflect(db, clock, memories=[fact("L'utilisateur est en congé en août.", expires_at="2026-11-02")])
    assert [d.action for d in report.decisions] == ["absorbed"]
    assert (await store.get("camille", leave)).expires_at == clock.now + timedelta(days=2)
