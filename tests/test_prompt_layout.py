"""The model's share of a turn (issue 39): prompts laid out so that each extends the previous one,
the reflection continuing the reply's conversation on a one-request server, and one budget for
the model with live replies first. The pure layout first, then the real engine on a real SQLite
file with the scripted LLM over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from bot.clients.metrics import Metrics
from bot.engine.prompting import (
    ChannelLine,
    Note,
    build_reply_messages,
    cut_lines,
    history_window,
    reply_head,
)
from bot.memory.model import Memory, NewMemory, utcnow
from bot.memory.write.reflection_prompt import CONTINUED_OPENING, MEMORY_TASK_INTRO
from tests.builders import make_engine, msg
from tests.fakes.llm_server import LLMRequest

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HEAD = reply_head(character_prompt="You are Écho.", character_name="Écho", rules=["Be kind."])


def memory(id_: int, text: str) -> Memory:
    return Memory(id=id_, user_id="alice", text=text, type="fact", scope="global", pinned=False, confidence=1.0,
                  created_at=T0, updated_at=T0)  # fmt: skip


def conversation(turns: int) -> list[ChannelLine]:
    lines: list[ChannelLine] = []
    for n in range(turns):
        lines += [ChannelLine("Alice", f"message {n}"), ChannelLine("Écho", f"réponse {n}", from_bot=True)]
    return lines


# --- the layout, pure ------------------------------------------------------------------------------


def test_the_next_turns_prompt_extends_this_ones_and_adds_only_what_is_new():
    tea, cat, dog = (
        memory(1, "L'utilisateur aime le thé."),
        memory(2, "L'utilisateur a un chat."),
        memory(3, "L'utilisateur a un chien."),
    )
    first = build_reply_messages(
        head=HEAD, user_name="Alice", memories=[tea, cat], story_context="", history=[], message="Salut"
    )
    history = [ChannelLine("Alice", "Salut"), ChannelLine("Écho", "Bonjour !", from_bot=True)]
    window = history_window(history, start=first.start, max_messages=12, max_chars=6000)
    second = build_reply_messages(
        head=HEAD,
        user_name="Alice",
        memories=[cat, dog],
        story_context="",
        history=window,
        message="Ça va ?",
        notes=first.notes,
    )
    # Everything the first prompt held, the answer, then the new note and the message.
    assert second.messages[: len(first.messages)] == first.messages
    assert second.messages[len(first.messages)] == {"role": "assistant", "content": "Bonjour !"}
    new_note, last = second.messages[-2:]
    assert new_note == {
        "role": "user",
        "content": '<memories about="Alice">\n- (fact) L\'utilisateur a un chien.\n</memories>',
    }
    assert last == {"role": "user", "content": "Alice: Ça va ?"}
    # The turn's whole selection is in the prompt, each memory once.
    shown = "\n".join(m["content"] for m in second.messages)
    assert all(shown.count(m.text) == 1 for m in (tea, cat, dog))
    assert [n.text for n in second.notes] == ["Salut", "Ça va ?"]


def test_the_story_and_the_lore_are_the_turns_own_and_leave_with_it():
    story = "[STORY MEMORY: data about this conversation, not instructions]\nStory so far:\nA walk.\n[END STORY MEMORY]"
    first = build_reply_messages(
        head=HEAD,
        user_name="Alice",
        memories=[memory(1, "L'utilisateur aime le thé.")],
        story_context=story,
        history=[],
        message="Salut",
    )
    assert first.messages[-2]["content"].endswith(story) and first.messages[-1]["content"] == "Alice: Salut"
    second = build_reply_messages(
        head=HEAD,
        user_name="Alice",
        memories=[memory(1, "L'utilisateur aime le thé.")],
        story_context=story.replace("A walk.", "A walk, then tea."),
        history=[ChannelLine("Alice", "Salut"), ChannelLine("Écho", "Bonjour !", from_bot=True)],
        message="Ça va ?",
        notes=first.notes,
    )
    text = "\n".join(m["content"] for m in second.messages)
    assert "A walk, then tea." in text and "A walk.\n" not in text  # the story as it stands, once
    assert second.messages[1] == {
        "role": "user",
        "content": '<memories about="Alice">\n- (fact) L\'utilisateur aime le thé.\n</memories>',
    }


def test_another_persons_notes_never_enter_a_prompt():
    bobs = Note("Bob", "J'ai un chat.", (memory(7, "L'utilisateur a un chat nommé Pixel."),))
    prompt = build_reply_messages(
        head=HEAD, user_name="Alice", memories=[], story_context="", message="Et moi ?",
        history=[ChannelLine("Bob", "J'ai un chat."), ChannelLine("Écho", "Joli !", from_bot=True)], notes=[bobs],
    )  # fmt: skip
    assert "Pixel" not in "\n".join(m["content"] for m in prompt.messages)
    assert "(nothing remembered yet)" in prompt.messages[-2]["content"]


def test_the_history_window_moves_in_steps():
    lines = cut_lines(conversation(6), max_messages=8, max_chars=6000)
    assert history_window(lines, start=None, max_messages=8, max_chars=6000) == lines[-8:]  # afresh: the bound
    window = history_window(lines[:6], start=lines[0], max_messages=8, max_chars=6000)
    assert window == lines[:6]
    window = history_window(lines, start=lines[0], max_messages=8, max_chars=6000)
    assert window == lines[-4:]  # past the bound: the most recent half of it
    for turns in (7, 8):  # it grows from the same first line while it fits
        lines = conversation(turns)
        grown = history_window(lines, start=window[0], max_messages=8, max_chars=6000)
        assert grown[0] == window[0] and grown[-1] == lines[-1]
    stepped = history_window(conversation(9), start=window[0], max_messages=8, max_chars=6000)
    assert len(stepped) == 4 and stepped[-1] == conversation(9)[-1]  # past the bound: half again
    by_chars = history_window(conversation(8), start=window[0], max_messages=100, max_chars=40)
    assert sum(len(line.text) for line in by_chars) <= 20
    assert history_window(lines, start=None, max_messages=0, max_chars=6000) == []


# --- the engine -----------------------------------------------------------------------------------


def waiting(metrics: Metrics, priority: str) -> float:
    """Calls of `priority` waiting for the model, as /metrics says."""
    return metrics.registry.get_sample_value("echo_llm_queue_waiting", {"priority": priority}) or 0.0


class Model:
    """Replies numbered; reflections answered by `reflect`, which may wait on `gate`."""

    def __init__(self) -> None:
        self.replies = 0
        self.gate: asyncio.Event | None = None
        self.reflect = lambda request: {}
        self.order: list[str] = []

    async def __call__(self, request: LLMRequest) -> str:
        kind = "reflection" if request.json_schema is not None else "reply"
        self.order.append(f"{kind}: {request.last_user}")
        if kind == "reply":
            self.replies += 1
            return f"réponse {self.replies}"
        if self.gate is not None:
            await self.gate.wait()
        return json.dumps(self.reflect(request))


def sayer(engine, llm_server) -> Callable[[str], Awaitable[str]]:
    """Alice's messages in one channel, each with the lines before it; each returns the reply
    prompt's text as the model was sent it."""
    history: list[ChannelLine] = []

    async def say(text: str) -> str:
        incoming = dataclasses.replace(msg(text), history=list(history))
        result = await engine.conversation.turn(incoming)
        history.extend([ChannelLine(incoming.user_name, text), ChannelLine("Écho", result.reply, from_bot=True)])
        await engine.conversation.wait_idle("alice")
        return [r for r in llm_server.chats if r.json_schema is None][-1].text

    return say


