"""What a bench reaches behind the engine's ports.

A bench measures the engine's parts — the database and model calls a turn makes, its recall's
conversation window, its reflections, its cache — which no front end or test may reach. This
module is the one place that does, so that a change of the engine's insides breaks the benches
here, named.
"""

from __future__ import annotations

from bot.engine import Engine
from bot.engine.consolidation_worker import Consolidations
from bot.engine.context import EngineContext
from bot.engine.importing import Imports
from bot.engine.reflection_worker import Reflections
from bot.engine.turn import Turns


def context(engine: Engine) -> EngineContext:
    """The clients, stores, cache and recall the engine's parts share."""
    return engine._ctx


def reflections(engine: Engine) -> Reflections:
    return engine._reflections


def consolidations(engine: Engine) -> Consolidations:
    return engine.operator._consolidations


def turns(engine: Engine) -> Turns:
    """The turns: their prompts (bot/engine/reply_prompt.py) and the story block each reads."""
    return engine._turns


def imports(engine: Engine) -> Imports:
    """The import part (its gate on live turns is what bench/import_load.py takes away)."""
    return engine.operator._imports
