"""A bot process that plays given turns, then, if asked, stays until nothing is left to reflect
(run by test_erase_processes.py and test_reflection_processes.py).

`python -m tests.reliability.turns_driver SPEC`, configured like the bot by its environment;
SPEC is JSON: {"turns": [[user, text], ...], "swipes": bool, "drain": bool}. It builds the
bot's services with the composition root (`open_services`, as `python -m bot` does) and plays
each user's turns in order, the users at once, as the terminal chat and the Discord cog do
(a turn schedules its reflection; with swipes the reply stays open, as on Discord). It prints
one `answered <user>: <shown text>` line per turn. With drain, it then runs the pending sweep
until no answered exchange of the database is left unreflected, whichever process answered it
(the bot's own sweep runs every few minutes). Nothing here is product code.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict

from bot.app import open_services
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.memory.stores.exchanges import users_pending_reflection
from bot.presenting import turn_text
from bot.terminal.chat import session_for

SWEEP_SECONDS = 0.2


async def talk(engine: Engine, user: str, texts: list[str], swipes: bool) -> None:
    session = session_for(user, "main")
    for text in texts:
        result = await engine.conversation.turn(
            Incoming(session.user_id, user, text, session.story_id, session.place, swipes=swipes)
        )
        shown = turn_text(result).replace("\n", " ")
        print(f"answered {user}: {shown}", flush=True)


async def main(spec: dict) -> None:
    turns: dict[str, list[str]] = defaultdict(list)
    for user, text in spec["turns"]:
        turns[user].append(text)
    async with open_services(load_settings()) as services:
        engine = services.engine
        await asyncio.gather(*(talk(engine, user, texts, spec.get("swipes", False)) for user, texts in turns.items()))
        while spec.get("drain") and (users := await users_pending_reflection(services.db)):
            await engine.operator.resume_pending_reflections()
            for user_id in users:
                await engine.operator.wait_reflections(user_id)
            await asyncio.sleep(SWEEP_SECONDS)
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
