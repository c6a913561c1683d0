"""The per-user memory cap (MAX_MEMORIES_PER_USER): past it new items are refused with a reason,
corrections and merges still apply, nothing held is dropped, and /memory-stats shows it."""

from __future__ import annotations

import json

import pytest

from bot.config import load_settings
from bot.errors import MemoryCapReached
from bot.memory.model import NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.reflection import parse_reflection
from bot.terminal.commands import Session, run_command
from tests.builders import make_engine, msg

HELD = [
    "L'utilisateur habite à Nantes.",
    "L'utilisateur a deux chats.",
    "L'utilisateur joue du violoncelle.",
]


async def fill(store: MemoryStore, user: str = "u") -> list[int]:
    return [await store.add(user, NewMemory(text=t, place="p")) for t in HELD]


async def test_the_store_refuses_past_the_cap_and_drops_nothing(db, clock):
    store = MemoryStore(db, clock=clock)
    await fill(store)
    before = await store.list("u")
    with pytest.raises(MemoryCapReached, match=r"you hold 3 memories, the most kept per person here \(3\)"):
        await store.add("u", NewMemory(text="L'utilisateur aime le thé."), cap=3)
    assert await store.list("u") == before
    # The cap is per user: another user is not affected.
    await store.add("v", NewMemory(text="L'utilisateur aime le thé."), cap=3)


async def test_a_reflection_past_the_cap_drops_new_items_with_a_decision_and_still_merges(db, clock):
    store = MemoryStore(db, clock=clock)
    ids = await fill(store)
    raw = {
        "memories": [
            {"text": "L'utilisateur aime le thé vert.", "type": "preference", "confidence": 0.9},
            {"text": "L'utilisateur habite à Nantes.", "type": "fact", "confidence": 0.9, "expires_at": "2027-01-01"},
        ],
        "replace": [{"id": ids[1], "text": "L'utilisateur a trois chats."}],
    }
    parsed = parse_reflection(json.dumps(raw))
    ctx = ReflectionContext(
        user_id="u",
        allowed_ids=frozenset(ids),
        character_name="Écho",
        place="p",
        user_message="J'ai maintenant trois chats, j'aime le thé vert.",
        max_memories=3,
    )
    report = await apply_reflection(db, parsed.reflection, ctx, clock=clock)
    actions = {d.text: (d.action, d.detail) for d in report.decisions}
    action, detail = actions["L'utilisateur aime le thé vert."]
    assert action == "dropped" and detail.startswith("memory cap: you hold 3 memories")
    assert actions["L'utilisateur habite à Nantes."][0] == "absorbed"
    assert actions["L'utilisateur a trois chats."][0] == "replaced"
    assert sorted(m.text for m in await store.list("u")) == sorted(
        ["L'utilisateur habite à Nantes.", "L'utilisateur a trois chats.", "L'utilisateur joue du violoncelle."]
    )


async def test_remember_and_memory_stats_past_the_cap(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock, max_memories_per_user=3)
    session = Session("alice", "Alice", "chan-1", "guild-1")
    for text in HELD[:2]:
        assert (await run_command(engine, session, f"/remember {text}")).startswith("Remembered as #")
    stats = await run_command(engine, session, "/memory-stats")
    assert stats.startswith("2 memories of at most 3") and "cap is reached" not in stats

    llm_server.handler = lambda r: (
        json.dumps(
            {
                "memories": [
                    {"text": "L'utilisateur joue du violoncelle.", "type": "fact", "confidence": 0.9},
                    {"text": "L'utilisateur aime le thé vert.", "type": "preference", "confidence": 0.9},
                ]
            }
        )
        if r.json_schema is not None
        else "D'accord."
    )
    await engine.conversation.turn(msg("Je joue du violoncelle et j'aime le thé vert."))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    decisions = [(d.action, d.detail.split(":")[0]) for d in engine.operator.last_reflection("alice").decisions]
    assert decisions == [("added", ""), ("dropped", "memory cap")]

    answer = await run_command(engine, session, "/remember L'utilisateur a un vélo rouge.")
    assert answer == (
        "Not remembered: you hold 3 memories, the most kept per person here (3): forget some to make room."
    )
    stats = await run_command(engine, session, "/memory-stats")
    assert stats.startswith("3 memories of at most 3")
    assert "The cap is reached: new memories are refused until some are forgotten." in stats
    assert len(await store.list("alice")) == 3


def test_the_default_cap_holds_a_hundred_thousand_memories():
    assert load_settings(_env_file=None).engine.max_memories_per_user == 100_000
