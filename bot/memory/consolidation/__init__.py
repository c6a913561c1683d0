"""A series of look-alike memories rewritten into one: what the model is asked, and the checks
its proposal must pass."""
