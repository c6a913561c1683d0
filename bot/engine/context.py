"""What the parts of the engine share: its clients, its stores and its settings.

The engine (bot/engine/facade.py) builds one and hands it to each of its parts (the turn, the open
exchanges, the reflection worker), so no part reaches another's data but through its methods.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from bot.characters.cast import Cast
from bot.clients.metrics import Metrics
from bot.clients.offload import Offload
from bot.clients.storage import Database
from bot.clients.tasks import BackgroundTasks
from bot.config import EngineSettings
from bot.engine.events import Events
from bot.engine.llm_calls import ModelCalls
from bot.engine.prompt_logs import PromptLogs
from bot.memory.cache.memory_cache import MemoryCache
from bot.memory.consolidation.scan import SeriesScan
from bot.memory.model import StoryId
from bot.memory.read.recall import Recall
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.story.state import StateSpec, parse_state_specs
from bot.memory.write.index import WriteIndexes

# The reflection's task takes about 750 tokens of the reply's head when the reflection continues
# the reply; a full prompt is then about 3,200 (24 slots, 12 lines; SmolLM2's tokens), which a
# 4,096-token context holds with room to answer. A smaller context keeps those tokens for the
# conversation and the memories: the reflection then starts with its own instructions.
CONTINUE_MIN_CONTEXT = 4096
# Channels whose recent speakers are kept; the least recently active go first. Enough for every
# channel active in a long while; a channel forgotten only loses a guard it rebuilds on its next
# turn.
SCENE_STORIES = 10_000


class Scenes:
    """Who else spoke lately in each channel: the turn notes them, the reflection is told those
    people are not the author. In memory only (after a restart the guard starts empty), bounded
    to the SCENE_STORIES most recently noted channels."""

    def __init__(self, max_stories: int = SCENE_STORIES) -> None:
        self.max_stories = max_stories
        self._others: OrderedDict[str, frozenset[str]] = OrderedDict()

    def note(self, story_id: StoryId, others: Iterable[str]) -> None:
        self._others[story_id] = frozenset(others)
        self._others.move_to_end(story_id)
        while len(self._others) > self.max_stories:
            self._others.popitem(last=False)

    def others(self, story_id: StoryId, besides: str) -> list[str]:
        """The people noted in the channel, but `besides`, in order."""
        return sorted(self._others.get(story_id, frozenset()) - {besides})

    def __len__(self) -> int:
        return len(self._others)


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
    scenes: Scenes = field(default_factory=Scenes)
    # What each conversation's last reply prompt held: the next one extends it.
    prompts: PromptLogs = field(default_factory=PromptLogs)
    # Where the pure work that grows with a person's memories runs: a worker process.
    offload: Offload = field(default_factory=Offload)
    # What the write path compares new text with, and each memory's series key, following the
    # cache's entries.
    write_indexes: WriteIndexes = field(init=False)
    series_scan: SeriesScan = field(init=False)
    _specs: dict[str, dict[str, StateSpec]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.write_indexes = WriteIndexes(self.cache, self.offload)
        self.series_scan = SeriesScan(self.cache, self.offload)
        self.cache.follow(self.prompts)
        self._specs = {key: parse_state_specs(c.state) for key, c in self.cast.characters.items()}

    def reflection_continues(self) -> bool:
        """Whether the reflection continues the reply's conversation (bot/engine/reflection_worker.py):
        on a server that takes one request at a time, so keeps one prompt, only with the reply's
        model, and with a context that holds the reflection's task in the reply's head beside the
        conversation (CONTINUE_MIN_CONTEXT)."""
        settings, context = self.settings, self.calls.context_tokens()
        return (
            self.calls.budget.capacity == 1
            and settings.reflection_model == settings.llm_model
            and (context is None or context >= CONTINUE_MIN_CONTEXT)
        )

    def specs(self, character_key: str) -> dict[str, StateSpec]:
        """The story state a character keeps (its file's `state`)."""
        specs = self._specs.get(character_key)
        return specs if specs is not None else self._specs[self.cast.default_key]
