"""A burst is one exchange built from several messages: an edit or a delete of any of them (not
only the last) reaches the stored transcript, /why and the memories, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re

import pytest

from bot.clients.storage import fetch_all
from bot.engine import Engine, Incoming, MessagePart, join_parts
from bot.memory.model import Cause
from bot.presenting import why_text
from tests.builders import make_engine
from tests.fakes.llm_server import LLMRequest

pytestmark = pytest.mark.both_stores

FACTS = {
    "Pixel": "L'utilisateur a un chat qui s'appelle Pixel.",
    "violon": "L'utilisateur joue du violon le jeudi.",
    "Lyon": "L'utilisateur habite à Lyon depuis l'été.",
}
SAID = {
    "Pixel": "Mon chat s'appelle Pixel, il dort toute la journée.",
    "violon": "Le jeudi soir je joue du violon.",
    "Lyon": "J'habite à Lyon depuis cet été.",
}


def facts_in(request: LLMRequest) -> list[str]:
    """The facts the exchange's own words say (the known memories shown are not read)."""
    said = " ".join(re.findall(r"<message [^>]*>\n(.*?)\n</message>", request.last_user, re.DOTALL))
    return [fact for word, fact in FACTS.items() if word in said]


def script(request: LLMRequest) -> str:
    if request.json_schema is None:
        return "D'accord."
    return json.dumps({"memories": [{"text": t, "type": "fact", "confidence": 0.95} for t in facts_in(request)]})


def burst(*words: str) -> Incoming:
    parts = [MessagePart(f"b-{n}", SAID[w]) for n, w in enumerate(words, 1)]
    return Incoming(
        user_id="alice",
        user_name="Alice",
        text=join_parts(parts),
        story_id="chan-1",
        place="guild-1",
        message_id=parts[-1].message_id,
        parts=parts,
    )


async def settled_engine(db, http, llm_server, tmp_path) -> Engine:
    llm_server.handler = script
    engine = make_engine(db, http, llm_server, tmp_path)
    await engine.start()
    await engine.conversation.turn(burst("Pixel", "violon", "Lyon"))
    await engine.operator.wait_reflections("alice")
    await engine.conversation.wait_recorded("alice")
    assert sorted(m.text for m in await engine.memories.list("alice")) == sorted(FACTS.values())
    return engine


async def transcript(db) -> list[str]:
    return [r[0] for r in await fetch_all(db.reader, "SELECT user_message FROM exchanges WHERE user_id = 'alice'")]


async def test_editing_a_message_of_a_burst_but_the_last_rewrites_the_transcript_and_why(
    db, http, llm_server, tmp_path
):
    engine = await settled_engine(db, http, llm_server, tmp_path)
    assert (
        await engine.conversation.message_edited("b-1", "Mon chat s'appelle Biscuit.", author="alice") == "correction"
    )
    expected = "\n".join(["Mon chat s'appelle Biscuit.", SAID["violon"], SAID["Lyon"]])
    assert await transcript(db) == [expected]
    why = why_text(await engine.memories.why("alice", "chan-1"))
    assert "Biscuit" in why and "Pixel" not in why
    assert await engine.conversation.message_edited("b-1", "Mon chat s'appelle Biscuit.", author="alice") == "unchanged"
    assert await engine.conversation.message_edited("b-2", "Je joue du piano.", author="bob") == "unknown", (
        "only the author edits"
    )
    await engine.close()


async def test_deleting_a_message_of_a_burst_but_the_last_archives_what_the_exchange_alone_produced(
    db, http, llm_server, tmp_path
):
    engine = await settled_engine(db, http, llm_server, tmp_path)
    pinned = next(m for m in await engine.memories.list("alice") if m.text == FACTS["violon"])
    await engine.memories.pin("alice", pinned.id)
    outcome = await engine.conversation.message_deleted("b-1")
    assert outcome.user_id == "alice" and len(outcome.archived) == 2 and outcome.kept_pinned == [pinned.id]
    assert await transcript(db) == [SAID["violon"] + "\n" + SAID["Lyon"]]
    why = why_text(await engine.memories.why("alice", "chan-1"))
    assert "Pixel" not in why and SAID["Lyon"] in why
    # What the other messages say is learnt again from them; what the deleted one said is not.
    await engine.operator.wait_reflections("alice")
    live = sorted(m.text for m in await engine.memories.list("alice"))
    assert live == sorted([FACTS["violon"], FACTS["Lyon"]])
    archived = {(h.text, h.cause) for h in (await engine.memories.history("alice"))[0]}
    assert (FACTS["Pixel"], Cause("message_deleted")) in archived
    exported = json.dumps(await engine.privacy.export_person("alice"), ensure_ascii=False)
    assert SAID["Pixel"] not in exported
    assert (await engine.conversation.message_deleted("b-1")).archived == [], "a second delete event changes nothing"
    await engine.close()


async def test_deleting_every_message_of_a_burst_forgets_the_exchange(db, http, llm_server, tmp_path):
    engine = await settled_engine(db, http, llm_server, tmp_path)
    for message_id in ("b-3", "b-1", "b-2"):
        await engine.conversation.message_deleted(message_id)
    await engine.operator.wait_reflections("alice")
    assert await transcript(db) == [""]
    assert await engine.memories.list("alice") == []
    rows = await fetch_all(db.reader, "SELECT text, marks FROM exchange_messages WHERE user_id = 'alice'")
    assert {tuple(r) for r in rows} == {("", "")}
    assert "Pixel" not in why_text(await engine.memories.why("alice", "chan-1"))
    await engine.close()


async def test_an_exchange_saved_before_migration_0008_is_found_by_its_message(http, llm_server, tmp_path):
    """Exchanges of an older database knew one message: after the upgrade, its edit and delete
    still reach them."""
    import shutil

    from bot.clients.db import MIGRATIONS_DIR, SQLiteDatabase

    old = tmp_path / "migrations-0007"
    old.mkdir()
    for path in sorted(MIGRATIONS_DIR.glob("000[1-7]_*.sql")):
        shutil.copy(path, old / path.name)
    path = tmp_path / "old.db"
    db = await SQLiteDatabase.open(path, old)
    async with db.write() as conn:
        await conn.execute(
            "INSERT INTO exchanges (user_id, user_name, story_id, place, message_id, user_message, reply, "
            "created_at, answered_at, reflected_at, settled_at) VALUES ('alice', 'Alice', 'chan-1', 'guild-1', "
            "'old-1', 'Mon chat s''appelle Pixel.', 'Noté.', '2026-11-01T09:00:00+00:00', "
            "'2026-11-01T09:00:00+00:00', '2026-11-01T09:00:00+00:00', '2026-11-01T09:00:00+00:00')"
        )
    await db.close()
    db = await SQLiteDatabase.open(path)
    engine = make_engine(db, http, llm_server, tmp_path)
    llm_server.handler = script
    await engine.start()
    assert (
        await engine.conversation.message_edited("old-1", "Mon chat s'appelle Biscuit.", author="alice") == "correction"
    )
    assert (await engine.conversation.message_deleted("old-1")).user_id == "alice"
    rows = await fetch_all(
        db.reader, "SELECT user_message, deleted_at IS NOT NULL FROM exchanges WHERE user_id = 'alice'"
    )
    assert [tuple(r) for r in rows] == [("", 1)]
    await engine.close()
    await db.close()
