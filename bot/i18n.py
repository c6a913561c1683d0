"""Every text the bot shows outside the character's own lines, from gettext catalogues, in the
language of the person it is shown to.

The language is set once where a request enters (Red-DiscordBot's pattern): the Discord front
end sets it from each interaction's locale, a turn from the person's or the character's
language, the terminal from its own; it lives in a context variable, so every text built while
that request is handled (in its task, and in the tasks it starts) reads it, and no function
passes a language along. `use_locale` sets it for a block, `set_locale` for the rest of a task.

The catalogues are `bot/locales/<language>.po`, read at import by Babel (no compile step): one
file per language, the same keys in each. Each message's msgid is the key the code names,
`text(key, **values)` formats it with Python's `{name}` placeholders; a plural message
(msgid_plural, msgstr[0], msgstr[1]…) picks its form from the value `n` by the file's
Plural-Forms rule. Numbers and dates are written for the language by Babel (`number`, `day`,
`moment`): "8 192" in French, "8.192" in German; `n` is written so too. Command names and
descriptions are the entries of context "command", keyed by their English text (cogs/bot.py
hands them to Discord).

To add a message: add it to every .po file, en.po first (tests/test_i18n.py lists what is
missing and checks that each file has the same placeholders). To add a language: copy en.po to
`<code>.po`, set its Language and Plural-Forms header and translate every msgstr (Poedit,
Weblate and Lokalize open it as a monolingual catalogue with en.po as the template); a Discord
locale whose code or prefix is the file's name ("es-ES" → es.po) then picks it.
"""

from __future__ import annotations

import gettext
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from pathlib import Path

from babel import Locale, UnknownLocaleError
from babel.dates import format_date, format_time, get_datetime_format
from babel.messages.pofile import read_po
from babel.numbers import format_decimal

DEFAULT_LANGUAGE = "en"
LOCALES = Path(__file__).parent / "locales"
COMMAND_CONTEXT = "command"

Message = str | tuple[str, ...]


def _load(path: Path) -> tuple[dict[str, Message], dict[str, str], Callable[[int], int]]:
    with path.open("rb") as file:
        catalog = read_po(file)
    messages: dict[str, Message] = {}
    commands: dict[str, str] = {}
    for message in catalog:
        if not message.id:
            continue  # the header
        key = str(message.id[0] if isinstance(message.id, (tuple, list)) else message.id)
        string = message.string
        if message.context == COMMAND_CONTEXT:
            if string:
                commands[key] = str(string)
        else:
            messages[key] = tuple(string) if isinstance(string, (tuple, list)) else str(string or "")
    return messages, commands, gettext.c2py(catalog.plural_expr)


_LOADED = {path.stem: _load(path) for path in sorted(LOCALES.glob("*.po"))}
MESSAGES: dict[str, dict[str, Message]] = {lang: loaded[0] for lang, loaded in _LOADED.items()}
PLURALS: dict[str, Callable[[int], int]] = {lang: loaded[2] for lang, loaded in _LOADED.items()}
EN = MESSAGES[DEFAULT_LANGUAGE]
# Command names, descriptions and option texts, by their English text, per language other than
# English: what Discord shows its users. Names follow Discord's rule: lower case, no spaces, ≤ 32.
COMMANDS: dict[str, dict[str, str]] = {lang: loaded[1] for lang, loaded in _LOADED.items() if lang != DEFAULT_LANGUAGE}

_LOCALE: ContextVar[str] = ContextVar("echo_locale", default=DEFAULT_LANGUAGE)


def language(locale: object) -> str:
    """The catalogue for a Discord locale ("fr", "es-ES", "de" …) or a language code: its own,
    or its prefix's, English otherwise."""
    code = str(getattr(locale, "value", locale) or "").lower().replace("_", "-")
    for candidate in (code, code.split("-")[0]):
        if candidate in MESSAGES:
            return candidate
    return DEFAULT_LANGUAGE


def known(locale: object) -> bool:
    """Whether a catalogue speaks this locale (English does not stand in for it)."""
    code = str(getattr(locale, "value", locale) or "").lower().replace("_", "-")
    return code.split("-")[0] in MESSAGES if code else False


def set_locale(locale: object) -> Token[str]:
    """The language of what the current request shows from now on (its task and the tasks it
    starts); `locale` is a Discord locale or a language code."""
    return _LOCALE.set(language(locale))


@contextmanager
def use_locale(locale: object) -> Iterator[str]:
    """The language of the texts built in this block."""
    token = set_locale(locale)
    try:
        yield _LOCALE.get()
    finally:
        _LOCALE.reset(token)


def current() -> str:
    return _LOCALE.get()


def text(key: str, **values: object) -> str:
    """Message `key` in the current language (English when the language or the translation is
    missing), formatted with `values`; a plural message takes its form from `n`, and `n` is
    written as the language writes numbers."""
    lang = _LOCALE.get()
    found = MESSAGES.get(lang, {}).get(key)
    if not found or (isinstance(found, tuple) and not all(found)):
        lang, found = DEFAULT_LANGUAGE, EN[key]
    if isinstance(found, tuple):
        count = values["n"]
        if not isinstance(count, int):
            raise TypeError(f"{key} is a plural message: n must be a whole number, not {count!r}")
        found = found[min(PLURALS[lang](count), len(found) - 1)]
        values = {**values, "n": number(count)}
    return found.format(**values)


def _babel() -> str:
    """The current language as Babel knows it (a catalogue Babel has no data for writes numbers
    and dates in English)."""
    lang = _LOCALE.get()
    try:
        Locale.parse(lang)
    except (UnknownLocaleError, ValueError):
        return DEFAULT_LANGUAGE
    return lang


def number(value: float, *, digits: int | None = None) -> str:
    """A number as the current language writes it: "8,192" in English, "8 192" in French,
    "8.192" in German; `digits` after the decimal mark when given."""
    if digits is not None:
        return format_decimal(value, format=f"#,##0.{'0' * digits}" if digits else "#,##0", locale=_babel())
    return format_decimal(value, locale=_babel())


def day(value: datetime) -> str:
    """A date as the current language writes it ("4 déc. 2026")."""
    return format_date(value, format="medium", locale=_babel())


def moment(value: datetime) -> str:
    """A date and time, in UTC, as the current language writes them ("4 déc. 2026, 22:27")."""
    lang = _babel()
    when = value.astimezone(UTC)
    # The language's own way of joining a date and a time ("{1}, {0}", "{1} {0}"…).
    return str(get_datetime_format("medium", locale=lang)).format(
        format_time(when, "short", tzinfo=UTC, locale=lang), format_date(when, "medium", locale=lang)
    )
