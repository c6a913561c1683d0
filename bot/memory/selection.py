"""Stable import path for outside users and benchmarks: the reference six-pass selection."""

from bot.memory.choice import DEFAULT_LIMIT, Selected
from bot.memory.reference.selection import select

__all__ = ["DEFAULT_LIMIT", "Selected", "select"]
