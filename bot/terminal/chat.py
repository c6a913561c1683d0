"""Terminal chat: the same engine as the Discord bot, no Discord needed.

`python -m bot chat --user NAME [--channel NAME]`. Lines starting with `/` run the memory
commands. When standard input is not a terminal, each turn waits for its reflection before the
next line is read, so a piped script is deterministic.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from bot.characters.character import fill_turn
from bot.characters.macros import TurnValues
from bot.engine import Engine, Incoming
from bot.engine.prompting import ChannelLine
from bot.i18n import DEFAULT_LANGUAGE, set_locale, text
from bot.memory.model import OwnerKey, StoryId
from bot.memory.text import storable
from bot.presenting import cut_note, turn_text
from bot.terminal.commands import Session, run_command

TERMINAL_PLACE = "terminal"


def session_for(user: str, channel: str) -> Session:
    # Names from the command line become ids: made storable like any text that enters.
    user, channel = storable(user), storable(channel)
    return Session(
        user_id=OwnerKey(f"terminal:{user}"),
        user_name=user,
        story_id=StoryId(f"terminal:{channel}"),
        place=TERMINAL_PLACE,
    )


def _in_daemon_thread(read: Callable[[], str]) -> asyncio.Future[str]:
    """Run a blocking read in a daemon thread. Not asyncio.to_thread: the default executor is
    joined at exit, so a read blocked on the terminal would keep Ctrl-C or SIGTERM from
    ending the program."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def settle(result: str | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result or "")

    def run() -> None:
        try:
            result = read()
        except BaseException as exc:  # EOFError included: handed to the awaiting coroutine
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="chat-stdin", daemon=True).start()
    return future


async def _read_line(stream: TextIO, interactive: bool, prompt: str) -> str | None:
    if interactive:
        try:
            return await _in_daemon_thread(lambda: input(prompt))
        except EOFError:
            return None
    line = await _in_daemon_thread(stream.readline)
    return line.rstrip("\n") if line else None


async def run_chat(
    engine: Engine,
    *,
    user: str,
    channel: str = "main",
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    interactive: bool | None = None,
    stream_replies: bool = True,
    language: str = DEFAULT_LANGUAGE,
) -> None:
    # Every text the chat shows, commands' answers included, in this language.
    set_locale(language)
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    if interactive is None:
        interactive = stdin.isatty()
    session = session_for(user, channel)
    history: list[ChannelLine] = []
    name = engine.character.name

    def say(shown: str) -> None:
        stdout.write(shown + "\n")
        stdout.flush()

    if interactive:
        say(text("terminal_talking", name=name, user=user, channel=channel))
        if engine.character.greeting:
            say(f"{name}: {fill_turn(engine.character.greeting, TurnValues(user, engine.clock(), story=channel))}")
    while True:
        line = await _read_line(stdin, interactive, f"{user}> ")
        if line is None:
            break
        line = line.strip()
        if not line:
            continue
        if line in ("/quit", "/exit"):
            break
        if line.startswith("/"):
            say(await run_command(engine, session, line))
            continue
        printed = ""

        async def show(partial: str) -> None:
            # The visible text grows by its end; when it does not (a late </think>), the
            # whole reply is printed again once it is done.
            nonlocal printed
            if partial.startswith(printed):
                stdout.write((f"{name}: " if not printed else "") + partial[len(printed) :])
                stdout.flush()
                printed = partial

        streaming = interactive and stream_replies
        result = await engine.conversation.turn(
            Incoming(
                user_id=session.user_id,
                user_name=user,
                text=line,
                story_id=session.story_id,
                story_name=channel,
                place=session.place,
                history=list(history),
            ),
            on_text=show if streaming else None,
        )
        if printed:
            stdout.write("\n")
        if result.reply is None:
            say(turn_text(result))  # why there is no reply, as every front end tells it
            continue
        if not printed:
            say(f"{name}: {result.reply}")
        elif result.cut:
            say(cut_note())
        elif printed != result.reply:
            say(f"{name}: {result.reply}")
        history += [ChannelLine(user, line, from_person=True), ChannelLine(name, result.reply, from_bot=True)]
        if not interactive:
            await engine.conversation.wait_idle(session.user_id)
    await engine.operator.wait_background(timeout=60)
