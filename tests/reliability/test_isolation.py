"""Isolation between users: random sequences of every memory operation and command, by three
users who keep aiming at each other's ids, never change or reveal another user's data.

A hypothesis state machine drives one real Engine (real SQLite file, the scripted LLM and
embedding servers over real HTTP on 127.0.0.1). Ids are drawn from every id that exists — any
user's memories, history entries and story anchors — plus ids that never existed; half the
draws aim at another user's live row. After every step, each user other than the actor (and the
character, whose rules are memories too) must have exactly the data they had before: their
export, and the raw rows of every user table. An operation on an id that is not the actor's
must answer "not found" and change nothing at all; whatever the actor is shown (export, /why,
/memories, /history, stats, the prompts sent to the LLM) holds only the actor's ids and words.

Embedder: the fake Ollama embedding server, not None. Without an embedder every turn is
degraded and a degraded turn counts nothing, so the counters (times_candidate, times_served)
would never move and their isolation would go untested; with it, turns are scored, the indexer
(run before some turns) gives memories vectors, and the per-user vector cache is exercised too.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from bot.clients.databases import open_database
from bot.clients.db import SQLiteDatabase
from bot.clients.embeddings import OllamaEmbedder
from bot.engine import Engine, TurnResult
from bot.engine.rules import character_owner
from bot.memory.read.indexing import Indexer
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext, ReflectionReport
from bot.memory.write.reflection import CandidateIn, Reflection, ReplaceIn
from tests.builders import http_client, make_engine, msg
from tests.conftest import Clock
from tests.fakes.embedding_server import EmbeddingServer
from tests.fakes.llm_server import FakeLLMServer, LLMRequest
from tests.lanes import examples
from tests.reliability.test_sql_scoping import read_schema

T = TypeVar("T")

USERS = ("alice", "bob", "carol")
# Words only one user ever says or is told (their name among them): one of them in another
# user's results is a leak. None appears in the character file or the prompts.
WORDS = {
    "alice": ("alice", "jazz", "tango", "valse"),
    "bob": ("bob", "rugby", "escalade", "échecs"),
    "carol": ("carol", "opéra", "judo", "violoncelle"),
}
# Both channels are shared by the three users: one channel's story rows must stay per user.
STORIES = {"chan-1": "guild-1", "chan-2": "guild-2"}
NEVER_EXISTED = (0, 987_654_321)

# The raw rows of the four users (the three and the character), each led by its owner, every
# user table but memory_vectors: vectors are a derived index that the indexer, a system task,
# writes for every user; their ownership is checked instead. One read per table for all four.
SNAPSHOT_TABLES: dict[str, str] = {
    "memories": "SELECT user_id, * FROM memories WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "memory_history": "SELECT user_id, * FROM memory_history WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "exchanges": "SELECT user_id, * FROM exchanges WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "turns": "SELECT user_id, * FROM turns WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "turn_stats": "SELECT user_id, * FROM turn_stats WHERE user_id IN (?, ?, ?, ?)",
    "turn_log": "SELECT user_id, * FROM turn_log WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "user_settings": "SELECT user_id, * FROM user_settings WHERE user_id IN (?, ?, ?, ?)",
    "followups": "SELECT user_id, * FROM followups WHERE user_id IN (?, ?, ?, ?) ORDER BY memory_id",
    "checkin_settings": "SELECT user_id, * FROM checkin_settings WHERE user_id IN (?, ?, ?, ?)",
    "imports": "SELECT user_id, * FROM imports WHERE user_id IN (?, ?, ?, ?) ORDER BY story_id, source",
    "story_summaries": "SELECT user_id, * FROM story_summaries WHERE user_id IN (?, ?, ?, ?) ORDER BY story_id",
    "story_anchors": "SELECT user_id, * FROM story_anchors WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "story_positions": "SELECT user_id, * FROM story_positions WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "story_state": "SELECT user_id, * FROM story_state WHERE user_id IN (?, ?, ?, ?) ORDER BY story_id, name",
    "story_history": "SELECT user_id, * FROM story_history WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "exchange_replies": "SELECT user_id, * FROM exchange_replies WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "exchange_messages": "SELECT user_id, * FROM exchange_messages WHERE user_id IN (?, ?, ?, ?) ORDER BY exchange_id, n",
    "memory_sources": "SELECT user_id, * FROM memory_sources WHERE user_id IN (?, ?, ?, ?) ORDER BY memory_id, exchange_id",
    "memory_changes": "SELECT user_id, * FROM memory_changes WHERE user_id IN (?, ?, ?, ?) ORDER BY id",
    "consolidations": "SELECT user_id, * FROM consolidations WHERE user_id IN (?, ?, ?, ?) ORDER BY memory_id",
    "consolidation_members": (
        "SELECT user_id, * FROM consolidation_members WHERE user_id IN (?, ?, ?, ?) ORDER BY memory_id, member_id"
    ),
    # A person's turn epoch: only their own turn draws it, only their own erase ends it.
    "user_epochs": "SELECT user_id, * FROM user_epochs WHERE user_id IN (?, ?, ?, ?)",
}
# Bookkeeping of the memory cache, written only by triggers that follow a user's memories and
# vectors (the indexer's included, like memory_vectors): derived, not snapshotted.
CACHE_BOOKKEEPING = frozenset({"memory_versions", "memory_version_log"})
# The oracle's view across users, on purpose unscoped: who owns each id. A row that appears
# during a step must be the actor's, and a row never changes owner. (Only memories have
# AUTOINCREMENT ids: the other ids can be given again once an erase deleted the highest ones.)
OWNED_IDS: dict[str, str] = {
    "memories": "SELECT id, user_id FROM memories",
    "memory_history": "SELECT id, user_id FROM memory_history",
    "story_anchors": "SELECT id, user_id FROM story_anchors",
}
VECTOR_OWNERS = "SELECT memory_id, user_id FROM memory_vectors"
PENDING_ERRORS = (
    "SELECT id, last_error FROM exchanges WHERE user_id = ? AND (reflected_at IS NULL OR last_error IS NOT NULL)"
)

Snapshot = dict[str, Any]

actors = st.sampled_from(USERS)
stories = st.sampled_from(sorted(STORIES))
words = st.integers(min_value=1, max_value=3)  # index into WORDS[actor], past the name


def foreign_words(actor: str, *texts: str) -> set[str]:
    others = {w for user, ws in WORDS.items() if user != actor for w in ws}
    return {w for text in texts for w in re.findall(r"\w+", text.lower())} & others


class IsolationMachine(RuleBasedStateMachine):
    # The PostgreSQL cluster whose emptied test database each example starts from; None: a
    # fresh SQLite file.
    cluster: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="echo-isolation-"))
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.script = "{}"  # the reflection JSON the scripted LLM answers
        # Last known owner of every id ever seen, and the ids present at the last check.
        self.owners: dict[str, dict[int, str]] = {table: {} for table in OWNED_IDS}
        self.present: dict[str, set[int]] = {table: set() for table in OWNED_IDS}
        self.snapshots: dict[str, Snapshot] = {}
        self.closers: list[Callable[[], Awaitable[None]]] = []
        try:
            self.run(self._open())
        except BaseException:
            self.teardown()
            raise

    # --- set-up and teardown --------------------------------------------------------------

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run_until_complete(awaitable)

    async def _open(self) -> None:
        self.llm_server = FakeLLMServer()
        await self.llm_server.start()
        self.closers.append(self.llm_server.stop)
        self.llm_server.handler = self._answer
        self.embedding_server = EmbeddingServer()
        await self.embedding_server.start()
        self.closers.append(self.embedding_server.stop)
        self.http = http_client()
        self.closers.append(self.http.aclose)
        if self.cluster is not None:
            self.db = await open_database(await self.cluster.reset_database())
            self.raw: sqlite3.Connection | None = None
        else:
            self.db = await SQLiteDatabase.open(self.tmp / "echo.sqlite3")
            # The oracle reads SQLite without a thread hop per query: its ~80 reads after every
            # step were most of this test's time. Read-only, and each read sees the last commit.
            self.raw = sqlite3.connect(f"file:{self.tmp / 'echo.sqlite3'}?mode=ro", uri=True)
            self.closers.append(self._close_raw)
        self.closers.append(self.db.close)
        embedder = OllamaEmbedder(self.http, base_url=self.embedding_server.url, model="fake")
        self.engine: Engine = make_engine(
            self.db, self.http, self.llm_server, self.tmp, embedder=embedder, clock=self.clock
        )
        self.closers.append(self.engine.close)
        self.store = MemoryStore(self.db, clock=self.clock)
        self.indexer = Indexer(self.db, embedder)
        await self.engine.start()
        # Every user starts with memories in both places and one archived version, so that the
        # first draws already find ids of everyone.
        for word, story in ((1, "chan-1"), (2, "chan-2"), (3, "chan-1")):
            for user in USERS:
                text = f"L'utilisateur aime le {WORDS[user][word]}."
                await self.engine.memories.remember(user, text, story_id=story, place=STORIES[story])
        await self._check_owners(None, recording=True)
        for user in USERS:
            assert await self.engine.memories.forget(user, min(m.id for m in await self.store.list(user)))
        self.users = (*USERS, character_owner(self.engine.character.name))
        await self._check_owners(None, recording=True)
        self.snapshots = await self._snapshots()

    async def _close_raw(self) -> None:
        assert self.raw is not None
        self.raw.close()

    async def rows(self, sql: str, params: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
        """What the oracle reads: every row of `sql`, as tuples."""
        if self.raw is not None:
            return self.raw.execute(sql, params).fetchall()
        async with self.db.reader.execute(sql, params) as cur:
            return [tuple(row) for row in await cur.fetchall()]

    async def _close(self) -> None:
        for close in reversed(self.closers):
            await close()
        await self.loop.shutdown_asyncgens()

    def teardown(self) -> None:
        try:
            self.run(self._close())
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _answer(self, request: LLMRequest) -> str:
        return self.script if request.json_schema is not None else "D'accord."

    # --- the invariant ---------------------------------------------------------------------

    async def _snapshots(self) -> dict[str, Snapshot]:
        """Each user's export and raw rows."""
        snapshots: dict[str, Snapshot] = {}
        for user in self.users:
            export = await self.engine.privacy.export(user)
            del export["exported_at"]
            snapshots[user] = {"export": export} | {table: [] for table in SNAPSHOT_TABLES}
        for table, sql in SNAPSHOT_TABLES.items():
            for owner, *row in await self.rows(sql, self.users):
                snapshots[owner][table].append(tuple(row))
        return snapshots

    async def _check_owners(self, actor: str | None, *, recording: bool = False) -> None:
        """Rows that appeared since the last check are the actor's (none for a system task,
        actor None), and no row changed owner. `recording`: the set-up's rows, taken as they are."""
        for table, sql in OWNED_IDS.items():
            rows = dict(await self.rows(sql))
            known, present = self.owners[table], self.present[table]
            for row_id, user_id in rows.items():
                if row_id in present:
                    assert user_id == known[row_id], f"{table} #{row_id} moved from {known[row_id]} to {user_id}"
                    continue
                step = f"{actor}'s step" if actor else "a system step"
                assert recording or user_id == actor, f"{step} created {table} #{row_id} for {user_id}"
                if table == "memories" and row_id in known:
                    # AUTOINCREMENT: a memory id comes back only by restore, to its owner.
                    assert user_id == known[row_id], f"memory #{row_id} of {known[row_id]} came back as {user_id}'s"
                known[row_id] = user_id
            self.present[table] = set(rows)
        for memory_id, user_id in await self.rows(VECTOR_OWNERS):
            assert user_id == self.owners["memories"][memory_id], f"vector of #{memory_id} filed under {user_id}"

    def step(self, actor: str | None, action: Awaitable[T], *, changes_nothing: bool = False) -> T:
        """Run one operation of `actor` (None: a system task), then check that nobody else's
        data moved — nor the actor's, when the operation must change nothing."""
        self.clock.advance(minutes=1)  # any rewrite of a row now shows in its timestamps
        result = self.run(action)
        self.run(self._after_step(actor, changes_nothing))
        return result

    async def _after_step(self, actor: str | None, changes_nothing: bool) -> None:
        after = await self._snapshots()
        for user in self.users:
            if user == actor and not changes_nothing:
                continue
            for part, before in self.snapshots[user].items():
                assert after[user][part] == before, f"{actor}'s step changed {user}'s {part}"
        self.snapshots = after
        await self._check_owners(actor)

    # --- what the actor may see -------------------------------------------------------------

    def owned(self, table: str, actor: str) -> set[int]:
        """Ids last owned by the actor, deleted ones included."""
        return {i for i, user in self.owners[table].items() if user == actor}

    def live_memories(self, actor: str) -> set[int]:
        return {row[0] for row in self.snapshots[actor]["memories"]}

    def history_entries(self, actor: str) -> dict[int, int]:
        """history id -> memory id, of the actor's history as stored now."""
        return {row[0]: row[2] for row in self.snapshots[actor]["memory_history"]}

    def assert_only_own(self, actor: str, memory_ids: set[int], *texts: str) -> None:
        foreign_ids = memory_ids - self.owned("memories", actor)
        assert not foreign_ids, f"{actor} was shown {foreign_ids}"
        assert not foreign_words(actor, *texts), f"{actor} was shown {foreign_words(actor, *texts)}"

    def ids(self, table: str, actor: str) -> st.SearchStrategy[int]:
        """Half the time a live id of another user (the attack); otherwise a live id of the
        actor or of the character (its rules), an id whose row is gone (anyone's), or one that
        never existed."""
        present = self.present[table]
        owner = self.owners[table]
        others = {i for i in present if owner[i] in USERS and owner[i] != actor}
        groups = (present - others, set(owner) - present, set(NEVER_EXISTED))
        rest = st.one_of(*(st.sampled_from(sorted(g)) for g in groups if g))
        return st.one_of(st.sampled_from(sorted(others)), rest) if others else rest

    def draw_id(self, data: st.DataObject, table: str, actor: str, label: str) -> int:
        return data.draw(self.ids(table, actor), label=label)

    def draw_ids(self, data: st.DataObject, table: str, actor: str, label: str) -> list[int]:
        return data.draw(st.lists(self.ids(table, actor), max_size=2, unique=True), label=label)

    # --- the operations ---------------------------------------------------------------------

    @rule(actor=actors, story=stories, word=words)
    def add(self, actor: str, story: str, word: int) -> None:
        text = f"L'utilisateur aime le {WORDS[actor][word]}."
        memory_id = self.step(actor, self.engine.memories.remember(actor, text, story_id=story, place=STORIES[story]))
        assert self.owners["memories"].get(memory_id) == actor

    @rule(actor=actors, pinned=st.booleans(), data=st.data())
    def pin(self, actor: str, pinned: bool, data: st.DataObject) -> None:
        memory_id = self.draw_id(data, "memories", actor, "memory id")
        mine = memory_id in self.live_memories(actor)
        done = self.step(actor, self.engine.memories.pin(actor, memory_id, pinned), changes_nothing=not mine)
        assert done is mine, f"{actor} pinning #{memory_id} answered {done}"

    @rule(actor=actors, data=st.data())
    def forget(self, actor: str, data: st.DataObject) -> None:
        memory_id = self.draw_id(data, "memories", actor, "memory id")
        mine = memory_id in self.live_memories(actor)
        done = self.step(actor, self.engine.memories.forget(actor, memory_id), changes_nothing=not mine)
        assert done is mine, f"{actor} forgetting #{memory_id} answered {done}"

    @rule(actor=actors, word=words, data=st.data())
    def edit(self, actor: str, word: int, data: st.DataObject) -> None:
        memory_id = self.draw_id(data, "memories", actor, "memory id")
        mine = memory_id in self.live_memories(actor)
        text = f"L'utilisateur aime beaucoup le {WORDS[actor][word]}."
        history_id = self.step(actor, self.engine.memories.edit(actor, memory_id, text), changes_nothing=not mine)
        assert (history_id is not None) is mine, f"{actor} editing #{memory_id} answered {history_id}"

    @rule(data=st.data())
    def delete_message(self, data: st.DataObject) -> None:
        """A message deleted on Discord: the event names no author, only the message."""
        messages = sorted(
            (row[5], user) for user in self.users for row in self.snapshots[user]["exchanges"] if row[5] is not None
        )
        if not messages:
            return
        message_id, owner = data.draw(st.sampled_from(messages), label="deleted message")
        outcome = self.step(owner, self.engine.conversation.message_deleted(message_id))
        assert outcome.user_id == owner
        assert not set(outcome.archived) - self.owned("memories", owner)

    @rule(actor=actors, data=st.data())
    def restore(self, actor: str, data: st.DataObject) -> None:
        history_id = self.draw_id(data, "memory_history", actor, "history id")
        mine = self.history_entries(actor)
        restored = self.step(
            actor, self.engine.memories.restore(actor, history_id), changes_nothing=history_id not in mine
        )
        assert restored == mine.get(history_id), f"{actor} restoring history #{history_id} answered {restored}"

    @rule(actor=actors, story=stories, word=words, candidate=st.booleans(), data=st.data())
    def reflect_directly(self, actor: str, story: str, word: int, candidate: bool, data: st.DataObject) -> None:
        """The write path with every id allowed: only the user_id scoping can refuse."""
        deletes = self.draw_ids(data, "memories", actor, "delete ids")
        replaces = self.draw_ids(data, "memories", actor, "replace ids")
        thing = WORDS[actor][word]
        reflection = Reflection(
            delete=deletes,
            replace=[ReplaceIn(id=i, text=self.correction(actor, i, thing)) for i in replaces],
            memories=[CandidateIn(text=f"L'utilisateur aime le {thing}.", type="preference", confidence=0.95)]
            if candidate
            else [],
        )
        ctx = ReflectionContext(
            user_id=actor,
            allowed_ids=frozenset(self.owners["memories"]) | frozenset(NEVER_EXISTED),
            character_name=self.engine.character.name,
            user_message=f"Maintenant j'adore le {thing}.",
            user_name=actor.title(),
            story_id=story,
            place=STORIES[story],
            source="isolation",
        )
        mine = self.live_memories(actor)
        report = self.step(actor, apply_reflection(self.db, reflection, ctx, clock=self.clock))
        self.assert_refused(report, [i for i in deletes if i not in mine], "delete", "no such memory")
        self.assert_refused(report, [i for i in replaces if i not in mine], "replace", "no such memory")

    def correction(self, actor: str, memory_id: int, thing: str) -> str:
        """A correction of the memory it names when that is the actor's (so that the write path
        really rewrites it), else a sentence about the actor's own `thing`."""
        text = next((row[2] for row in self.snapshots[actor]["memories"] if row[0] == memory_id), "")
        named = [w for w in WORDS[actor][1:] if w in text]
        return f"L'utilisateur adore le {named[0] if named else thing}."

    @staticmethod
    def assert_refused(report: ReflectionReport, ids: list[int], operation: str, detail: str) -> None:
        """Each id got one decision of this operation: refused, for `detail`."""
        for memory_id in ids:
            decisions = [
                (d.action, d.detail)
                for d in report.decisions
                if d.memory_id == memory_id and d.action.startswith(operation)
            ]
            assert decisions == [(f"{operation}_refused", detail)], f"{operation} #{memory_id}: {decisions}"

    async def _turn(self, actor: str, story: str, text: str, *, reflect: bool) -> TurnResult:
        if not reflect:
            # The turn schedules its own reflection: a plain turn's is scripted to keep nothing.
            self.script = json.dumps({"memories": []})
        result = await self.engine.conversation.turn(msg(text, user=actor, story=story, place=STORIES[story]))
        await self.engine.conversation.wait_recorded(actor)
        if reflect:
            self.engine.operator.schedule_reflection(actor)
        await self.engine.operator.wait_reflections(actor)
        return result

    def checked_turn(self, actor: str, story: str, text: str, *, reflect: bool) -> TurnResult:
        asked = len(self.llm_server.chats)
        result = self.step(actor, self._turn(actor, story, text, reflect=reflect))
        assert result.reply == "D'accord."
        served = result.selection.memories
        self.assert_only_own(actor, {m.id for m in served}, *(m.text for m in served))
        # Every prompt of the step (the reply's context, the reflection's known memories).
        for request in self.llm_server.chats[asked:]:
            self.assert_only_own(actor, set(), *(str(m.get("content", "")) for m in request.messages))
        self.why(actor, story)
        return result

    @rule(actor=actors, story=stories, word=words, indexed=st.booleans())
    def turn(self, actor: str, story: str, word: int, indexed: bool) -> None:
        if indexed:
            # The background indexer, a system task: it gives every user's memories vectors
            # (so the turn is scored by cosine) and changes nobody's data.
            self.step(None, self.indexer.run_once(), changes_nothing=True)
        self.checked_turn(actor, story, f"Je te parle de {WORDS[actor][word]}.", reflect=False)

    @rule(actor=actors, story=stories, word=words, data=st.data())
    def turn_and_reflect(self, actor: str, story: str, word: int, data: st.DataObject) -> None:
        """A full engine reflection whose scripted answer aims at drawn ids of anyone."""
        deletes = self.draw_ids(data, "memories", actor, "delete ids")
        replaces = self.draw_ids(data, "memories", actor, "replace ids")
        anchors = self.draw_ids(data, "story_anchors", actor, "anchor ids to remove")
        name, thing = WORDS[actor][0].title(), WORDS[actor][word]
        self.script = json.dumps(
            {
                "memories": [{"text": f"L'utilisateur aime le {thing}.", "type": "preference", "confidence": 0.95}],
                "replace": [{"id": i, "text": self.correction(actor, i, thing)} for i in replaces],
                "delete": deletes,
                "summary": f"{name} parle de {thing}.",
                "anchors": {
                    "add": [f"{name} aime le {thing}"],
                    "remove": [{"id": i, "reason": "ce n'est plus vrai"} for i in anchors],
                },
                # One subject for everyone: positions are keyed by (user, story, subject).
                "positions": [{"subject": "la musique", "stance": f"Le {thing} de {name}", "justification": thing}],
                "state": {"mood": 1, "trust": -1},
            },
            ensure_ascii=False,
        )
        mine = self.live_memories(actor)
        self.checked_turn(actor, story, f"J'aime le {thing} maintenant.", reflect=True)
        errors = self.run(self._pending_errors(actor))
        assert not errors, f"{actor}'s reflection did not apply: {errors}"
        report = self.engine.operator.last_reflection(actor)
        self.assert_refused(report, [i for i in deletes if i not in mine], "delete", "id not shown to the model")
        self.assert_refused(report, [i for i in replaces if i not in mine], "replace", "id not shown to the model")

    async def _pending_errors(self, actor: str) -> list[tuple[Any, ...]]:
        return await self.rows(PENDING_ERRORS, (actor,))

    @rule(actor=actors, story=stories)
    def why(self, actor: str, story: str) -> None:
        turns = [row[0] for row in self.snapshots[actor]["turns"] if row[2] == story]
        selection = self.step(actor, self.engine.memories.why(actor, story), changes_nothing=True)
        if not turns:
            assert selection is None
            return
        assert selection is not None and selection.turn_id == max(turns)
        slots = selection.slots
        self.assert_only_own(actor, {s.id for s in slots}, selection.query, *(s.text for s in slots))

    @rule(actor=actors)
    def read_commands(self, actor: str) -> None:
        """/export, /memories, /history and /memory-stats."""

        async def read() -> tuple[Any, ...]:
            return (
                await self.engine.privacy.export(actor),
                await self.store.list(actor),
                await self.store.history(actor, limit=1000),
                await self.engine.memories.stats(actor),
            )

        data, memories, history, stats = self.step(actor, read(), changes_nothing=True)
        assert data["user_id"] == actor
        assert {m["id"] for m in data["memories"]} == self.live_memories(actor), "export: memories"
        assert {h["history_id"] for h in data["history"]} == set(self.history_entries(actor)), "export: history"
        assert {m.id for m in memories} == self.live_memories(actor), "/memories"
        assert {h.id for h in history} == set(self.history_entries(actor)), "/history"
        assert stats.total == len(self.live_memories(actor)), "stats: total"
        counted = [(row[1], row[2]) for row in self.snapshots[actor]["turn_stats"]] or [(0, 0)]
        assert [(stats.turns, stats.degraded_turns)] == counted, "stats: turns"
        self.assert_only_own(
            actor,
            {m.id for m in memories} | {h.memory_id for h in history} | {m.id for m in stats.never_surfaced},
            json.dumps(data, ensure_ascii=False),
            *(m.text for m in memories),
            *(h.text for h in history),
        )

    @rule(actor=actors, share=st.booleans())
    def set_sharing(self, actor: str, share: bool) -> None:
        self.step(actor, self.engine.privacy.set_sharing(actor, share))
        assert self.snapshots[actor]["user_settings"] == [(actor, int(share))]

    @rule(actor=actors)
    def erase(self, actor: str) -> None:
        self.step(actor, self.engine.privacy.erase(actor))
        left = {table: rows for table, rows in self.snapshots[actor].items() if table != "export" and rows}
        assert not left, f"{actor}'s erase left {left}"


@pytest.mark.both_stores
def test_no_operation_of_one_user_changes_or_reveals_anothers_data(
    store_kind: str, request: pytest.FixtureRequest
) -> None:
    machine: type[IsolationMachine] = IsolationMachine
    if store_kind == "postgresql":
        cluster = request.getfixturevalue("postgres_cluster")
        machine = type("PostgresIsolationMachine", (IsolationMachine,), {"cluster": cluster})
    run_state_machine_as_test(
        machine,
        settings=settings(
            # Fewer runs on PostgreSQL keep the suite's time in check: the store is the variable
            # there, the operations' coverage is the SQLite run's.
            max_examples=examples(30 if store_kind == "sqlite" else 12),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


async def test_the_snapshot_reads_every_user_table_but_the_vectors(db) -> None:
    schema = await read_schema(db)
    assert set(SNAPSHOT_TABLES) == schema.user_tables - {"memory_vectors"} - CACHE_BOOKKEEPING
