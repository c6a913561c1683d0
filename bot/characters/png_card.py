"""The card inside a SillyTavern PNG character card: the JSON of a `ccv3` (V3) or `chara` (V2)
text chunk, base64-encoded.

Read with the standard library (struct, zlib, base64): only the chunk list is walked, the image
is never decoded, so no image library and its decoders are exposed to an untrusted file. The
work is bounded: the file by MAX_PNG_BYTES, each chunk by what remains of the file, the card's
text by MAX_CARD_BYTES (before and after base64, and through zlib for a compressed chunk, which
is inflated at most that far), and the walk stops at IEND.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from pathlib import Path

from bot.errors import CharacterError

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A card's picture is a few hundred KB to a few MB.
MAX_PNG_BYTES = 20 * 1024 * 1024
# The card's JSON, as a JSON card's file may be.
MAX_CARD_BYTES = 1024 * 1024
# Real images hold a few hundred chunks at most; a file of empty ones is built to waste time.
MAX_CHUNKS = 50_000
# SillyTavern writes both for a V3 card and reads ccv3 first.
CARD_KEYWORDS = (b"ccv3", b"chara")
_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")


def card_text(file: Path, data: bytes) -> str:
    """The card's JSON text in the PNG bytes `data`; CharacterError naming `file` otherwise."""
    if not data.startswith(SIGNATURE):
        raise CharacterError(f"{file}: not a PNG image (its first bytes are not PNG's signature).")
    found: dict[bytes, bytes] = {}
    at = len(SIGNATURE)
    for _ in range(MAX_CHUNKS):
        if at + 8 > len(data):
            raise CharacterError(f"{file}: the PNG is truncated (no IEND chunk); export the card again.")
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        end = at + 8 + length + 4
        if end > len(data):
            raise CharacterError(f"{file}: the PNG is truncated inside its {kind!r} chunk; export the card again.")
        body = data[at + 8 : at + 8 + length]
        if kind == b"IEND":
            break
        if kind in _TEXT_CHUNKS:
            (crc,) = struct.unpack(">I", data[end - 4 : end])
            if zlib.crc32(kind + body) != crc:
                raise CharacterError(f"{file}: the PNG's {kind.decode()} chunk is damaged (bad CRC).")
            keyword, text = _text_chunk(file, kind, body)
            if keyword in CARD_KEYWORDS and keyword not in found:
                found[keyword] = text
        at = end
    else:
        raise CharacterError(f"{file}: more than {MAX_CHUNKS} chunks; this is not a card's picture.")
    for keyword in CARD_KEYWORDS:
        if keyword in found:
            return _decode(file, keyword, found[keyword])
    raise CharacterError(
        f"{file}: a PNG without a character card (no 'chara' or 'ccv3' text chunk); "
        "export the character from SillyTavern as a PNG card, or as JSON."
    )


def _text_chunk(file: Path, kind: bytes, body: bytes) -> tuple[bytes, bytes]:
    keyword, sep, rest = body.partition(b"\x00")
    if not sep:
        raise CharacterError(f"{file}: a {kind.decode()} chunk has no keyword.")
    if keyword not in CARD_KEYWORDS:
        return keyword, b""
    if kind == b"tEXt":
        return keyword, rest
    if kind == b"zTXt":
        return keyword, _inflate(file, rest[1:])
    # iTXt: compression flag, method, language tag \0, translated keyword \0, text.
    if len(rest) < 2:
        raise CharacterError(f"{file}: an iTXt chunk is truncated.")
    compressed, text = rest[0], rest[2:]
    for _ in range(2):
        text = text.partition(b"\x00")[2]
    return keyword, _inflate(file, text) if compressed else text


def _inflate(file: Path, packed: bytes) -> bytes:
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(packed, MAX_CARD_BYTES + 1)
    except zlib.error as exc:
        raise CharacterError(f"{file}: the card's compressed text chunk is damaged ({exc}).") from None
    if len(text) > MAX_CARD_BYTES or inflater.unconsumed_tail:
        raise CharacterError(f"{file}: the card's text is larger than {MAX_CARD_BYTES // 1024 // 1024} MiB.")
    return text


def _decode(file: Path, keyword: bytes, text: bytes) -> str:
    name = keyword.decode()
    # base64 grows a text by a third.
    if len(text) > MAX_CARD_BYTES * 4 // 3 + 4:
        raise CharacterError(f"{file}: the card's {name!r} chunk is larger than {MAX_CARD_BYTES // 1024 // 1024} MiB.")
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise CharacterError(f"{file}: the card's {name!r} chunk is not base64 text.") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CharacterError(f"{file}: the card's {name!r} chunk does not hold UTF-8 text.") from None
