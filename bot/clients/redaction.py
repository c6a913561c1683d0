"""Secrets kept out of every message and log line, by what a value may hold rather than by the
setting it came from: a URL's user-info (`postgresql://echo:<password>@host`, `https://<token>@host`),
a query parameter named like a secret (`?api_key=…`, `&token=…`), a `password=…` of a
connection string. A mistyped DATABASE_URL or an LLM_BASE_URL with credentials is echoed by a
validation error, a driver's exception, a log line: each goes through `redact` on its way out
(the settings' errors, `python -m bot doctor`, the "Écho cannot start." paragraph, and every log
record through `RedactingFormatter`).
"""

from __future__ import annotations

import logging
import re

HIDDEN = "***"
# scheme://user-info@ — any scheme ("postgres+asyncpg" included), the user-info up to the last
# "@" of the word: a password may hold ":", "/" and even an unescaped "@" (better too much hidden).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^\s/?#@'\"<>]*(?::[^\s'\"<>]*)?)@")
_SECRET_NAME = r"[A-Za-z0-9_\-]*(?:pass|pwd|secret|token|key|auth|sig|credential|session|cookie)[A-Za-z0-9_\-]*"
# ?name=value / &name=value of a URL; password=value of a libpq connection string. Not any
# NAME=value of a sentence: "LLM_CONTEXT_TOKENS=8192" is a setting's value, not a secret.
_QUERY = re.compile(
    rf"(?P<lead>[?&;])(?P<name>{_SECRET_NAME})=(?P<value>[^\s&#'\"<>;,)]+)"
    r"|(?P<lead2>(?<![\w-]))(?P<name2>password|passwd|pwd|sslpassword)=(?P<value2>[^\s'\"<>;,)]+)",
    re.IGNORECASE,
)


def _user_info(match: re.Match[str]) -> str:
    info = match["info"]
    user, colon, _ = info.partition(":")
    # With a password, the user name is kept (it says which account); alone, it may be a token.
    shown = f"{user}:{HIDDEN}" if colon else HIDDEN
    return f"{match['scheme']}{shown}@"


def redact(text: str) -> str:
    """`text` with every secret a URL or a connection string may hold replaced by ***."""
    if "@" in text:
        text = _USERINFO.sub(_user_info, text)
    if "=" in text:
        text = _QUERY.sub(lambda m: f"{m['lead'] or m['lead2'] or ''}{m['name'] or m['name2']}={HIDDEN}", text)
    return text


class RedactingFormatter(logging.Formatter):
    """A log line, its traceback included, with its secrets redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def redact_logs(root: logging.Logger | None = None) -> None:
    """Every handler of the root logger writes redacted lines (after logging.basicConfig)."""
    for handler in (root or logging.getLogger()).handlers:
        current = handler.formatter
        handler.setFormatter(
            RedactingFormatter(current._fmt if current else None, current.datefmt if current else None)
        )
