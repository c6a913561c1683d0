"""Each character's rules, as the turn puts them in its context.

A character file's rules are stored as `rule` memories of the character itself, rewritten only
when the file's rules changed, so a character keeps its rule ids (and their vectors).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from bot.characters.cast import Cast
from bot.clients.storage import Database
from bot.memory.model import Memory, OwnerKey
from bot.memory.stores.memories import replace_rules
from bot.memory.stores.memory_store import MemoryStore


class CharacterRules:
    def __init__(self, db: Database, cast: Cast, store: MemoryStore, clock: Callable[[], datetime]) -> None:
        self._db = db
        self._cast = cast
        self._store = store
        self._clock = clock
        self._rules: dict[str, list[Memory]] = {}

    async def sync(self) -> None:
        """Every character file's rules stored, each character's read back (at start-up)."""
        for key, character in self._cast.characters.items():
            owner = character_owner(character.name)
            stored = await self._stored(owner)
            if [m.text for m in stored] != list(character.rules):
                async with self._db.write() as conn:
                    await replace_rules(conn, owner, character.rules, now=self._clock())
                stored = await self._stored(owner)
            self._rules[key] = stored

    def of(self, character: str | None) -> list[Memory]:
        """The rules of the character a message is addressed to (the default one when None)."""
        return self._rules.get(self._cast.get(character).key, [])

    async def _stored(self, owner: OwnerKey) -> list[Memory]:
        return sorted(await self._store.list(owner, types=["rule"], include_rules=True), key=lambda m: m.id)


def character_owner(name: str) -> OwnerKey:
    """The owner key under which a character's own rules are stored."""
    return OwnerKey(f"character:{name}")