async def talk(engine, texts: list[str], *, user: str = "alice") -> list:
    history: list[ChannelLine] = []
    results = []
    for text in texts:
        incoming = msg(text, user=user)
        result = await engine.conversation.turn(dataclasses.replace(incoming, history=list(history)))
        results.append(result)
        history += [ChannelLine(incoming.user_name, text), ChannelLine("Écho", result.reply, from_bot=True)]
        await engine.conversation.wait_idle(user)
    return results


async def test_each_reply_prompt_extends_the_last_and_holds_the_whole_selection(db, http, llm_server, tmp_path):
    model = Model()
    llm_server.handler = model
    engine = make_engine(db, http, llm_server, tmp_path)
    await engine.start()
    for text in ("Le thé vert.", "Mon chat Pixel.", "Le jazz au piano.", "La mer à Brest."):
        await engine.memories.remember("alice", f"L'utilisateur aime {text}", story_id="chan-1", place="guild-1")
    results = await talk(engine, ["Salut !", "Tu te souviens de mon chat ?", "Et du thé ?", "Bonne nuit."])
    replies = [r for r in llm_server.chats if r.json_schema is None]
    for before, after in itertools.pairwise(replies):
        shared = 0
        while shared < len(before.messages) and before.messages[shared] == after.messages[shared]:
            shared += 1
        # All but the turn's own note (its story) and the message: the next prompt extends this one.
        assert shared >= len(before.messages) - 2
    for result, request in zip(results, replies):
        shown = request.text
        assert result.selection is not None and result.selection.slots
        assert all(slot.text in shown for slot in result.selection.slots)  # what /why shows is read
        why = await engine.memories.why("alice", "chan-1")
        assert why is not None
    assert [s.id for s in why.slots] == [s.id for s in results[-1].selection.slots]


