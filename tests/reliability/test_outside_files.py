"""Every file Écho reads from its settings or from another file goes through one guarded reader
(bot/clients/outside_files.py; the list of them is walked by test_outside_files_list.py).

Through the real `python -m bot chat`: a lore file, channels.yaml, a file of the characters folder
and .env that are a FIFO or /dev/zero, YAML whose aliases expand past what a file may hold (a
character, a lore file, channels.yaml, a World Info `.json` written as YAML), and cards nested
thousands deep (JSON, PNG, CHARX, YAML) end in the "Écho cannot start." paragraph naming the file, exit
2, no traceback, no hang, within seconds; sound files of each kind still load and answer.
"""

from __future__ import annotations

import base64
import json
import os
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_chat
from tests.test_character import v2_card
from tests.test_png_card import b64, png

CANNOT_START = "Écho cannot start."
# A guarded read ends at once; the bound is for a slow shared machine starting Python.
SECONDS = 30
# Levels of nesting the reader allows (bot.clients.outside_files.MAX_DEPTH).
MAX_DEPTH = 64


# --- what the attacks built ---------------------------------------------------------------------


def laughs(levels: int, width: int = 9) -> str:
    """YAML anchors, each level `width` aliases of the one before: width**levels values."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for n in range(1, levels):
        lines.append(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def character_naming(folder: Path, lore: str) -> str:
    path = folder / "lina.yaml"
    path.write_text(f"name: Lina\npersona: A sailor.\nlore: {lore}\n", encoding="utf-8")
    return str(path)


def lore_fifo(folder: Path) -> dict[str, str]:
    os.mkfifo(folder / "lore.yaml")
    return {"CHARACTER_FILE": character_naming(folder, "lore.yaml")}


def lore_dev_zero(folder: Path) -> dict[str, str]:
    (folder / "lore.yaml").symlink_to("/dev/zero")
    return {"CHARACTER_FILE": character_naming(folder, "lore.yaml")}


def lore_laughs(folder: Path) -> dict[str, str]:
    (folder / "lore.yaml").write_text("entries: []\n" + laughs(9), encoding="utf-8")
    return {"CHARACTER_FILE": character_naming(folder, "lore.yaml")}


def world_info_json_as_yaml(folder: Path) -> dict[str, str]:
    # A .json World Info file that is YAML with aliases: read as JSON, it is simply not JSON.
    (folder / "world.json").write_text(laughs(9) + "entries: {}\n", encoding="utf-8")
    return {"CHARACTER_FILE": character_naming(folder, "world.json")}


def character_laughs(folder: Path) -> dict[str, str]:
    path = folder / "laughs.yaml"
    path.write_text(laughs(9) + "name: X\npersona: p\n", encoding="utf-8")
    assert len(path.read_bytes()) < 1024  # the attack's size: under a kilobyte
    return {"CHARACTER_FILE": str(path)}


def nested_json_card(folder: Path) -> dict[str, str]:
    path = folder / "deep.json"
    path.write_text('{"name": "X", "description": ' + "[" * 3000 + "]" * 3000 + "}", encoding="utf-8")
    return {"CHARACTER_FILE": str(path)}


def nested_png_card(folder: Path) -> dict[str, str]:
    deep = json.dumps(v2_card()).replace('"description": ', '"x": ' + "[" * 3000 + "]" * 3000 + ', "description": ', 1)
    path = folder / "deep.png"
    path.write_bytes(png((b"chara", base64.b64encode(deep.encode()))))
    return {"CHARACTER_FILE": str(path)}


def nested_charx_card(folder: Path) -> dict[str, str]:
    deep = json.dumps(v2_card()).replace('"description": ', '"x": ' + "[" * 3000 + "]" * 3000 + ', "description": ', 1)
    path = folder / "deep.charx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("card.json", deep)
    return {"CHARACTER_FILE": str(path)}


def charx_fifo(folder: Path) -> dict[str, str]:
    os.mkfifo(folder / "card.charx")
    return {"CHARACTER_FILE": str(folder / "card.charx")}


def nested_yaml_character(folder: Path) -> dict[str, str]:
    path = folder / "deep.yaml"
    path.write_text("name: X\npersona: p\nstate: " + "[" * 3000 + "]" * 3000 + "\n", encoding="utf-8")
    return {"CHARACTER_FILE": str(path)}


def _folder_with(folder: Path) -> Path:
    cast = folder / "cast"
    cast.mkdir()
    (cast / "lina.yaml").write_text("name: Lina\npersona: A sailor.\n", encoding="utf-8")
    return cast


def channels_fifo(folder: Path) -> dict[str, str]:
    cast = _folder_with(folder)
    os.mkfifo(cast / "channels.yaml")
    return {"CHARACTERS_DIR": str(cast)}


def folder_file_fifo(folder: Path) -> dict[str, str]:
    cast = _folder_with(folder)
    os.mkfifo(cast / "marc.yaml")
    return {"CHARACTERS_DIR": str(cast)}


def channels_laughs(folder: Path) -> dict[str, str]:
    cast = _folder_with(folder)
    (cast / "channels.yaml").write_text(laughs(9) + "default: lina\n", encoding="utf-8")
    return {"CHARACTERS_DIR": str(cast)}


def env_fifo(folder: Path) -> dict[str, str]:
    os.mkfifo(folder / ".env")  # the process runs in `folder`: .env is read from there
    return {}


# (what, the settings it makes in the test's folder, what the paragraph must say)
ATTACKS: list[tuple[str, Callable[[Path], dict[str, str]], str]] = [
    ("lore file: a FIFO", lore_fifo, "lore.yaml: not a regular file"),
    ("lore file: /dev/zero", lore_dev_zero, "lore.yaml: not a regular file"),
    ("lore file: aliases", lore_laughs, "aliases expand to more than"),
    ("World Info .json written as YAML with aliases", world_info_json_as_yaml, "world.json: invalid JSON"),
    ("character: 9 levels of aliases in under 1 KB", character_laughs, "aliases expand to more than"),
    ("JSON card nested 3000 deep", nested_json_card, f"deep.json: nested deeper than {MAX_DEPTH} levels"),
    ("PNG card nested 3000 deep", nested_png_card, f"deep.png: nested deeper than {MAX_DEPTH} levels"),
    ("YAML character nested 3000 deep", nested_yaml_character, f"deep.yaml: nested deeper than {MAX_DEPTH} levels"),
    ("CHARX card nested 3000 deep", nested_charx_card, f"deep.charx: nested deeper than {MAX_DEPTH} levels"),
    ("CHARX card: a FIFO", charx_fifo, "card.charx: not a regular file"),
    ("channels.yaml: a FIFO", channels_fifo, "channels.yaml: not a regular file"),
    ("channels.yaml: aliases", channels_laughs, "aliases expand to more than"),
    ("a FIFO in the characters folder", folder_file_fifo, "marc.yaml: not a regular file"),
    (".env: a FIFO", env_fifo, ".env: not a regular file"),
]


@pytest.mark.parametrize(("what", "make", "said"), ATTACKS, ids=[a[0] for a in ATTACKS])
async def test_an_outside_file_that_attacks_ends_the_start_in_one_sentence(
    what: str, make: Callable[[Path], dict[str, str]], said: str, tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    settings = make(tmp_path)
    env = chat_env(llm_server.url, tmp_path / "echo.sqlite3", **settings)
    started = time.monotonic()
    run = await run_chat(env, tmp_path, b"Bonjour\n", timeout=SECONDS)
    took = time.monotonic() - started
    assert run.code == 2, f"{what}: exit {run.code} after {took:.0f} s: {run.stderr[-1500:]!r}"
    assert CANNOT_START in run.stderr and said in run.stderr, run.stderr[-1500:]
    assert "Traceback" not in run.stderr and "RecursionError" not in run.stderr, run.stderr[-3000:]


async def test_sound_files_of_every_kind_still_load(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    """The control: a character naming a lore file, a folder with channels.yaml, a .env, a PNG
    card, each well-formed (aliases used the ordinary way included), start and answer."""
    (tmp_path / "lore.yaml").write_text(
        "entries:\n  - &port {name: Port, keys: [port], content: The port., case_sensitive: false}\n"
        "  - {<<: *port, name: Quay, keys: [quay]}\n",
        encoding="utf-8",
    )
    cast = _folder_with(tmp_path)
    (cast / "marc.yaml").write_text("name: Marc\npersona: A baker.\n", encoding="utf-8")
    (cast / "channels.yaml").write_text("default: lina\nchannels: {345678901234567890: marc}\n", encoding="utf-8")
    (tmp_path / ".env").write_text("LOG_LEVEL=INFO\n", encoding="utf-8")
    (tmp_path / "card.png").write_bytes(png((b"chara", b64(v2_card()))))
    llm_server.handler = lambda r: "{}" if r.json_schema is not None else "Bonjour !"
    for settings in (
        {"CHARACTER_FILE": character_naming(tmp_path, "lore.yaml")},
        {"CHARACTERS_DIR": str(cast)},
        {"CHARACTER_FILE": str(tmp_path / "card.png")},
    ):
        run = await run_chat(chat_env(llm_server.url, tmp_path / "echo.sqlite3", **settings), tmp_path, b"Bonjour\n")
        assert run.code == 0 and "Bonjour !" in run.stdout, (settings, run.stderr[-2000:])
