"""Which tests are `slow`: those that start a process or need the PostgreSQL cluster. Found
from the code, so that a new such test is slow without anyone remembering to mark it:

- every test under a folder of SLOW_FOLDERS (the bot run as a process against the fake Discord,
  the real model server's lane);
- a test that starts a process itself, through a helper of its module, or through a fixture
  that does: code that names asyncio.create_subprocess_exec, subprocess.run/Popen/check_*, or a
  function imported from a module of PROCESS_MODULES (read from the compiled code, so a helper
  only passed along, not called, counts too: such a test runs in `make test` only);
- a test that uses the PostgreSQL cluster: its `postgres_cluster` fixture, directly or through
  other fixtures, or the PostgreSQL half of a `both_stores` module (marked where it is made).

`make test-fast` runs the others (`-m "not slow"`), each property test on a tenth of its
examples (`examples`); `make test` runs all, on all their examples.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from functools import cache
from types import CodeType
from typing import Any

import pytest

SLOW_FOLDERS = ("tests/discord_e2e/", "tests/real_server/")
# HYPOTHESIS_PROFILE=fast: what `make test-fast` sets.
FAST = os.environ.get("HYPOTHESIS_PROFILE") == "fast"
FAST_SHARE = 10
PROCESS_MODULES = frozenset({"tests.reliability.process", "tests.fakes.discord.echo_process"})
SLOW_FIXTURES = frozenset({"postgres_cluster"})
_STARTERS = frozenset({"create_subprocess_exec", "create_subprocess_shell", "Popen", "check_call", "check_output"})


def _names(code: CodeType) -> frozenset[str]:
    """The global and attribute names a function's code uses, its nested functions' included:
    read from the compiled code, which the collection has already, rather than by parsing the
    source again (that was most of the collection's time)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _names(const)
    return frozenset(names)


def _starts_directly(names: frozenset[str]) -> bool:
    return bool(names & _STARTERS) or {"subprocess", "run"} <= names


def _code_of(obj: object) -> CodeType | None:
    code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
    return code if isinstance(code, CodeType) else None


@cache
def _process_functions(module_name: str) -> frozenset[str]:
    """The module's functions and methods that start a process, directly or through each
    other, and the names it imports from a module that starts processes."""
    module = sys.modules.get(module_name)
    if module is None:
        return frozenset()
    found = {name for name, obj in vars(module).items() if getattr(obj, "__module__", None) in PROCESS_MODULES}
    functions: dict[str, frozenset[str]] = {}
    for name, obj in vars(module).items():
        if getattr(obj, "__module__", None) != module_name:
            continue
        if inspect.isclass(obj):
            for method_name, method in vars(obj).items():
                if (code := _code_of(method)) is not None:
                    functions[method_name] = _names(code)
        elif (code := _code_of(obj)) is not None:
            functions[name] = _names(code)
    changed = True
    while changed:
        changed = False
        for name, names in functions.items():
            if name not in found and (_starts_directly(names) or names & found):
                found.add(name)
                changed = True
    return frozenset(found)


def starts_processes(func: Callable[..., Any]) -> bool:
    """Whether calling `func` starts a process, as far as its module's code shows."""
    code = _code_of(func)
    if code is None:
        return False
    names = _names(code)
    return _starts_directly(names) or bool(names & _process_functions(inspect.unwrap(func).__module__))


def is_slow(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    if path.startswith(SLOW_FOLDERS):
        return True
    if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    function = getattr(item, "function", None)
    if function is not None and starts_processes(function):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for definitions in info.name2fixturedefs.values() if info is not None else ():
        if any(starts_processes(definition.func) for definition in definitions):
            return True
    return False


def mark_slow(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and is_slow(item):
            item.add_marker(pytest.mark.slow)


def examples(full: int) -> int:
    """How many examples a property test written for `full` runs in this lane: all of them in
    `make test`, a tenth (at least 3) in `make test-fast`, which is for the minute-long loop
    while working, not for the verdict."""
    return max(3, full // FAST_SHARE) if FAST else full
