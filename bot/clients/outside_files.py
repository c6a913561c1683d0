"""The one guarded reader of every file Écho reads from its settings or from another file:
character files and cards (PNG, CHARX), lore files, the characters folder and its channels.yaml,
the .env file, backups, the erasure ledger.

Each kind of file is a `FileKind` with its bounds, listed in docs/security.md (tests/reliability/
test_outside_files.py walks the list both ways: a kind missing from the table, or a file read in
bot/ or cogs/ around this module, fails). What every read holds:

- the file is opened without blocking and read only when it is a regular file (a FIFO would
  wait for a writer forever; /dev/zero never ends), at most `max_bytes` of it;
- JSON is read as JSON, YAML as YAML, by the file's suffix;
- the parsed document is counted as it will be built: at most `max_nodes` values, `max_chars`
  characters and MAX_DEPTH levels of nesting, YAML aliases expanded (an alias is cheap for the
  parser and a copy for every reader after it: 462 bytes of aliases were 1.2 GB); an alias that
  contains itself is refused;
- a parser's resource error (a nesting past the interpreter's recursion limit, a number of
  thousands of digits) is the same one sentence naming the file, never a traceback.

Every refusal raises the kind's own error (CharacterError, LoreError, BackupError...) with one
sentence that names the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bot.errors import BackupError, CharacterError, ConfigError, ImportFileError, LoreError

# Levels of nesting a document may have: a card is 6 deep, a World Info file 4.
MAX_DEPTH = 64
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileKind:
    """One kind of outside file and its bounds."""

    name: str  # as docs/security.md lists it
    what: str  # "a character file": how a refusal names it
    max_bytes: int
    error: type[Exception]
    # What the operator may do about a file that is not a regular file, said after the refusal.
    hint: str = ""
    missing: str = "no such file."

    @property
    def max_nodes(self) -> int:
        """Values a parsed document may hold: as many as a file of `max_bytes` could spell out
        without aliases ("[0,0,…]": two bytes a value)."""
        return self.max_bytes // 2

    @property
    def max_chars(self) -> int:
        """Characters of text a parsed document may hold, aliases expanded: a file's worth."""
        return self.max_bytes


CHARACTER_FILE = FileKind(
    "character file", "a character file", 1 * MiB, CharacterError,
    "point CHARACTER_FILE to a .yaml, .json, .png or .charx file",
)  # fmt: skip
# A card's picture (.png) or its zip (.charx, Character Card V3): a few hundred KB to a few MB.
CARD_PICTURE = FileKind(
    "card picture", "a card's picture", 20 * MiB, CharacterError, "point CHARACTER_FILE to a .png file"
)
CHARX_CARD = FileKind("CHARX card", "a CHARX card", 20 * MiB, CharacterError, "point CHARACTER_FILE to a .charx file")
CARD_TEXT = FileKind("card text", "a card's text", 1 * MiB, CharacterError)
# A lorebook of a few thousand entries (SillyTavern's World Info exports are verbose).
LORE_FILE = FileKind(
    "lore file", "a lore file", 4 * MiB, LoreError, "name a .yaml or .json file in `lore:`", "no such lore file."
)
CHANNELS_FILE = FileKind("channels.yaml", "channels.yaml", 1 * MiB, CharacterError, "make channels.yaml a file")
ENV_FILE = FileKind(".env", "the .env file", 1 * MiB, ConfigError, "make .env a file, or remove it")
ERASURE_LEDGER = FileKind("erasure ledger", "the erasure ledger", 64 * MiB, BackupError, "make it a file")
# A backup is an SQLite file of any size: only its being a regular file is checked here, then
# SQLite's own reading (its header, integrity_check) and Écho's schema (bot/clients/backup.py).
BACKUP_FILE = FileKind("backup", "a backup", 0, BackupError, "name a backup file")
# A past conversation (`python -m bot import`): months of SillyTavern lines are a few MB, a
# DiscordChatExporter export some tens (an author object with every message).
CONVERSATION_FILE = FileKind(
    "conversation file", "a conversation file", 64 * MiB, ImportFileError, "name a .jsonl, .json or .txt file"
)

KINDS: tuple[FileKind, ...] = (
    CHARACTER_FILE, CARD_PICTURE, CHARX_CARD, CARD_TEXT, LORE_FILE, CHANNELS_FILE, ENV_FILE, ERASURE_LEDGER, BACKUP_FILE,
    CONVERSATION_FILE,
)  # fmt: skip


def _refuse(kind: FileKind, file: Path | str, sentence: str) -> Exception:
    return kind.error(f"{file}: {sentence}")


def _open_regular(file: Path, kind: FileKind) -> int:
    """A descriptor of `file` once it is known to be a regular file; opened without blocking, so
    a FIFO is refused instead of waited on."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _refuse(kind, file, kind.missing) from None
    except OSError as exc:
        raise _refuse(kind, file, f"cannot be read ({exc.strerror or exc}).") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        hint = f"; {kind.hint}" if kind.hint else ""
        raise _refuse(kind, file, f"not a regular file{hint}.")
    return fd


def check_regular(path: str | Path, kind: FileKind) -> int:
    """The size of `path`, a regular file of at most `kind.max_bytes` (no bound when it is 0),
    for a file another library reads (SQLite, python-dotenv); the kind's error otherwise."""
    file = Path(path)
    fd = _open_regular(file, kind)
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if kind.max_bytes and size > kind.max_bytes:
        raise _too_large(file, kind)
    return size


