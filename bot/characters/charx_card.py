"""The card inside a CHARX file (Character Card V3's zip): its `card.json`, at the zip's root.

Read with the standard library's zipfile within the bounds of a PNG card (bot/characters/
png_card.py): the file by MAX_PNG_BYTES (read before the zip is opened), the number of members
by MAX_CHUNKS, and `card.json` by MAX_CARD_BYTES, inflated no further whatever size the zip
declares. The assets beside it (pictures, sounds, models) are never read.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from bot.characters.png_card import MAX_CARD_BYTES, MAX_CHUNKS
from bot.errors import CharacterError

CARD_MEMBER = "card.json"


def charx_text(file: Path, data: bytes) -> str:
    """The card's JSON text in the CHARX bytes `data`; CharacterError naming `file` otherwise."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError):
        raise CharacterError(f"{file}: not a CHARX card (not a zip file); export the card again.") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_CHUNKS:
            raise CharacterError(f"{file}: more than {MAX_CHUNKS} files in the zip; this is not a card.")
        if CARD_MEMBER not in {m.filename for m in members}:
            raise CharacterError(f"{file}: a zip without card.json at its root; a CHARX card holds one.")
        try:
            with archive.open(CARD_MEMBER) as member:
                raw = member.read(MAX_CARD_BYTES + 1)
        except RuntimeError:  # encrypted
            raise CharacterError(f"{file}: card.json is encrypted; export the card without a password.") from None
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise CharacterError(f"{file}: card.json cannot be read from the zip ({exc}).") from None
    if len(raw) > MAX_CARD_BYTES:
        raise CharacterError(f"{file}: card.json is larger than {MAX_CARD_BYTES // 1024 // 1024} MiB.")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CharacterError(f"{file}: card.json is not UTF-8 text.") from None
