"""Regenerate and swipe, settling, edits and deletes, provenance and receipts: the engine on a
real SQLite file and the scripted LLM server."""

from __future__ import annotations

import asyncio
import json
import re
import time

from bot.clients.storage import fetch_all, fetch_one
from bot.engine import Engine, Incoming, Receipt
from bot.memory.model import Cause, NewMemory
from bot.memory.stores.exchanges import SettledExchange
from bot.memory.stores.provenance import sources_of
from tests.builders import make_engine
from tests.fakes.llm_server import LLMRequest

FACT = "L'utilisateur a un chat qui s'appelle Pixel."


def msg(
    text: str, *, user: str = "alice", story: str = "chan-1", swipes: bool = True, message_id: str | None = None
) -> Incoming:
    return Incoming(
        user_id=user,
        user_name=user.title(),
        text=text,
        story_id=story,
        place="guild-1",
        message_id=message_id or f"m-{time.monotonic_ns()}",
        swipes=swipes,
    )


class Script:
    """Replies numbered in order; reflections recorded and answered by `reflect`."""

    def __init__(self) -> None:
        self.replies = 0
        self.reflections: list[LLMRequest] = []
        self.reflect = lambda request: {}

    def __call__(self, request: LLMRequest) -> str:
        if request.json_schema is not None:
            self.reflections.append(request)
            return json.dumps(self.reflect(request))
        self.replies += 1
        return f"réponse {self.replies}"


def shown_ids(request: LLMRequest) -> list[int]:
    known = request.last_user.split("Known memories", 1)[1].split("The exchange", 1)[0]
    return [int(i) for i in re.findall(r"^\[(\d+)\]", known, re.MULTILINE)]


async def engine_with(db, http, llm_server, tmp_path, **settings) -> tuple[Engine, Script]:
    script = Script()
    llm_server.handler = script
    engine = make_engine(db, http, llm_server, tmp_path, **({"settle_seconds": 60} | settings))
    return engine, script


async def reflected(db, user: str = "alice") -> list[tuple[str, str, str | None]]:
    rows = await fetch_all(
        db.reader, "SELECT user_message, reply, reflected_at FROM exchanges WHERE user_id = ? ORDER BY id", (user,)
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def test_regenerate_asks_the_same_prompt_and_the_reflection_reads_only_the_answer_kept(
    db, http, llm_server, tmp_path
):
    engine, script = await engine_with(db, http, llm_server, tmp_path)
    first = await engine.conversation.turn(msg("J'ai un chat qui s'appelle Pixel."))
    assert first.reply == "réponse 1" and first.exchange_id is not None
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert script.reflections == []  # open: the user may still ask for another answer

    second = await engine.conversation.regenerate("alice", first.exchange_id)
    assert second is not None and (second.n, second.total, second.text) == (2, 2, "réponse 2")
    replies = [r for r in llm_server.chats if r.json_schema is None]
    assert replies[1].messages == replies[0].messages  # same memories, same history, same message
    back = await engine.conversation.swipe("alice", first.exchange_id, -1)
    assert back is not None and (back.n, back.total, back.text) == (1, 2, "réponse 1")

    # Writing again in the story settles the previous exchange on the answer shown.
    await engine.conversation.turn(msg("Et toi ?"))
    await engine.operator.wait_reflections("alice")
    (request,) = script.reflections
    assert "réponse 1" in request.last_user and "réponse 2" not in request.last_user
    assert (await reflected(db))[0][1:] == ("réponse 1", (await reflected(db))[0][2])
    assert (await reflected(db))[0][2] is not None
    assert await engine.conversation.regenerate("alice", first.exchange_id) is None  # settled: too late
    assert await engine.conversation.swipe("alice", first.exchange_id, 1) is None
    row = await fetch_one(db.reader, "SELECT prompt FROM exchanges WHERE id = ?", (first.exchange_id,))
    assert row is not None and row[0] is None  # the channel lines it held are not kept


async def test_an_open_exchange_is_someone_elses_to_swipe_only_as_an_unknown_one(db, http, llm_server, tmp_path):
    engine, _ = await engine_with(db, http, llm_server, tmp_path)
    result = await engine.conversation.turn(msg("Salut"))
    assert result.exchange_id is not None
    assert await engine.conversation.regenerate("bob", result.exchange_id) is None
    assert await engine.conversation.swipe("bob", result.exchange_id, 1) is None
    assert await engine.conversation.shown("bob", result.exchange_id) is None
    shown = await engine.conversation.shown("alice", result.exchange_id)
    assert shown is not None and shown.total == 1


async def test_the_settle_delay_settles_an_exchange_nobody_followed_and_tells_the_front_end(
    db, http, llm_server, tmp_path
):
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0.3)
    settled: list[SettledExchange] = []

    async def listener(event: SettledExchange) -> None:
        settled.append(event)

    engine.listen(settled=listener)
    result = await engine.conversation.turn(msg("J'habite à Lyon."))
    await engine.conversation.reply_sent("alice", result.exchange_id or 0, "reply-42")
    await asyncio.sleep(0.1)
    assert script.reflections == [] and settled == []
    # A swipe restarts the delay: the user is still choosing.
    await engine.conversation.swipe("alice", result.exchange_id or 0, 0)
    await asyncio.sleep(0.25)
    assert settled == []
    await asyncio.sleep(0.2)
    await engine.operator.wait_background(5)
    assert [(s.id, s.reply_message_id) for s in settled] == [(result.exchange_id, "reply-42")]
    assert len(script.reflections) == 1


