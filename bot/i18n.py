"""Every text the bot shows outside the character's own lines, from gettext catalogues.

The catalogues are `bot/locales/<language>.po`, read at import by Babel (no compile step): one
file per language, the same keys in each. Each message's msgid is the key the code names,
`text(lang, key, **values)` formats it with Python's `{name}` placeholders; a plural message
(msgid_plural, msgstr[0], msgstr[1]…) picks its form from the value `n` by the file's
Plural-Forms rule. Command names and descriptions are the entries of context "command", keyed
by their English text (cogs/bot.py hands them to Discord).

To add a message: add it to every .po file, en.po first (tests/test_i18n.py lists what is
missing and checks that each file has the same placeholders). To add a language: copy en.po to
`<code>.po`, set its Language and Plural-Forms header and translate every msgstr (Poedit,
Weblate and Lokalize open it as a monolingual catalogue with en.po as the template); a Discord
locale whose code or prefix is the file's name ("es-ES" → es.po) then picks it.
"""

from __future__ import annotations

import gettext
from collections.abc import Callable
from pathlib import Path

from babel.messages.pofile import read_po

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
COMMANDS: dict[str, dict[str, str]] = {
    lang: loaded[1] for lang, loaded in _LOADED.items()
    if lang != DEFAULT_LANGUAGE
}


def language(locale: object) -> str:
    """The catalogue for a Discord locale ("fr", "es-ES", "de" …): its own, or its prefix's,
    English otherwise."""
    code = str(getattr(locale, "value", locale) or "").lower()
    for candidate in (code, code.split("-")[0]):
        if candidate in MESSAGES:
            return candidate
    return DEFAULT_LANGUAGE


def text(lang: str, key: str, **values: object) -> str:
    """Message `key` in `lang` (English when the language or the translation is missing),
    formatted with `values`; a plural message takes its form from `n`."""
    found = MESSAGES.get(lang, {}).get(key)
    if not found or (isinstance(found, tuple) and not all(found)):
        lang, found = DEFAULT_LANGUAGE, EN[key]
    if isinstance(found, tuple):
        count = values["n"]
        if not isinstance(count, int):
            raise TypeError(f"{key} is a plural message: n must be a whole number, not {count!r}")
        found = found[min(PLURALS[lang](count), len(found) - 1)]
    return found.format(**values)
