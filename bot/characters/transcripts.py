"""Past conversations with a character, read from the files other tools write (issue 34, item 3):
a SillyTavern chat (`.jsonl`), a DiscordChatExporter export of a channel or a DM (`.json`), or
a plain transcript (`Name: text` lines, any other name).

Each reader gives the same thing, a `Transcript`: the person's lines and the character's, in
order, each with its original date when the file has one. Everything in the file is untrusted:
the file is read as cards are (a regular file, bounded in bytes, through the one guarded reader),
then bounded in messages and in line length; any problem is one `ImportFileError` sentence that
names the file and the line (or the message), and nothing is read further.

- SillyTavern: the first line is the chat's header (`user_name`, `character_name`,
  `create_date`, `chat_metadata`); every other line one message: `name`, `is_user`,
  `is_system` (hidden from the model, so skipped, as a narrator's line is), `send_date` (an ISO
  time, milliseconds since 1970, or "June 19, 2023 2:20pm"), `mes`: the answer kept, which is
  `swipes[swipe_id]` (the answers swiped away are never read).
- DiscordChatExporter: `guild`, `channel` (`type` DirectTextChat for a DM), `messages` each with
  `id`, `type` (Default or Reply; joins, pins and calls skipped), `timestamp`, `content`,
  `author` (`id`, `name`, `nickname`, `isBot`). The person is the author whose id is the
  person's; the character is the bot author who wrote most (a character speaking through
  webhooks shows as a bot); anyone else's lines are left out.
- Plain text: `Name: text` lines, optionally led by a date in brackets (`[2024-05-12 14:30]`);
  a line without a name continues the one above. The character is its name in the file; the
  person is the other name, or the one given.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from bot.clients.outside_files import CONVERSATION_FILE, read_bytes
from bot.errors import ImportFileError
from bot.memory.text import storable

# Bounds of a conversation file past its size (CONVERSATION_FILE, the guarded reader's):
MAX_IMPORT_MESSAGES = 100_000
# One line of a .jsonl or .txt file (a SillyTavern message holds every swipe of it).
MAX_LINE_CHARS = 1_000_000

Speaker = Literal["person", "character"]
Kind = Literal["sillytavern", "discord", "text"]


@dataclass(frozen=True, slots=True)
class Said:
    """One message of the conversation."""

    speaker: Speaker
    name: str
    text: str
    at: datetime | None


@dataclass(frozen=True, slots=True)
class Exchange:
    """What the person said (their messages in a row, joined) and the character's answer."""

    text: str
    reply: str
    at: datetime | None  # the person's last message's date
    replied_at: datetime | None

    def key(self, owner: str, story_id: str) -> str:
        """The same exchange of the same conversation gives the same key, whichever file (a
        longer export of the same chat) it comes from: what makes an import idempotent."""
        at = self.at.isoformat() if self.at else ""
        digest = hashlib.sha256("\x00".join((owner, story_id, at, self.text, self.reply)).encode()).hexdigest()
        return f"import:{digest[:32]}"


@dataclass(slots=True)
class Transcript:
    kind: Kind
    file: Path
    person_name: str
    character_name: str
    said: list[Said]
    # Where it happened, for the story the memories belong to: a channel's id or a chat's name.
    story: str
    direct: bool = True  # a private conversation (a SillyTavern chat, a DM)
    guild_id: str | None = None
    person_id: str | None = None
    character_id: str | None = None
    # Lines of other people, left out (a channel export).
    others: Counter[str] = field(default_factory=Counter)
    skipped: int = 0  # system lines, joins, pins, empty messages

    def exchanges(self) -> list[Exchange]:
        """The person's lines in a row, then the character's lines in a row: one exchange. What
        the character said before the person's first line (a greeting) is not an exchange; the
        person's last lines without an answer are one, with an empty reply."""
        out: list[Exchange] = []
        mine: list[Said] = []
        theirs: list[Said] = []
        for said in self.said:
            if said.speaker == "person":
                if theirs and mine:
                    out.append(_exchange(mine, theirs))
                    mine, theirs = [], []
                elif theirs:
                    theirs = []
                mine.append(said)
            elif mine:
                theirs.append(said)
        if mine:
            out.append(_exchange(mine, theirs))
        return out

    @property
    def dated(self) -> bool:
        return any(s.at is not None for s in self.said)


def _exchange(mine: list[Said], theirs: list[Said]) -> Exchange:
    return Exchange(
        text="\n".join(s.text for s in mine),
        reply="\n\n".join(s.text for s in theirs),
        at=mine[-1].at,
        replied_at=theirs[-1].at if theirs else mine[-1].at,
    )


def read_transcript(
    path: str | Path, *, character_name: str, person_id: str, person_name: str | None = None
) -> Transcript:
    """The conversation in `path`, by its kind (.jsonl SillyTavern, .json DiscordChatExporter,
    anything else a plain transcript). ImportFileError with one sentence otherwise."""
    file = Path(path)
    data = read_bytes(file, CONVERSATION_FILE)  # ImportFileError, naming the file
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ImportFileError(f"{file}, line {line}: not UTF-8 text.") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    suffix = file.suffix.lower()
    if suffix == ".jsonl":
        return _sillytavern(file, text)
    if suffix == ".json":
        return _discord(file, text, person_id)
    return _plain(file, text, character_name, person_name)