async def test_a_restart_settles_what_was_left_open_and_reflects_it(db, http, llm_server, tmp_path):
    engine, script = await engine_with(db, http, llm_server, tmp_path)
    result = await engine.conversation.turn(msg("Je suis végétarienne."))
    await engine.conversation.regenerate("alice", result.exchange_id or 0)
    await engine.close()  # the process stops before the exchange settled: nothing reflected yet
    assert script.reflections == []

    again, script2 = await engine_with(db, http, llm_server, tmp_path)
    await again.start()
    await again.operator.wait_reflections("alice")
    (request,) = script2.reflections
    assert "réponse 2" in request.last_user  # the answer that was shown when it stopped
    assert (await reflected(db))[0][2] is not None


async def test_a_turn_without_swipes_is_settled_at_once(db, http, llm_server, tmp_path):
    engine, script = await engine_with(db, http, llm_server, tmp_path)
    result = await engine.conversation.turn(msg("Bonjour", swipes=False))
    assert await engine.conversation.regenerate("alice", result.exchange_id or 0) is None
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert len(script.reflections) == 1


async def test_a_memory_remembers_every_exchange_it_came_from(db, http, llm_server, tmp_path, store):
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    script.reflect = lambda r: {"memories": [{"text": FACT, "type": "fact", "confidence": 0.9}]}
    one = await engine.conversation.turn(msg("J'ai un chat, Pixel.", swipes=False))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    two = await engine.conversation.turn(msg("Pixel mon chat dort.", swipes=False))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    (memory,) = await store.list("alice")
    assert await sources_of(db, "alice", memory.id) == [one.exchange_id, two.exchange_id]


async def test_a_message_edited_before_its_reflection_is_reflected_as_edited(db, http, llm_server, tmp_path):
    engine, script = await engine_with(db, http, llm_server, tmp_path)
    await engine.conversation.turn(msg("J'ai un chien.", message_id="d-1"))
    assert await engine.conversation.message_edited("d-1", "J'ai un chat.") == "reflected as edited"
    await engine.conversation.settle("alice")
    await engine.operator.wait_reflections("alice")
    (request,) = script.reflections
    assert "J'ai un chat." in request.last_user and "chien" not in request.last_user
    assert "edited the message" not in request.last_user  # not a correction: nothing was read yet