def _too_large(file: Path, kind: FileKind) -> Exception:
    return _refuse(kind, file, f"larger than {_size(kind.max_bytes)}, the most {kind.what} may be.")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n:,} bytes"


def read_bytes(path: str | Path, kind: FileKind) -> bytes:
    """The bytes of a regular file of at most `kind.max_bytes`."""
    file = Path(path)
    fd = _open_regular(file, kind)
    with os.fdopen(fd, "rb") as stream:
        try:
            data = stream.read(kind.max_bytes + 1)
        except OSError as exc:
            raise _refuse(kind, file, f"cannot be read ({exc.strerror or exc}).") from None
    if len(data) > kind.max_bytes:
        raise _too_large(file, kind)
    return data


def read_head(path: str | Path, kind: FileKind, n: int) -> bytes:
    """The first `n` bytes of a regular file (a file's signature)."""
    file = Path(path)
    with os.fdopen(_open_regular(file, kind), "rb") as stream:
        return stream.read(n)


def decode(file: Path | str, data: bytes, kind: FileKind) -> str:
    """UTF-8 text (a byte-order mark dropped)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _refuse(kind, file, "not UTF-8 text.") from None


def read_text(path: str | Path, kind: FileKind) -> str:
    return decode(path, read_bytes(path, kind), kind)


def read_document(path: str | Path, kind: FileKind) -> Any:
    """The file parsed by its suffix: JSON for .json, YAML otherwise; bounded as the module says."""
    file = Path(path)
    text = read_text(file, kind)
    if file.suffix.lower() == ".json":
        return parse_json(file, text, kind)
    return parse_yaml(file, text, kind)


def parse_json(file: Path | str, text: str, kind: FileKind) -> Any:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _refuse(kind, file, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}.") from None
    except RecursionError:
        raise _refuse(kind, file, f"nested deeper than {MAX_DEPTH} levels; no card or lorebook is.") from None
    except ValueError as exc:  # a number of thousands of digits
        raise _refuse(kind, file, f"invalid JSON: {_value_problem(exc)}.") from None
    _count(file, document, kind)
    return document


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")


def _value_problem(exc: ValueError) -> str:
    if "digits" in str(exc):
        return "a number of thousands of digits"
    return _first_line(exc)


class _Refused(Exception):
    """Raised inside the YAML loader; turned into the kind's error with the file's name."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader (pure Python: its composer can be bounded), nesting bounded as it
    composes, so no recursion error can come out of it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def parse_yaml(file: Path | str, text: str, kind: FileKind) -> Any:
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count_nodes(node, kind)
        return loader.construct_document(node)
    except _Refused as exc:
        raise _refuse(kind, file, f"{exc}; no character or lore file needs that.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or _first_line(exc)
        raise _refuse(kind, file, f"invalid YAML{where}: {problem}.") from None
    except RecursionError:
        raise _refuse(
            kind, file, f"nested deeper than {MAX_DEPTH} levels; no character or lore file needs that."
        ) from None
    except ValueError as exc:  # a number of thousands of digits, a date out of range
        raise _refuse(kind, file, f"invalid YAML: {_value_problem(exc)}.") from None
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _count_nodes(root: yaml.Node, kind: FileKind) -> None:
    """Values, characters and depth of the document as it will be built, each alias expanded
    where it stands: a composed node used twice counts twice. Memoised by node, so the count
    costs the size of the file, not of what it expands to."""
    sizes: dict[int, tuple[int, int, int]] = {}  # id(node) -> (values, characters, depth)
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            values, chars, depth = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0, 0
            for child in _children(node):
                v, c, d = sizes[id(child)]
                values, chars, depth = values + v, chars + c, max(depth, d)
            depth += 1
            if values > kind.max_nodes:
                raise _Refused(f"its aliases expand to more than {kind.max_nodes:,} values")
            if chars > kind.max_chars:
                raise _Refused(f"its aliases expand to more than {kind.max_chars:,} characters")
            if depth > MAX_DEPTH:
                raise _Refused(f"its aliases nest it deeper than {MAX_DEPTH} levels")
            sizes[key] = (values, chars, depth)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise _Refused("an alias refers to the node that holds it")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _count(file: Path | str, document: Any, kind: FileKind) -> None:
    """Values, characters and depth of a parsed JSON document (no aliases: a tree)."""
    values = chars = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        values += 1
        if depth > MAX_DEPTH:
            raise _refuse(kind, file, f"nested deeper than {MAX_DEPTH} levels; no card or lorebook is.")
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    if values > kind.max_nodes or chars > kind.max_chars:
        raise _refuse(kind, file, f"holds more than {kind.max_nodes:,} values or {kind.max_chars:,} characters.")
