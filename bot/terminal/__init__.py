"""The terminal front end: `python -m bot chat` and its `/` commands."""
