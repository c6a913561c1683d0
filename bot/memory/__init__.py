"""The memory of each person: the shared vocabulary at this folder's root (memories, text,
carrier tokens, quoting, series, what a turn chose), then one folder per path: `cache/` (each
person's memories held in step with the database), `read/` (a turn's recall and selection),
`write/` (a reflection's filters, dedup and apply), `story/`, `consolidation/`, `reports/`, and
`stores/` (every SQL statement). `reference/` holds pure oracles for tests and benches only."""
