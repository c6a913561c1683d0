"""Which tests are `slow`: those that start a process or need the PostgreSQL cluster. Found
from the code, so that a new such test is slow without anyone remembering to mark it:

- every test under a folder of SLOW_FOLDERS (the bot run as a process against the fake Discord);
- a test that starts a process itself, through a helper of its module, or through a fixture
  that does: a call to asyncio.create_subprocess_exec, subprocess.run/Popen/check_*, or to a
  function imported from a module of PROCESS_MODULES;
- a test that uses the PostgreSQL cluster: its `postgres_cluster` fixture, directly or through
  other fixtures, or the PostgreSQL half of a `both_stores` module (marked where it is made).

`make test-fast` runs the others (`-m "not slow"`), each property test on a tenth of its
examples (`examples`); `make test` runs all, on all their examples.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

SLOW_FOLDERS = ("tests/discord_e2e/",)
# HYPOTHESIS_PROFILE=fast: what `make test-fast` sets.
FAST = os.environ.get("HYPOTHESIS_PROFILE") == "fast"
FAST_SHARE = 10
PROCESS_MODULES = frozenset({"tests.reliability.process", "tests.fakes.discord.echo_process"})
SLOW_FIXTURES = frozenset({"postgres_cluster"})
_STARTERS = frozenset({"create_subprocess_exec", "create_subprocess_shell", "Popen", "check_call", "check_output"})


def _call_names(call: ast.Call) -> tuple[str, ...]:
    """`f(...)` gives f, `a.b.f(...)` gives f and `a.b.f`."""
    func = call.func
    if isinstance(func, ast.Name):
        return (func.id,)
    if isinstance(func, ast.Attribute):
        return (func.attr, f"{func.value.id}.{func.attr}") if isinstance(func.value, ast.Name) else (func.attr,)
    return ()


def _called_names(tree: ast.AST) -> set[str]:
    """Names a piece of code calls."""
    return {name for node in ast.walk(tree) if isinstance(node, ast.Call) for name in _call_names(node)}


class _CallsByFunction(ast.NodeVisitor):
    """In one walk of a module, what each function calls (its nested functions' calls included),
    by the line its code starts on: its first decorator's when it has some."""

    def __init__(self) -> None:
        self.by_first_line: dict[int, set[str]] = {}
        self._open: list[set[str]] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        called: set[str] = set()
        self.by_first_line[min([node.lineno, *(d.lineno for d in node.decorator_list)])] = called
        self._open.append(called)
        self.generic_visit(node)
        self._open.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Call(self, node: ast.Call) -> None:
        names = _call_names(node)
        for called in self._open:
            called.update(names)
        self.generic_visit(node)


def _starts_directly(called: set[str] | frozenset[str]) -> bool:
    return bool(called & _STARTERS) or "subprocess.run" in called


@cache
def _process_functions(module_name: str) -> frozenset[str]:
    """The module's top-level functions that start a process, directly or through each other,
    and the names it imports from a module that starts processes."""
    tree = _module_tree(module_name)
    if tree is None:
        return frozenset()
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in PROCESS_MODULES:
            found.update(alias.asname or alias.name for alias in node.names)
    functions = {n.name: _called_names(n) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for method in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            functions[method.name] = _called_names(method)
    changed = True
    while changed:
        changed = False
        for name, called in functions.items():
            if name not in found and (_starts_directly(called) or called & found):
                found.add(name)
                changed = True
    return frozenset(found)


@cache
def _module_tree(module_name: str) -> ast.Module | None:
    module = sys.modules.get(module_name)
    if module is None:
        return None
    try:
        return ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return None


@cache
def _calls_by_first_line(module_name: str) -> dict[int, frozenset[str]]:
    """What each function of the module calls, by the line its code starts on: each module is
    parsed and walked once, not once per test and fixture (that was most of the collection's
    time)."""
    tree = _module_tree(module_name)
    if tree is None:
        return {}
    calls = _CallsByFunction()
    calls.visit(tree)
    return {line: frozenset(called) for line, called in calls.by_first_line.items()}


def starts_processes(func: Callable[..., Any]) -> bool:
    """Whether calling `func` starts a process, as far as its module's code shows."""
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    called = _calls_by_first_line(func.__module__).get(code.co_firstlineno) if code is not None else None
    if called is None:  # not a `def` of its module's source (a lambda, a function made by exec)
        try:
            called = frozenset(_called_names(ast.parse(textwrap.dedent(inspect.getsource(func)))))
        except (OSError, TypeError, SyntaxError):
            return False
    return _starts_directly(called) or bool(called & _process_functions(func.__module__))


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
    for definitions in (info.name2fixturedefs.values() if info is not None else ()):
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
