"""A process that dies by SIGKILL inside a reflection's write transaction (run by test_crash.py).

`python -m tests.reliability.crash_driver USER MESSAGE`, configured like the bot by its
environment. It answers one message as the terminal chat does, then reflects it; the reflection
writes everything and marks its exchange, and the process is killed just before COMMIT. Nothing
here is product code: the kill is the one thing a test cannot get from outside at that instant.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite

import bot.engine.reflection_worker
from bot.app import open_services
from bot.config import load_settings
from bot.engine import Incoming
from bot.terminal.chat import session_for

_apply_reflection = bot.engine.reflection_worker.apply_reflection


async def _apply_then_die(
    *args: Any, finalize: Callable[[aiosqlite.Connection], Awaitable[None]], **kwargs: Any
) -> Any:
    async def finalize_then_die(conn: aiosqlite.Connection) -> None:
        await finalize(conn)
        print("in-transaction", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    return await _apply_reflection(*args, finalize=finalize_then_die, **kwargs)


async def main(user: str, message: str) -> None:
    session = session_for(user, "main")
    async with open_services(load_settings()) as services:
        bot.engine.reflection_worker.apply_reflection = _apply_then_die  # type: ignore[assignment]
        result = await services.engine.conversation.turn(
            Incoming(session.user_id, user, message, session.story_id, session.place)
        )
        print(f"reply: {result.reply}", flush=True)
        services.engine.operator.schedule_reflection(session.user_id)
        await services.engine.operator.wait_reflections(session.user_id)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    sys.exit("the reflection finished without being killed")