async def test_an_edit_landing_during_the_reflection_rolls_it_back_and_the_edited_text_is_reflected(
    db, http, llm_server, tmp_path, store
):
    engine, _script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    gate = asyncio.Event()
    seen: list[str] = []

    async def handler(request: LLMRequest) -> str:
        if request.json_schema is None:
            return "ok"
        seen.append(request.last_user)
        if len(seen) == 1:
            await gate.wait()
        text = "L'utilisateur a un chien." if "chien" in request.last_user.split("The exchange")[1] else FACT
        return json.dumps({"memories": [{"text": text, "type": "fact", "confidence": 0.9}]})

    llm_server.handler = handler
    await engine.conversation.turn(msg("J'ai un chien.", message_id="d-2", swipes=False))
    engine.operator.schedule_reflection("alice")
    while not seen:
        await asyncio.sleep(0.01)
    assert await engine.conversation.message_edited("d-2", "J'ai un chat qui s'appelle Pixel.") == "reflected as edited"
    gate.set()
    await engine.operator.wait_reflections("alice")
    assert len(seen) == 2
    assert [m.text for m in await store.list("alice")] == [FACT]


async def test_a_message_edited_after_its_reflection_is_reflected_again_as_a_correction(
    db, http, llm_server, tmp_path, store
):
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    other = await store.add("alice", NewMemory(text="L'utilisateur aime le jazz.", place="guild-1"))
    script.reflect = lambda r: {"memories": [{"text": "L'utilisateur a un chien.", "type": "fact", "confidence": 0.9}]}
    await engine.conversation.turn(msg("J'ai un chien.", message_id="d-3", swipes=False))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    produced = [m for m in await store.list("alice") if m.id != other]
    (dog,) = produced

    def correct(request: LLMRequest) -> dict:
        ids = shown_ids(request)
        assert dog.id in ids
        return {"replace": [{"id": dog.id, "text": "L'utilisateur a un chat."}]}

    script.reflect = correct
    assert await engine.conversation.message_edited("d-3", "Pardon : j'ai un chat.") == "correction"
    await engine.operator.wait_reflections("alice")
    request = script.reflections[-1]
    assert "It used to say" in request.last_user and "J'ai un chien." in request.last_user
    assert f"Memories taken from the previous version: [{dog.id}]" in request.last_user
    assert shown_ids(request)[0] == dog.id  # shown first, replaceable
    assert (await store.get("alice", dog.id)).text == "L'utilisateur a un chat."  # type: ignore[union-attr]
    history = await store.history("alice")
    assert history[0].memory_id == dog.id and history[0].text == "L'utilisateur a un chien."
    row = await fetch_one(db.reader, "SELECT edited_from, reflected_at FROM exchanges WHERE message_id = 'd-3'")
    assert row is not None and row[0] is None and row[1] is not None
    assert await engine.conversation.message_edited("d-3", "Pardon : j'ai un chat.") == "unchanged"
    assert await engine.conversation.message_edited("nope", "x") == "unknown"


async def test_a_deleted_message_archives_what_only_it_produced_and_keeps_pinned_and_shared_ones(
    db, http, llm_server, tmp_path, store
):
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    texts = {
        "d-4": ["L'utilisateur a un chat.", "L'utilisateur habite à Lyon.", "L'utilisateur joue du violon."],
        "d-5": ["L'utilisateur joue du violon."],
    }
    current: list[str] = []
    script.reflect = lambda r: {"memories": [{"text": t, "type": "fact", "confidence": 0.9} for t in current]}
    for message_id in ("d-4", "d-5"):
        current[:] = texts[message_id]
        await engine.conversation.turn(msg(f"message {message_id}", message_id=message_id, swipes=False))
        engine.operator.schedule_reflection("alice")
        await engine.operator.wait_reflections("alice")
    by_text = {m.text: m for m in await store.list("alice")}
    cat, lyon, violin = (by_text[t] for t in texts["d-4"])
    await engine.memories.pin("alice", lyon.id)

    outcome = await engine.conversation.message_deleted("d-4")
    assert outcome.user_id == "alice" and outcome.archived == [cat.id] and outcome.kept_pinned == [lyon.id]
    remaining = {m.id for m in await store.list("alice")}
    assert remaining == {lyon.id, violin.id}  # pinned stays; violin came from d-5 too
    (entry,) = [h for h in await store.history("alice") if h.memory_id == cat.id]
    assert entry.cause == Cause("message_deleted") and entry.operation == "delete"
    rows = await fetch_all(db.reader, "SELECT user_message FROM exchanges WHERE message_id = 'd-4'")
    assert [r[0] for r in rows] == [""]
    turns = await fetch_all(db.reader, "SELECT query FROM turns WHERE user_id = 'alice' AND query LIKE '%d-4%'")
    await engine.conversation.wait_recorded("alice")
    turns = await fetch_all(db.reader, "SELECT query FROM turns WHERE user_id = 'alice' AND query LIKE '%d-4%'")
    assert turns == []
    # Restorable as any forgotten memory.
    assert await engine.memories.restore("alice", entry.id) == cat.id
    assert (await engine.conversation.message_deleted("d-4")).archived == []
    assert (await engine.conversation.message_deleted("unknown")).user_id is None


