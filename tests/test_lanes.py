"""The fast lane's boundary is found from the code: a test that starts a process is `slow`
whether it does so itself, through a helper of its module, or through a process module."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import lanes, test_main
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


def test_the_fast_lane_runs_a_tenth_of_each_property_tests_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes, "FAST", False)
    assert [lanes.examples(n) for n in (300, 12)] == [300, 12]
    monkeypatch.setattr(lanes, "FAST", True)
    assert [lanes.examples(n) for n in (300, 12)] == [30, 3]


def test_every_property_test_that_sets_its_examples_goes_through_the_lanes() -> None:
    """A number written as it is would run whole in the fast lane too."""
    tests = Path(__file__).parent
    fixed = [
        f"{path.relative_to(tests)}:{n}"
        for path in sorted(tests.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"max_examples=(?!examples\()\w", line)
    ]
    assert fixed == []
