"""What the parts of the engine share: its clients, its stores and its settings.

The engine (bot/engine.py) builds one and hands it to each of its parts (the turn, the open
exchanges, the reflection worker), so no part reaches another's data but through its methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from bot.cast import Cast
from bot.clients.metrics import Metrics
from bot.clients.storage import Database
from bot.clients.tasks import BackgroundTasks
from bot.config import EngineSettings
from bot.events import Events
from bot.llm_calls import ModelCalls
from bot.memory.cache import MemoryCache
from bot.memory.recall import Recall
from bot.memory.store import MemoryStore
from bot.memory.story_state import StateSpec, parse_state_specs


@dataclass(slots=True)
class EngineContext:
    db: Database
    settings: EngineSettings
    cast: Cast
    clock: Callable[[], datetime]
    metrics: Metrics
    store: MemoryStore
    cache: MemoryCache
    recall: Recall
    tasks: BackgroundTasks
    calls: ModelCalls
    events: Events
    # Who else spoke lately in each channel: the reflection is told those people are not the
    # author (kept in memory only: after a restart the guard starts empty).
    scene: dict[str, set[str]] = field(default_factory=dict)
    _specs: dict[str, dict[str, StateSpec]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._specs = {key: parse_state_specs(c.state) for key, c in self.cast.characters.items()}

    def specs(self, character_key: str) -> dict[str, StateSpec]:
        """The story state a character keeps (its file's `state`)."""
        specs = self._specs.get(character_key)
        return specs if specs is not None else self._specs[self.cast.default_key]
