"""The layouts bench/prompt_cache.py measures beside the bot's with `--alternatives`: each a patch
of one engine (and of module constants for its run, undone by `undo`), so that every figure of
docs/design.md ("The model's share of a turn") is printed by one run.

- the issue's sketch: the bot's reply layout, the reflection as before (own start, the 12
  closest memories in recall's order), for both servers;
- the reflection continuing the reply with its instructions in its own request, not in the
  reply's head (one slot);
- the reflection's known memories: the 12 closest whatever their number (two slots);
- the window stepping back to a third, or two thirds, of its bound instead of a half;
- the notes bounded at 96 memories instead of 192.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import insides
import prompt_today

import bot.engine.prompting as prompting
import bot.engine.reflection_worker as reflection_worker
import bot.engine.reply_prompt as reply_prompt
from bot.engine import Engine
from bot.memory.write.reflection_prompt import memory_task

_SAVED: dict[tuple[Any, str], Any] = {}


def _set(module: Any, name: str, value: Any) -> None:
    _SAVED.setdefault((module, name), getattr(module, name))
    setattr(module, name, value)


def undo() -> None:
    for (module, name), value in _SAVED.items():
        setattr(module, name, value)
    _SAVED.clear()


def sketch(engine: Engine) -> None:
    insides.reflections(engine)._conversation = lambda batch: []  # type: ignore[method-assign]
    _set(reflection_worker, "build_reflection_messages", prompt_today.build_reflection_messages)
    _set(reflection_worker, "REFLECTION_EVERY", 0)
    _set(reply_prompt, "MEMORY_TASK_INTRO", "")
    _set(reply_prompt, "memory_task", lambda **kwargs: "")


def task_in_the_request(engine: Engine) -> None:
    builder = reflection_worker.build_reflection_messages

    def build(**kwargs: Any) -> list[dict[str, Any]]:
        messages = builder(**kwargs)
        if kwargs.get("conversation"):
            task = memory_task(
                character=kwargs["character"], user=kwargs["user"], story=True, state_keys=kwargs["state_keys"]
            )
            messages[-1] = {"role": "user", "content": f"{task}\n{kwargs['state_guide']}\n\n{messages[-1]['content']}"}
        return messages

    _set(reflection_worker, "build_reflection_messages", build)
    _set(reply_prompt, "MEMORY_TASK_INTRO", "")
    _set(reply_prompt, "memory_task", lambda **kwargs: "")


def closest_known(engine: Engine) -> None:
    _set(reflection_worker, "REFLECTION_EVERY", 0)


def step_keep(fraction: float) -> Callable[[Engine], None]:
    def patch(engine: Engine) -> None:
        _set(prompting, "STEP_KEEP", fraction)

    return patch


def max_noted(bound: int) -> Callable[[Engine], None]:
    def patch(engine: Engine) -> None:
        _set(reply_prompt, "MAX_NOTED", bound)

    return patch


# (label, LLM_CONCURRENCY, patch)
ALTERNATIVES: tuple[tuple[str, int, Callable[[Engine], None]], ...] = (
    ("the issue's sketch", 1, sketch),
    ("task in the request, c. 1", 1, task_in_the_request),
    ("12 closest known, c. 2", 2, closest_known),
    ("window keeps a third, c. 2", 2, step_keep(1 / 3)),
    ("window keeps 2/3, c. 2", 2, step_keep(2 / 3)),
    ("notes up to 96, c. 2", 2, max_noted(96)),
)
