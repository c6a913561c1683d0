"""A local fake Discord (REST + zlib-stream gateway on 127.0.0.1) for tests of the real bot."""

from tests.fakes.discord.server import ALICE, BOB, TOKEN, FakeDiscord

__all__ = ["ALICE", "BOB", "TOKEN", "FakeDiscord"]