async def test_a_message_deleted_before_it_settled_is_never_reflected(db, http, llm_server, tmp_path):
    engine, script = await engine_with(db, http, llm_server, tmp_path)
    await engine.conversation.turn(msg("Mon code de carte est 1234.", message_id="d-6"))
    await engine.conversation.message_deleted("d-6")
    await engine.conversation.settle("alice")
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert script.reflections == []
    assert (await engine.memories.stats("alice")).pending_reflections == 0


async def test_a_receipt_lists_what_the_reflection_changed_and_says_when_a_memory_is_gone(
    db, http, llm_server, tmp_path, store
):
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    jazz = await store.add("alice", NewMemory(text="L'utilisateur aime le jazz.", place="guild-1"))
    receipts: list[Receipt] = []

    async def listener(event: Receipt) -> None:
        receipts.append(event)

    engine.listen(receipt=listener)
    script.reflect = lambda r: {
        "memories": [{"text": FACT, "type": "fact", "confidence": 0.9}],
        "delete": [jazz],
    }
    result = await engine.conversation.turn(msg("J'ai un chat, Pixel. Et je n'aime plus le jazz.", swipes=False))
    await engine.conversation.reply_sent("alice", result.exchange_id or 0, "reply-7")
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    (receipt,) = receipts
    assert (receipt.exchange_id, receipt.reply_message_id, receipt.changes) == (result.exchange_id, "reply-7", 2)

    lines = await engine.conversation.receipt("alice", result.exchange_id or 0)
    assert [(line.change.action, line.change.text) for line in lines] == [
        ("forgotten", "L'utilisateur aime le jazz."),
        ("added", FACT),
    ]
    assert lines[0].current is None and lines[1].current is not None
    assert await engine.conversation.receipt("bob", result.exchange_id or 0) == []

    added = lines[1].change.memory_id
    await engine.memories.forget("alice", added)
    assert [line.current for line in await engine.conversation.receipt("alice", result.exchange_id or 0)] == [
        None,
        None,
    ]


async def test_a_reflection_that_changes_nothing_sends_no_receipt(db, http, llm_server, tmp_path):
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    receipts: list[Receipt] = []

    async def listener(event: Receipt) -> None:
        receipts.append(event)

    engine.listen(receipt=listener)
    await engine.conversation.turn(msg("Salut !", swipes=False))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert len(script.reflections) == 1 and receipts == []


async def test_an_edit_by_the_user_is_archived_first_and_restorable(db, http, llm_server, tmp_path, store):
    engine, _ = await engine_with(db, http, llm_server, tmp_path)
    memory_id = await store.add("alice", NewMemory(text="L'utilisateur a un chien.", pinned=True))
    history_id = await engine.memories.edit("alice", memory_id, "L'utilisateur a un chat.")
    assert history_id is not None
    edited = await store.get("alice", memory_id)
    assert edited is not None and edited.text == "L'utilisateur a un chat." and edited.pinned
    (entry,) = await store.history("alice")
    assert (entry.id, entry.operation, entry.text, entry.cause) == (
        history_id,
        "edit",
        "L'utilisateur a un chien.",
        Cause("edit"),
    )
    assert await engine.memories.restore("alice", history_id) == memory_id
    assert (await store.get("alice", memory_id)).text == "L'utilisateur a un chien."  # type: ignore[union-attr]
    assert await engine.memories.edit("bob", memory_id, "L'utilisateur est Bob.") is None
    assert (await store.get("alice", memory_id)).text == "L'utilisateur a un chien."  # type: ignore[union-attr]


