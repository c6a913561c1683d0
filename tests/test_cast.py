"""The cast: a folder of characters, who speaks where, whose memory is whose, and that erase
and export cover every key of a person."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bot.cast import Cast, load_cast
from bot.character import CharacterError, load_character
from bot.config import load_settings
from bot.engine import Engine, Incoming
from bot.llm import LLMClient
from bot.memory.store import owner_keys
from tests.fakes.llm_server import FAKE_MODEL


def folder(tmp_path: Path, mapping: str = "") -> Path:
    cast = tmp_path / "cast"
    cast.mkdir()
    (cast / "lina.yaml").write_text("name: Lina\npersona: A sailor.\n", encoding="utf-8")
    (cast / "marc.yaml").write_text("name: Marc\npersona: A smith.\navatar: https://x.invalid/m.png\n", encoding="utf-8")
    (cast / "nora.yaml").write_text("name: Nora\npersona: A neighbour.\nmemory: shared\n", encoding="utf-8")
    (cast / "lore.yaml").write_text("entries:\n  - keys: [forge]\n    content: The forge is old.\n", encoding="utf-8")
    if mapping:
        (cast / "channels.yaml").write_text(mapping, encoding="utf-8")
    return cast


def test_without_a_folder_the_cast_is_the_one_character_file():
    cast = load_cast(None, None)
    assert list(cast.characters) == ["default"] and cast.default.name == "Écho" and not cast.from_folder
    assert cast.memory_key("42", cast.default) == "42"


def test_channels_then_categories_then_servers_then_the_default(tmp_path):
    cast = load_cast(folder(tmp_path, "default: nora\nservers: {1: lina}\ncategories: {2: marc}\nchannels: {3: nora, 4: lina}\n"), None)
    assert sorted(cast.characters) == ["lina", "marc", "nora"], "a lore file beside them is not a character"
    assert cast.for_place(channel_id=3, category_id=2, guild_id=1).key == "nora"
    assert cast.for_place(channel_id=9, parent_id=4, category_id=2, guild_id=1).key == "lina", "a thread takes its channel's"
    assert cast.for_place(channel_id=9, category_id=2, guild_id=1).key == "marc"
    assert cast.for_place(channel_id=9, guild_id=1).key == "lina"
    assert cast.for_place(channel_id=9, guild_id=7).key == "nora"
    assert cast.characters["marc"].avatar_url == "https://x.invalid/m.png"


def test_memory_keys_isolate_characters_unless_they_share(tmp_path):
    cast = load_cast(folder(tmp_path, "default: lina\n"), None)
    lina, marc, nora = (cast.characters[k] for k in ("lina", "marc", "nora"))
    assert cast.memory_key("42", lina) == "42"
    assert cast.memory_key("42", nora) == "42", "memory: shared uses the default's"
    assert cast.memory_key("42", marc) == "42@marc"
    assert cast.character_of_key("42@marc") is marc and cast.character_of_key("42") is lina
    assert cast.user_of_key("42@marc") == "42"


@pytest.mark.parametrize(
    ("mapping", "problem"),
    [
        ("channels: {3: zorro}\n", "names 'zorro', which is none of the characters"),
        ("channels: {general: lina}\n", "is not a Discord id"),
        ("default: zorro\n", "default names 'zorro'"),
        ("chanels: {}\n", "unknown key 'chanels'"),
    ],
)
def test_a_bad_mapping_stops_the_bot_with_a_clear_reason(tmp_path, mapping, problem):
    with pytest.raises(CharacterError, match=problem):
        load_cast(folder(tmp_path, mapping), None)


def test_two_characters_with_one_name_are_refused(tmp_path):
    cast = folder(tmp_path)
    (cast / "lina2.yaml").write_text("name: Lina\npersona: Another.\n", encoding="utf-8")
    with pytest.raises(CharacterError, match="two characters are named 'Lina'"):
        load_cast(cast, None)


async def test_erase_and_export_of_a_person_cover_every_character_key_and_no_one_else(db, llm_server, tmp_path):
    cast = load_cast(folder(tmp_path, "default: lina\n"), None)
    config = load_settings(_env_file=None, llm_base_url=llm_server.url, llm_model=FAKE_MODEL, database_path=tmp_path / "x.db")
    async with httpx.AsyncClient(trust_env=False) as http:
        llm = LLMClient(http, api="ollama", base_url=llm_server.url)
        engine = Engine(db=db, llm=llm, embedder=None, settings=config, character=cast.default, cast=cast)
        await engine.start()
        llm_server.handler = lambda r: "{}" if r.json_schema is not None else "ok"
        for user in ("42", "420", "4_2"):
            for key in ("lina", "marc"):
                owner = cast.memory_key(user, cast.characters[key])
                await engine.remember(owner, f"L'utilisateur {user} parle à {key}.", story_id="c", place="g")
                await engine.turn(Incoming(user_id=owner, user_name="A", text="salut", story_id="c", place="g", character=key))
        assert await owner_keys(db, "42") == ["42", "42@marc"]
        assert await owner_keys(db, "4_2") == ["4_2", "4_2@marc"], "LIKE wildcards in an id are escaped"
        exported = await engine.export_person("42")
        assert [m["text"] for m in exported["memories"]] == ["L'utilisateur 42 parle à lina."]
        assert [m["text"] for m in exported["characters"]["marc"]["memories"]] == ["L'utilisateur 42 parle à marc."]
        report = await engine.erase_person("42")
        assert report.memories == 2
        assert await owner_keys(db, "42") == ["42"]
        assert len(await engine.store.list("420@marc")) == 1 and len(await engine.store.list("420")) == 1
        async with db.reader.execute("SELECT COUNT(*) FROM exchanges WHERE user_id LIKE '42%'") as cur:
            assert (await cur.fetchone())[0] == 2, "only 420's two exchanges are left"


def test_a_card_declares_its_avatar_and_shared_memory_in_its_echo_extension(tmp_path):
    import json

    card = {
        "spec": "chara_card_v2", "spec_version": "2.0",
        "data": {"name": "Haruhi", "description": "Chief.", "extensions": {"echo": {"avatar": "https://x.invalid/h.png", "memory": "shared"}}},
    }
    (tmp_path / "h.json").write_text(json.dumps(card), encoding="utf-8")
    haruhi = load_character(tmp_path / "h.json")
    assert (haruhi.avatar_url, haruhi.shares_memory) == ("https://x.invalid/h.png", True)


def test_cast_single_keeps_the_default_key():
    echo = load_character(None)
    assert Cast.single(echo).default is echo
