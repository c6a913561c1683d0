"""`python -m bot` on a clock the test moves, as libfaketime would: the engine's clock (and every
module's that reads `bot.memory.model.utcnow`) is the real time plus the seconds written in the
file named by ECHO_TEST_CLOCK_FILE, read again whenever the file changes. Everything else runs
as it does in production; only time is moved, so a test can pass a memory's date or a person's
night without waiting for it."""

from __future__ import annotations

import os
import runpy
import sys
from datetime import datetime, timedelta
from pathlib import Path

import bot.memory.model as model

_FILE = Path(os.environ.pop("ECHO_TEST_CLOCK_FILE"))
_real = model.utcnow
_read: tuple[int, float] = (-1, 0.0)


def moved_utcnow() -> datetime:
    global _read
    try:
        stamp = _FILE.stat().st_mtime_ns
    except OSError:
        return _real()
    if stamp != _read[0]:
        _read = (stamp, float(_FILE.read_text(encoding="utf-8").strip() or 0))
    return _real() + timedelta(seconds=_read[1])


# Before any module of the bot takes `utcnow` by name (the engine's clock is a default argument).
model.utcnow = moved_utcnow

if __name__ == "__main__":
    sys.argv = ["bot", *sys.argv[1:]]
    runpy.run_module("bot", run_name="__main__", alter_sys=True)
