"""Stable import path for outside users and benchmarks: the write path's dedup similarity."""

from bot.memory.write.dedup import SIMILARITY_THRESHOLD, similarity

__all__ = ["SIMILARITY_THRESHOLD", "similarity"]