def _fail(file: Path, where: str, what: str) -> ImportFileError:
    return ImportFileError(f"{file}, {where}: {what}")


def _lines(file: Path, text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) > MAX_LINE_CHARS:
            raise _fail(file, f"line {number}", f"longer than {MAX_LINE_CHARS:,} characters; no conversation line is.")
        yield number, line


def _count(file: Path, where: str, n: int) -> None:
    if n > MAX_IMPORT_MESSAGES:
        raise _fail(
            file, where, f"more than {MAX_IMPORT_MESSAGES:,} messages, the most one import reads; split the file."
        )


def _text(value: Any) -> str:
    return storable(value).strip() if isinstance(value, str) else ""


# --- dates ----------------------------------------------------------------------------------

_MONTHS = {m: n for n, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
     "december"), 1)}  # fmt: skip
_ST_MESSAGE = re.compile(r"([a-z]+) (\d{1,2}), (\d{4}) (\d{1,2}):(\d{2}) ?([ap]m)", re.IGNORECASE)
_ST_HUMANIZED = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2}) ?@ ?(\d{1,2})h ?(\d{1,2})m ?(\d{1,2})s")
_BRACKET = re.compile(r"^\[(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)\]\s*")


def parse_date(value: Any) -> datetime | None:
    """A date as the tools write them, in UTC (a time without a zone is taken as UTC); None
    when there is none or it cannot be read."""
    try:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            seconds = value / 1000 if value > 1e11 else value  # milliseconds since 1970, or seconds
            return datetime.fromtimestamp(seconds, tz=UTC)
        if not isinstance(value, str) or not value.strip():
            return None
        text = value.strip()
        if (m := _ST_MESSAGE.fullmatch(text)) and m.group(1).lower() in _MONTHS:
            hour = int(m.group(4)) % 12 + (12 if m.group(6).lower() == "pm" else 0)
            return datetime(
                int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)), hour, int(m.group(5)), tzinfo=UTC
            )
        if m := _ST_HUMANIZED.match(text):
            year, month, day, hour, minute, second = (int(g) for g in m.groups())
            return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
        parsed = datetime.fromisoformat(text)  # "Z" read as UTC since Python 3.11
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        return None


# --- SillyTavern ----------------------------------------------------------------------------


def _sillytavern(file: Path, text: str) -> Transcript:
    header: dict[str, Any] | None = None
    said: list[Said] = []
    skipped = 0
    for number, line in _lines(file, text):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise _fail(file, f"line {number}", f"not a JSON object ({getattr(exc, 'msg', exc)}).") from None
        if not isinstance(item, dict):
            raise _fail(file, f"line {number}", "not a JSON object.")
        if header is None:
            if "mes" in item or "character_name" not in item:
                raise _fail(
                    file, f"line {number}", "the first line of a SillyTavern chat is its header, with character_name."
                )
            header = item
            continue
        if not isinstance(item.get("mes"), str) or not isinstance(item.get("is_user", False), bool):
            raise _fail(file, f"line {number}", "a SillyTavern message needs its text (mes) and is_user.")
        extra = item["extra"] if isinstance(item.get("extra"), dict) else {}
        if item.get("is_system") is True or extra.get("type") == "narrator" or not _text(item["mes"]):
            skipped += 1
            continue
        _count(file, f"line {number}", len(said) + 1)
        speaker: Speaker = "person" if item.get("is_user") else "character"
        said.append(Said(speaker, _text(item.get("name")), _text(item["mes"]), parse_date(item.get("send_date"))))
    if header is None:
        raise _fail(file, "line 1", "empty: a SillyTavern chat starts with its header line.")
    character = _text(header.get("character_name")) or next((s.name for s in said if s.speaker == "character"), "")
    person = _text(header.get("user_name")) or next((s.name for s in said if s.speaker == "person"), "")
    story = f"sillytavern:{character}:{_text(str(header.get('create_date') or ''))}"
    return Transcript("sillytavern", file, person or "User", character, said, story, skipped=skipped)


# --- DiscordChatExporter --------------------------------------------------------------------


