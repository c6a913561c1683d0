"""The fast lane's boundary is found from the code: a test that starts a process is `slow`
whether it does so itself, through a helper of its module, or through a process module."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests import test_main
from tests.lanes import is_slow, starts_processes
from tests.reliability.process import run_chat


async def _helper_that_starts_the_bot() -> None:
    await asyncio.create_subprocess_exec(sys.executable, "-m", "bot")


async def _helper_of_the_helper() -> None:
    await _helper_that_starts_the_bot()


async def _a_process_test() -> None:
    await _helper_of_the_helper()


async def _a_chat_test() -> None:
    await run_chat({}, None, b"")  # type: ignore[arg-type]


async def _an_in_process_test() -> None:
    await asyncio.sleep(0)


def test_a_process_started_through_helpers_or_a_process_module_is_seen() -> None:
    assert starts_processes(_helper_that_starts_the_bot)
    assert starts_processes(_a_process_test)
    assert starts_processes(_a_chat_test)
    assert not starts_processes(_an_in_process_test)


@dataclass
class _Item:
    nodeid: str
    fixturenames: list[str]
    function: Callable[..., Any]
    _fixtureinfo: None = None


def test_a_new_e2e_test_a_process_test_and_a_postgresql_test_are_slow() -> None:
    assert is_slow(_Item("tests/discord_e2e/test_new.py::test_x", [], _an_in_process_test))
    assert is_slow(_Item("tests/test_main.py::test_x", [], test_main.test_sigterm_stops_the_terminal_chat_cleanly))
    assert is_slow(_Item("tests/test_x.py::test_x", ["postgres_cluster"], _an_in_process_test))
    assert not is_slow(_Item("tests/test_x.py::test_x", ["db", "llm_server"], _an_in_process_test))
