"""SillyTavern PNG cards: the card in a `chara` (V2) or `ccv3` (V3) text chunk plays the same
character as its JSON export; a PNG without a card, truncated, damaged or built to waste work
is refused with one sentence naming the file."""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
import zlib
from pathlib import Path

import pytest

from bot.characters.cast import load_cast
from bot.characters.character import load_character
from bot.characters.png_card import MAX_CHUNKS
from bot.errors import CharacterError
from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_chat
from tests.test_character import v2_card

BOOK = {
    "token_budget": 200,
    "scan_depth": 2,
    "entries": [
        {
            "keys": ["SOS"],
            "content": "The SOS Brigade meets in the literature club room.",
            "extensions": {},
            "enabled": True,
            "insertion_order": 0,
            "case_sensitive": True,
            "name": "brigade",
        },
    ],
}


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(*texts: tuple[bytes, bytes], kind: bytes = b"tEXt") -> bytes:
    """A 1×1 picture with the text chunks given as (keyword, text), as SillyTavern writes them."""
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    pixels = chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
    extra = b"".join(chunk(kind, keyword + b"\x00" + text) for keyword, text in texts)
    return b"\x89PNG\r\n\x1a\n" + header + extra + pixels + chunk(b"IEND", b"")


def b64(card: dict) -> bytes:
    return base64.b64encode(json.dumps(card).encode())


def v3_card() -> dict:
    card = v2_card(character_book=BOOK)
    return {**card, "spec": "chara_card_v3", "spec_version": "3.0"}


def book(character):
    lore = character.lore
    return None if lore is None else (lore.entries, lore.budget_chars, lore.scan_depth)


def same(a, b) -> None:
    """Every field alike but the file it came from (a Lorebook's matchers compare by identity)."""
    assert dataclasses.replace(a, source=None, lore=None) == dataclasses.replace(b, source=None, lore=None)
    assert book(a) == book(b)


def test_a_v2_png_card_is_the_character_of_its_json_export(tmp_path: Path) -> None:
    card = v2_card(character_book=BOOK)
    (tmp_path / "haruhi.json").write_text(json.dumps(card), encoding="utf-8")
    (tmp_path / "haruhi.png").write_bytes(png((b"chara", b64(card))))
    from_png = load_character(tmp_path / "haruhi.png")
    same(from_png, load_character(tmp_path / "haruhi.json"))
    assert from_png.name == "Haruhi" and from_png.lore is not None and from_png.lore.entries[0].name == "brigade"


def test_a_v3_png_card_is_read_from_ccv3_before_chara(tmp_path: Path) -> None:
    card = v3_card()
    older = v2_card(name="Old Haruhi")
    (tmp_path / "haruhi.json").write_text(json.dumps(card), encoding="utf-8")
    (tmp_path / "haruhi.png").write_bytes(png((b"chara", b64(older)), (b"ccv3", b64(card))))
    same(load_character(tmp_path / "haruhi.png"), load_character(tmp_path / "haruhi.json"))


@pytest.mark.parametrize("kind", [b"zTXt", b"iTXt"])
def test_a_card_in_a_compressed_or_international_text_chunk_is_read(tmp_path: Path, kind: bytes) -> None:
    card = v2_card()
    text = b"\x00" + zlib.compress(b64(card)) if kind == b"zTXt" else b"\x01\x00en\x00\x00" + zlib.compress(b64(card))
    (tmp_path / "haruhi.png").write_bytes(png((b"chara", text), kind=kind))
    assert load_character(tmp_path / "haruhi.png").name == "Haruhi"


def test_a_png_card_in_a_characters_folder_is_a_character_of_the_cast(tmp_path: Path) -> None:
    (tmp_path / "haruhi.png").write_bytes(png((b"chara", b64(v2_card()))))
    (tmp_path / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\n", encoding="utf-8")
    (tmp_path / "channels.yaml").write_text("default: lina\nchannels:\n  123: haruhi\n", encoding="utf-8")
    cast = load_cast(tmp_path, None)
    assert cast.characters["haruhi"].name == "Haruhi"


async def test_the_png_card_plays_the_same_character_as_its_json_export(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """The real `python -m bot chat`, once with each file: the model is sent the same prompt."""
    card = v3_card()
    (tmp_path / "haruhi.json").write_text(json.dumps(card), encoding="utf-8")
    (tmp_path / "haruhi.png").write_bytes(png((b"ccv3", b64(card))))
    prompts = []
    for name in ("haruhi.json", "haruhi.png"):
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        env = chat_env(llm_server.url, folder / "echo.sqlite3", CHARACTER_FILE=str(tmp_path / name))
        run = await run_chat(env, folder, b"Is the SOS Brigade meeting today?\n", user="Kyon")
        assert run.code == 0, run.stderr
        replies = [r for r in llm_server.chats if r.json_schema is None]
        prompts.append(replies[-1].messages)
    assert prompts[0] == prompts[1]
    system = "\n".join(m["content"] for m in prompts[1] if m["role"] == "system")
    assert "You are Haruhi." in system and "literature club room" in system


def truncated() -> bytes:
    whole = png((b"chara", b64(v2_card())))
    return whole[: len(whole) // 2]


def damaged() -> bytes:
    whole = bytearray(png((b"chara", b64(v2_card()))))
    at = whole.index(b"chara") + 10
    whole[at] ^= 0x01
    return bytes(whole)


def empty_chunks() -> bytes:
    filler = chunk(b"abCD", b"") * (MAX_CHUNKS + 1)
    return png()[:-12] + filler + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (png(), "a PNG without a character card"),
        (png((b"Comment", b"made with a paint program")), "a PNG without a character card"),
        (b"GIF89a not a png", "not a PNG image"),
        (truncated(), "truncated"),
        (damaged(), "damaged (bad CRC)"),
        (png((b"chara", b"not base64 !!")), "not base64 text"),
        (png((b"chara", base64.b64encode(b"\xff\xfe not utf-8"))), "does not hold UTF-8 text"),
        (png((b"chara", b"\x00" + zlib.compress(b"A" * 50_000_000)), kind=b"zTXt"), "larger than 1 MiB"),
        (png((b"chara", base64.b64encode(b"{not json"))), "invalid JSON"),
        (png((b"chara", b64({"name": "Zed"}))), "persona is empty"),
        (png((b"chara", b64({"spec": "chara_card_v2", "data": {"description": "A keeper."}}))), "missing data.name"),
        (empty_chunks(), f"more than {MAX_CHUNKS} chunks"),
    ],
)
def test_a_png_that_is_not_a_usable_card_is_refused_in_one_sentence(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "card.png"
    path.write_bytes(content)
    with pytest.raises(CharacterError) as caught:
        load_character(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and said in message and "\n" not in message