def _discord(file: Path, text: str, person_id: str) -> Transcript:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(file, f"line {exc.lineno}", f"invalid JSON ({exc.msg}).") from None
    except (RecursionError, ValueError):
        raise _fail(file, "line 1", "JSON nested too deeply or with a number too long; no export is.") from None
    messages = document.get("messages") if isinstance(document, dict) else None
    channel = document.get("channel") if isinstance(document, dict) else None
    if not isinstance(messages, list) or not isinstance(channel, dict):
        raise _fail(file, "line 1", "not a DiscordChatExporter JSON export (it has channel and messages).")
    _count(file, "messages", len(messages))
    rows: list[tuple[str, bool, str, str, datetime | None]] = []
    skipped = 0
    for n, message in enumerate(messages, 1):
        author = message.get("author") if isinstance(message, dict) else None
        if not isinstance(author, dict) or not isinstance(author.get("id"), str) or "timestamp" not in message:
            raise _fail(file, _message_line(text, n), "a message needs its author (with an id) and its timestamp.")
        if message.get("type", "Default") not in ("Default", "Reply") or not _text(message.get("content")):
            skipped += 1
            continue
        name = _text(author.get("nickname")) or _text(author.get("name"))
        rows.append(
            (author["id"], bool(author.get("isBot")), name, _text(message["content"]), parse_date(message["timestamp"]))
        )
    bots = Counter(a for a, bot, *_ in rows if bot and a != person_id)
    character_id = bots.most_common(1)[0][0] if bots else None
    said: list[Said] = []
    others: Counter[str] = Counter()
    for author_id, _bot, name, content, at in rows:
        if author_id == person_id:
            said.append(Said("person", name, content, at))
        elif author_id == character_id:
            said.append(Said("character", name, content, at))
        else:
            others[name] += 1
    person = next((s.name for s in said if s.speaker == "person"), "")
    character = next((s.name for s in said if s.speaker == "character"), "")
    guild = document.get("guild") if isinstance(document.get("guild"), dict) else {}
    direct = str(channel.get("type", "")).startswith("Direct")
    return Transcript(
        "discord", file, person, character, said, story=_text(str(channel.get("id") or "")) or file.stem,
        direct=direct, guild_id=None if direct else _text(str(guild.get("id") or "")) or None,
        person_id=person_id, character_id=character_id, others=others, skipped=skipped,
    )  # fmt: skip


def _message_line(text: str, n: int) -> str:
    """Where the n-th message of an export starts ("line 4, message 2"), found by walking the
    document's top level and its messages with the decoder's own positions: only when a message
    is refused, so a good file is parsed once."""
    decoder = json.JSONDecoder()
    space = re.compile(r"[ \t\n\r]*")

    def skip(at: int, *marks: str) -> int:
        at = space.match(text, at).end()  # type: ignore[union-attr]
        while at < len(text) and text[at] in marks:
            at = space.match(text, at + 1).end()  # type: ignore[union-attr]
        return at

    try:
        at = skip(0, "{")
        while at < len(text) and text[at] != "}":
            key, at = decoder.raw_decode(text, at)
            at = skip(at, ":")
            if key == "messages" and text.startswith("[", at):
                at = skip(at + 1)
                for _ in range(n - 1):
                    at = skip(decoder.raw_decode(text, at)[1], ",")
                return f"line {text.count(chr(10), 0, at) + 1}, message {n}"
            at = skip(decoder.raw_decode(text, at)[1], ",")
    except (ValueError, RecursionError):
        pass
    return f"message {n}"


# --- plain text -----------------------------------------------------------------------------

_SPEAKER = re.compile(r"^([^:\n]{1,64}):\s?(.*)$")


def _plain(file: Path, text: str, character_name: str, person_name: str | None) -> Transcript:
    lines: list[tuple[int, str, str, datetime | None]] = []  # (line, name, text, date)
    for number, line in _lines(file, text):
        at = None
        if bracket := _BRACKET.match(line):
            at = parse_date(bracket.group(1))
            line = line[bracket.end() :]
        match = _SPEAKER.match(line)
        if match and match.group(1).strip() and not match.group(1).startswith((" ", "\t")):
            _count(file, f"line {number}", len(lines) + 1)
            lines.append((number, match.group(1).strip(), match.group(2), at))
        elif line.strip() and lines:
            n, name, before, when = lines[-1]
            lines[-1] = (n, name, f"{before}\n{line.strip()}", when)
        elif line.strip():
            raise _fail(file, f"line {number}", "a transcript line starts with who speaks (Name: text).")
    names = list(dict.fromkeys(name for _, name, _, _ in lines))
    character = next((n for n in names if n.casefold() == character_name.casefold()), None)
    if person_name is not None:
        person = next((n for n in names if n.casefold() == person_name.casefold()), None)
        if person is None:
            raise _fail(file, "line 1", f"no line is said by {person_name}; the names are {', '.join(names[:5])}.")
    else:
        # The person speaks most after the character; a name seen once ("Note: …") is a line's start.
        ranked = Counter(name for _, name, _, _ in lines if name != character).most_common(2)
        if character is None or not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
            raise _fail(
                file, "line 1",
                f"cannot tell who is who among {', '.join(names[:5]) or 'no names'}: say which name is you with --name.",
            )  # fmt: skip
        person = ranked[0][0]
    if character is None:
        rest = [n for n in names if n != person]
        if len(rest) != 1:
            raise _fail(file, "line 1", f"cannot tell which name is {character_name} among {', '.join(rest[:5])}.")
        character = rest[0]
    said: list[Said] = []
    for _, name, content, at in lines:
        content = storable(content).strip()
        if name in (person, character) and content:
            said.append(Said("person" if name == person else "character", name, content, at))
        elif said and content:
            # "Note: …" inside a message is no third speaker: the line continues the one above.
            said[-1] = replace(said[-1], text=f"{said[-1].text}\n{name}: {content}")
    return Transcript("text", file, person, character, said, story=f"transcript:{file.name}")
