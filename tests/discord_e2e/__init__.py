"""The real bot process against the local fake Discord (tests/fakes/discord)."""