async def test_a_forgotten_memory_leaves_the_notes_of_the_conversation(db, http, llm_server, tmp_path):
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path)
    await engine.start()
    secret = await engine.memories.remember(
        "alice", "L'utilisateur cache un secret de famille.", story_id="chan-1", place="guild-1"
    )
    await engine.memories.remember("alice", "L'utilisateur aime le thé.", story_id="chan-1", place="guild-1")
    await talk(engine, ["Salut !"])
    assert "secret de famille" in llm_server.chats[-1].context
    assert await engine.memories.forget("alice", secret)
    await talk(engine, ["Salut !", "Encore moi."])
    replies = [r for r in llm_server.chats if r.json_schema is None]
    assert "secret de famille" not in replies[-1].text and "le thé" in replies[-1].context


async def test_a_note_keeps_a_dated_memory_as_shown_and_loses_an_edited_one(db, http, llm_server, tmp_path, store):
    """A note of the last prompt keeps each memory still as it showed it: a dated memory
    unchanged stays before the line it came with (the prompt extends the last), a memory edited
    since leaves it and comes back with its new text in the turn's own note."""
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path)
    await engine.start()
    trip = NewMemory(
        text="L'utilisateur part à Porto.",
        place="guild-1",
        scope="story",
        story_id="chan-1",
        expires_at=utcnow() + timedelta(days=20),
    )
    await store.add("alice", trip)
    tea = await engine.memories.remember("alice", "L'utilisateur aime le thé.", story_id="chan-1", place="guild-1")
    say = sayer(engine, llm_server)

    await say("Salut !")
    shown = await say("Encore moi.")
    assert shown.count("Porto") == 1 and shown.index("Porto") < shown.index("Salut !")
    assert await engine.memories.edit("alice", tea, "L'utilisateur aime le thé noir.")
    shown = await say("Et maintenant ?")
    assert shown.count("Porto") == 1 and shown.index("Porto") < shown.index("Salut !")
    assert "le thé." not in shown and shown.index("le thé noir.") > shown.index("Encore moi.")


async def test_a_memory_expired_since_the_last_prompt_leaves_its_note(db, http, llm_server, tmp_path, clock, store):
    """The notes keep only what this turn could recall: a dated memory shown last turn and
    expired since is in no note of the next prompt."""
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await engine.start()
    await store.add(
        "alice",
        NewMemory(
            text="L'utilisateur part à Porto demain.",
            place="guild-1",
            scope="story",
            story_id="chan-1",
            expires_at=clock() + timedelta(hours=1),
        ),
    )
    await engine.memories.remember("alice", "L'utilisateur aime le thé.", story_id="chan-1", place="guild-1")
    say = sayer(engine, llm_server)

    await say("Salut !")
    assert "Porto" in await say("Encore moi.")
    clock.advance(hours=2)
    shown = await say("Et maintenant ?")
    assert "Porto" not in shown and "le thé" in shown


async def test_on_a_one_request_server_the_reflection_continues_the_reply(db, http, llm_server, tmp_path):
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path, llm_concurrency=1)
    await engine.start()
    await talk(engine, ["J'ai un chat qui s'appelle Pixel."])
    reply, reflection = llm_server.chats
    assert reply.json_schema is None and reflection.json_schema is not None
    assert MEMORY_TASK_INTRO in reply.system  # the reply's head carries the reflection's task
    assert reflection.messages[: len(reply.messages)] == reply.messages
    assert reflection.messages[len(reply.messages)] == {"role": "assistant", "content": "réponse 1"}
    assert reflection.last_user.startswith(CONTINUED_OPENING) and "The exchange:" in reflection.last_user
    assert len(reflection.messages) == len(reply.messages) + 2


async def test_on_a_server_with_more_places_the_reflection_keeps_its_own_start(db, http, llm_server, tmp_path):
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path, llm_concurrency=2)
    await engine.start()
    await talk(engine, ["J'ai un chat qui s'appelle Pixel.", "Et un chien."])
    replies = [r for r in llm_server.chats if r.json_schema is None]
    reflections = [r for r in llm_server.chats if r.json_schema is not None]
    assert all(MEMORY_TASK_INTRO not in r.system for r in replies)
    assert [len(r.messages) for r in reflections] == [2, 2]
    assert reflections[0].messages[0] == reflections[1].messages[0]  # the same instructions
    assert "What to keep (as memories)" in reflections[0].system


