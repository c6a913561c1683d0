"""Stable import path for outside users and benchmarks: the reference cosine scores."""

from bot.memory.reference.scoring import cosine_scores

__all__ = ["cosine_scores"]
