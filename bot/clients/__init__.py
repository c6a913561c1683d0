"""Clients of what the bot talks to: the database, the LLM server, the embedder, background
tasks, outage reporting and the metrics registry. They know nothing of memory or of Discord."""