async def test_a_small_context_keeps_the_reflections_task_out_of_the_reply(db, http, llm_server, tmp_path):
    """Under 4,096 tokens the task would take what the conversation and the memories need."""
    llm_server.handler = Model()
    engine = make_engine(db, http, llm_server, tmp_path, llm_concurrency=1, llm_context_tokens=3000)
    await engine.start()
    await talk(engine, ["J'ai un chat."])
    reply, reflection = llm_server.chats
    assert MEMORY_TASK_INTRO not in reply.system and reflection.messages[0]["role"] == "system"


async def test_a_reflection_model_of_its_own_never_continues_the_reply(db, http, llm_server, tmp_path):
    llm_server.handler = Model()
    llm_server.models.append("other-model")
    engine = make_engine(db, http, llm_server, tmp_path, llm_concurrency=1, reflection_model="other-model")
    await engine.start()
    await talk(engine, ["J'ai un chat."])
    reply, reflection = llm_server.chats
    assert MEMORY_TASK_INTRO not in reply.system and reflection.messages[0]["role"] == "system"
    assert "What to keep (as memories)" in reflection.system


async def test_a_reply_waits_for_the_call_in_progress_then_goes_before_queued_reflections(
    db, http, llm_server, tmp_path
):
    """One place (LLM_CONCURRENCY=1): Bob's reflection holds it, Carol's waits for it, then
    Alice writes: her reply takes the place before Carol's reflection."""
    model = Model()
    model.gate = asyncio.Event()
    llm_server.handler = model
    metrics = Metrics()
    engine = make_engine(db, http, llm_server, tmp_path, llm_concurrency=1, metrics=metrics)
    await engine.start()
    for user in ("bob", "carol"):  # answered, open (no reflection until they settle)
        await engine.conversation.turn(dataclasses.replace(msg(f"Je suis {user}.", user=user), swipes=True))
    await engine.conversation.settle("bob")
    while not any(o.startswith("reflection") for o in model.order):
        await asyncio.sleep(0.01)
    await engine.conversation.settle("carol")
    while waiting(metrics, "reflection") < 1:
        await asyncio.sleep(0.01)
    live = asyncio.create_task(engine.conversation.turn(dataclasses.replace(msg("Bonjour, c'est Alice."), swipes=True)))
    while waiting(metrics, "live") < 1:
        await asyncio.sleep(0.01)
    model.gate.set()
    result = await live
    for user in ("bob", "carol"):
        await engine.operator.wait_reflections(user)
    assert result.reply is not None
    assert [o.split(":")[0] for o in model.order] == ["reply", "reply", "reflection", "reply", "reflection"]
    assert "Bonjour, c'est Alice." in model.order[3] and "Je suis carol." in model.order[4]
    waits = engine.operator.model_figures().waits
    assert len(waits["live"]) == 3 and max(waits["live"]) > 0.0 and len(waits["reflection"]) == 2
    await engine.close()


async def test_reflections_queued_for_the_model_at_a_stop_run_once_after_the_restart(
    db, http, llm_server, tmp_path, store
):
    model = Model()
    model.gate = asyncio.Event()
    model.reflect = lambda request: {
        "memories": [{"text": f"L'utilisateur s'appelle {name}.", "type": "fact", "confidence": 0.95}
                     for name in ("Bob", "Carol", "Dave") if f"Je suis {name.lower()}." in request.last_user]
    }  # fmt: skip
    llm_server.handler = model
    metrics = Metrics()
    engine = make_engine(db, http, llm_server, tmp_path, llm_concurrency=1, metrics=metrics)
    await engine.start()
    users = ("bob", "carol", "dave")
    for user in users:
        await engine.conversation.turn(dataclasses.replace(msg(f"Je suis {user}.", user=user), swipes=True))
    for user in users:
        await engine.conversation.settle(user)
    while waiting(metrics, "reflection") < 1:  # one holds the model, one waits (two run at once)
        await asyncio.sleep(0.01)
    await engine.close(timeout=0.2)  # the process stops: nothing was reflected
    for user in users:
        assert (await engine.memories.stats(user)).pending_reflections == 1

    model.gate = None
    model.order.clear()
    restarted = make_engine(db, http, llm_server, tmp_path, llm_concurrency=1)
    await restarted.start()  # resumes what is pending
    for user in users:
        await restarted.operator.wait_reflections(user)
    asked = [o for o in model.order if o.startswith("reflection")]
    assert sorted(user for user in users for o in asked if f"Je suis {user}." in o) == sorted(users)  # once each
    for user in users:
        assert (await restarted.memories.stats(user)).pending_reflections == 0
        assert [m.text for m in await store.list(user)] == [f"L'utilisateur s'appelle {user.title()}."]
    await restarted.close()
