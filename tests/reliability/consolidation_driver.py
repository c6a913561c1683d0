"""A process that consolidates a series and can die by SIGKILL inside the consolidation's write
transaction (run by test_crash.py).

`python -m tests.reliability.consolidation_driver USER seed|kill|run`, configured like the bot by
its environment. `seed`: one turn (the user is a recent speaker) and a series of visits; `kill`:
one run of the consolidation job, killed once every row is written, just before COMMIT; `run`:
one run, to the end, its figures printed. Nothing here is product code.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import aiosqlite

import bot.engine.consolidation_worker
from bot.app import open_services
from bot.config import load_settings
from bot.engine import Incoming
from bot.memory.model import NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.terminal.chat import session_for

YEARS = (2014, 2015, 2016, 2018, 2019)
_copy_sources = bot.engine.consolidation_worker.copy_sources


async def _copy_then_die(conn: aiosqlite.Connection, *args: Any, **kwargs: Any) -> None:
    await _copy_sources(conn, *args, **kwargs)
    print("in-transaction", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


async def main(user: str, mode: str) -> None:
    session = session_for(user, "main")
    async with open_services(load_settings()) as services:
        engine = services.engine
        if mode == "seed":
            await engine.conversation.turn(
                Incoming(session.user_id, user, "Bonjour !", session.story_id, session.place)
            )
            await engine.operator.wait_reflections(session.user_id)
            for year in YEARS:
                await MemoryStore(services.db).add(
                    session.user_id, NewMemory(text=f"L'utilisateur a visité Trieste en {year}.")
                )
            print("seeded", flush=True)
            return
        if mode == "kill":
            bot.engine.consolidation_worker.copy_sources = _copy_then_die  # type: ignore[assignment]
        figures = await engine.operator.consolidate()
        print(f"consolidated {figures.consolidated} found {figures.series_found} calls {figures.llm_calls}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
    if sys.argv[2] == "kill":
        sys.exit("the consolidation finished without being killed")
