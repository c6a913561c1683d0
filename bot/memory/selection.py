"""Stable import path for outside users and benchmarks: the reference six-pass selection."""

from bot.memory.reference.selection import DEFAULT_LIMIT, Selected, select

__all__ = ["DEFAULT_LIMIT", "Selected", "select"]
