"""The memory engine: pure logic (dedup, filters, selection, scoring) and the SQLite store."""