async def test_erase_removes_alternatives_sources_and_receipts(db, http, llm_server, tmp_path):
    engine, script = await engine_with(db, http, llm_server, tmp_path)
    script.reflect = lambda r: {"memories": [{"text": FACT, "type": "fact", "confidence": 0.9}]}
    result = await engine.conversation.turn(msg("J'ai un chat, Pixel."))
    await engine.conversation.regenerate("alice", result.exchange_id or 0)
    await engine.conversation.settle("alice")
    await engine.operator.wait_reflections("alice")
    exported = await engine.privacy.export("alice")
    (exchange,) = exported["exchanges"]
    assert exchange["answers"] == ["réponse 1", "réponse 2"] and exchange["reply"] == "réponse 2"
    assert [m["from_exchanges"] for m in exported["memories"]] == [[result.exchange_id]]
    await engine.privacy.erase("alice")
    for table in ("exchange_replies", "memory_sources", "memory_changes"):
        row = await fetch_one(db.reader, f"SELECT COUNT(*) FROM {table}")
        assert row is not None and row[0] == 0, table


async def test_the_terminal_edits_a_memory_the_same_way(db, http, llm_server, tmp_path, store):
    from bot.terminal.commands import Session, run_command

    engine, _ = await engine_with(db, http, llm_server, tmp_path)
    session = Session(user_id="terminal:alice", user_name="alice", story_id="terminal:main", place="terminal")
    memory_id = await engine.memories.remember(
        session.user_id, "J'ai un chien.", story_id="terminal:main", place="terminal"
    )
    answer = await run_command(engine, session, f"/edit {memory_id} J'ai un chat, pas un chien.")
    (entry,) = await store.history(session.user_id)
    assert (
        answer
        == f"Edited #{memory_id}. The previous version is archived as h{entry.id}: `/restore {entry.id}` brings it back."
    )
    assert (await store.get(session.user_id, memory_id)).text == "J'ai un chat, pas un chien."  # type: ignore[union-attr]
    assert await run_command(engine, session, "/edit 999 x") == "You have no memory #999."
    assert await run_command(engine, session, f"/edit {memory_id}") == "Usage: /edit <id> <text>"
    assert (await run_command(engine, session, f"/edit {memory_id} \u200b")).startswith("Not edited:")


async def test_a_receipt_earned_before_the_front_end_listens_is_delivered_when_it_does(db, http, llm_server, tmp_path):
    # At start-up the engine settles open replies and resumes reflections before Discord is up.
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    script.reflect = lambda r: {"memories": [{"text": FACT, "type": "fact", "confidence": 0.9}]}
    result = await engine.conversation.turn(msg("J'ai un chat qui s'appelle Pixel.", swipes=False))
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    receipts: list[Receipt] = []

    async def listener(event: Receipt) -> None:
        receipts.append(event)

    engine.listen(receipt=listener)
    for _ in range(100):
        if receipts:
            break
        await asyncio.sleep(0.01)
    (receipt,) = receipts
    assert (receipt.exchange_id, receipt.changes) == (result.exchange_id, 1)


async def test_a_receipt_earned_before_the_reply_was_posted_is_shown_once_it_is(db, http, llm_server, tmp_path):
    # An answer settled at once is reflected while the front end is still posting it: the
    # reflection finds no message to show its receipt on.
    engine, script = await engine_with(db, http, llm_server, tmp_path, settle_seconds=0)
    script.reflect = lambda r: {"memories": [{"text": FACT, "type": "fact", "confidence": 0.9}]}
    receipts: list[Receipt] = []

    async def listener(event: Receipt) -> None:
        receipts.append(event)

    engine.listen(receipt=listener)
    result = await engine.conversation.turn(msg("J'ai un chat qui s'appelle Pixel.", swipes=False))
    assert result.exchange_id is not None
    await engine.operator.wait_reflections("alice")
    assert [r.reply_message_id for r in receipts] == [None]

    await engine.conversation.reply_sent("alice", result.exchange_id, "discord-42")

    assert [(r.exchange_id, r.reply_message_id, r.changes) for r in receipts[1:]] == [
        (result.exchange_id, "discord-42", 1)
    ]
    assert receipts[1].story_id == receipts[0].story_id
