"""Every error the bot raises across module boundaries, in one place.

Front ends catch these to answer in plain words; each message is written for the person
who reads it (the user or the operator), so a handler shows it as is."""

from __future__ import annotations

# Settings and start-up


class ConfigError(ValueError):
    """The settings are invalid; the message has one line per bad environment variable."""


class StartupError(RuntimeError):
    """A problem the person running the bot must fix; its message is the whole explanation."""


class CharacterError(ValueError):
    """The character file cannot be used; the message names the file and the problem."""


class LoreError(ValueError):
    """The lore cannot be used; the message names the file and the problem."""


class StateSpecError(ValueError):
    """A `state:` entry of the character file is malformed; the message names the key."""


# Storage


class MoveRefused(Exception):
    """`python -m bot migrate-store`: the target holds other data than the source; nothing was changed."""


class MigrationError(RuntimeError):
    """The database's schema cannot be brought up to date; the message says which migration and why."""


class StorageError(RuntimeError):
    """A write failed because of the database file or its disk; the transaction was rolled
    back whole, so nothing is half-written. The message is written for the operator."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# Embeddings


class EmbeddingError(RuntimeError):
    """The embedder could not produce vectors; the message names the backend, URL and model."""


# The LLM


class LLMError(Exception):
    """Any failure of the chat LLM. The message is meant for the operator, as is."""


class LLMUnavailable(LLMError):
    """The server cannot be reached (connection refused, unknown host, connect timeout)."""


class ModelNotFound(LLMError):
    """The server answers but does not have the configured model."""

    def __init__(self, message: str, *, model: str) -> None:
        super().__init__(message)
        self.model = model


class LLMTimeout(LLMError):
    """The server accepted the request but did not answer within the timeout."""


class LLMBadResponse(LLMError):
    """The server answered something unusable: HTTP error, non-JSON, missing keys, cut short."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LLMContextExceeded(LLMBadResponse):
    """The server refused the prompt as longer than its context (llama.cpp's "exceeds the
    available context size", vLLM's and OpenAI's "maximum context length"): a retry of the same
    prompt can never work. `prompt_tokens` and `context_tokens` are the server's counts when it
    gave them."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        prompt_tokens: int | None = None,
        context_tokens: int | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.prompt_tokens = prompt_tokens
        self.context_tokens = context_tokens


class LLMTooLarge(LLMBadResponse):
    """The answer went past MAX_RESPONSE_BYTES: the same prompt would loop the same way again."""


class LLMStreamCut(LLMError):
    """A streamed answer broke after some text arrived: `partial` is that text (thinking
    stripped), `cause` the failure that cut it."""

    def __init__(self, cause: LLMError, *, partial: str) -> None:
        super().__init__(f"The answer was cut after {len(partial)} characters: {cause}")
        self.cause = cause
        self.partial = partial


# Memory


class InvalidMemory(ValueError):
    """A request on memory that cannot be honoured (bad type, empty text…): the message says why
    (for the log); `code` and `values` say it to a person, in their language (bot/presenting/)."""

    def __init__(self, message: str, *, code: str = "invalid", **values: object) -> None:
        super().__init__(message)
        self.code = code
        self.values = values


class MemoryCapReached(InvalidMemory):
    """The user holds as many memories as the operator allows (MAX_MEMORIES_PER_USER)."""


class InvalidTimezone(ValueError):
    """A time zone name that is not one (an IANA name such as Europe/Paris is)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown time zone: {name!r}")
        self.name = name


class ImportFileError(ValueError):
    """A conversation file that cannot be imported: one sentence naming the file and the line;
    nothing was written."""


class ImportStopped(RuntimeError):
    """An import stopped before its end (the model or the database down, the person's memories
    being written by a bot): what was imported stays, and running it again continues."""

    def __init__(self, why: str, done: int = 0) -> None:
        super().__init__(why)
        self.done = done


class ReflectionParseError(ValueError):
    """The reflection's answer holds no usable JSON object; nothing is applied."""


class ExchangesGone(RuntimeError):
    """The exchanges a reflection was about were deleted (erase) or already reflected by the
    time it would commit: its transaction is rolled back, nothing is applied twice."""


# Backups


class BackupError(RuntimeError):
    """A backup or a restore was not made; nothing was replaced. The message is for the operator."""
