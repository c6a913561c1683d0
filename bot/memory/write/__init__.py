"""The write path after a reply: the reflection's prompt and parser, the code filters, the
replace guard, dedup and merge, the write indexes, and the apply in one transaction."""
