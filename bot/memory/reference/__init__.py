"""Pure reference implementations, the oracles the product's fast paths are tested against (the
six-pass selection over `Memory` objects, the cosine of a query against rows). Tests, benches and
outside users import them; no product module may (tests/test_layout.py)."""
