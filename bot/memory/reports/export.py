"""Everything stored about one user, as plain JSON-able data (/export, the owner's erase check).

Each store reads its own tables; this module only lays their rows out in the export's format.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TypedDict

from bot.clients.storage import Database, to_db
from bot.memory.model import HistoryEntry, Memory, OwnerKey
from bot.memory.stores import settings as settings_store
from bot.memory.stores.consolidations import Consolidation, consolidations
from bot.memory.stores.exchanges import export_exchanges
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.stores.provenance import memory_sources
from bot.memory.stores.reports import TurnLogEntry, export_turns, user_turn_log
from bot.memory.stores.stories import StoryHistoryEntry, load_story, story_history, user_story_ids

# Everything, however long the user's history.
_ALL = 100_000


def _memory(m: Memory, sources: dict[int, list[int]]) -> dict[str, Any]:
    return {
        "id": m.id,
        "text": m.text,
        "type": m.type,
        "scope": m.scope,
        "story_id": m.story_id,
        "place": m.place,
        "confidence": m.confidence,
        "pinned": m.pinned,
        "created_at": to_db(m.created_at),
        "updated_at": to_db(m.updated_at),
        "expires_at": to_db(m.expires_at),
        "source": m.source,
        "times_candidate": m.times_candidate,
        "times_served": m.times_served,
        "times_semantic": m.times_semantic,
        "from_exchanges": sources.get(m.id, []),
    }


def _consolidation(c: Consolidation, sources: dict[int, list[int]]) -> dict[str, Any]:
    """A consolidation with each member's own provenance: which exchanges said what."""
    return {
        "memory_id": c.memory_id,
        "at": to_db(c.at),
        "text": c.text,
        # None while it stands; "restore" when the user undid it; "source" when a message that
        # alone supported a member was deleted or edited, which undid it.
        "undone": c.undone_by if c.undone else None,
        "members": [{"id": m, "text": t, "from_exchanges": sources.get(m, [])} for m, t in c.members],
    }


def _history(h: HistoryEntry) -> dict[str, Any]:
    return {
        "history_id": h.id,
        "memory_id": h.memory_id,
        "operation": h.operation,
        "archived_at": to_db(h.archived_at),
        "cause": h.cause.stored(),
        "text": h.text,
        "type": h.type,
        "restored": h.restored,
    }


def _story_history(s: StoryHistoryEntry) -> dict[str, Any]:
    return {
        "story_id": s.story_id,
        "operation": s.operation,
        "payload": s.payload,
        "reason": s.reason,
        "cause": s.cause.stored(),
        "at": to_db(s.at),
    }


def _turn_log(e: TurnLogEntry) -> dict[str, Any]:
    return {
        "story_id": e.story_id,
        "outcome": e.outcome,
        "memory_ms": e.memory_ms,
        "reply_ms": e.reply_ms,
        "prompt_tokens": e.prompt_tokens,
        "completion_tokens": e.completion_tokens,
        "context_tokens": e.context_tokens,
        "context_full": e.context_full,
        "at": to_db(e.created_at),
    }


async def _stories(db: Database, user_id: OwnerKey) -> list[dict[str, Any]]:
    stories = []
    for story_id in await user_story_ids(db, user_id):
        story = await load_story(db, user_id, story_id)
        stories.append(
            {
                "story_id": story_id,
                "summary": story.summary,
                "anchors": [{"id": a.id, "text": a.text, "created_at": to_db(a.created_at)} for a in story.anchors],
                "positions": [
                    {
                        "id": p.id,
                        "subject": p.subject,
                        "stance": p.stance,
                        "justification": p.justification,
                        "updated_at": to_db(p.updated_at),
                    }
                    for p in story.positions
                ],
                "state": story.state,
            }
        )
    return stories


class ExportedSettings(TypedDict):
    share_memories: bool


class UserExport(TypedDict):
    """Everything stored under one owner key (`/export`'s file), as plain JSON-able data."""

    user_id: OwnerKey
    exported_at: str
    settings: ExportedSettings
    stories: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    turn_log: list[dict[str, Any]]
    memories: list[dict[str, Any]]
    history: list[dict[str, Any]]
    consolidations: list[dict[str, Any]]
    story_history: list[dict[str, Any]]
    exchanges: list[dict[str, Any]]


class PersonExport(UserExport):
    """A person's export: their own key's, with what each character of its own memory keeps,
    filed by the stored key (`<id>@<key>`)."""

    characters: dict[OwnerKey, UserExport]


async def export_user(db: Database, store: MemoryStore, user_id: OwnerKey, *, now: datetime) -> UserExport:
    sources = await memory_sources(db, user_id)
    history = await store.history(user_id, limit=_ALL)
    story = await story_history(db, user_id, None, limit=_ALL)
    exchanges = await export_exchanges(db, user_id)
    stories = await _stories(db, user_id)
    turns = await export_turns(db, user_id)
    figures = await user_turn_log(db, user_id, datetime.min.replace(tzinfo=UTC), limit=-1)
    return {
        "user_id": user_id,
        "exported_at": to_db(now),
        "settings": {"share_memories": await settings_store.sharing(db, user_id)},
        "stories": stories,
        "turns": turns,
        "turn_log": [_turn_log(e) for e in figures],
        "memories": [_memory(m, sources) for m in await store.list(user_id)],
        "history": [_history(h) for h in history],
        "consolidations": [_consolidation(c, sources) for c in await consolidations(db.reader, user_id)],
        "story_history": [_story_history(s) for s in story],
        "exchanges": exchanges,
    }


def export_json(data: UserExport) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2)
