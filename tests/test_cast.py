"""The cast: a folder of characters, who speaks where, whose memory is whose, and that erase
and export cover every key of a person."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.characters.cast import Cast, load_cast
from bot.characters.character import load_character
from bot.engine import Incoming
from bot.errors import CharacterError
from bot.memory.stores.owners import owner_keys
from tests.builders import http_client, make_engine


def folder(tmp_path: Path, mapping: str = "") -> Path:
    cast = tmp_path / "cast"
    cast.mkdir()
    (cast / "lina.yaml").write_text("name: Lina\npersona: A sailor.\n", encoding="utf-8")
    (cast / "marc.yaml").write_text(
        "name: Marc\npersona: A smith.\navatar: https://x.invalid/m.png\n", encoding="utf-8"
    )
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
    cast = load_cast(
        folder(tmp_path, "default: nora\nservers: {1: lina}\ncategories: {2: marc}\nchannels: {3: nora, 4: lina}\n"),
        None,
    )
    assert sorted(cast.characters) == ["lina", "marc", "nora"], "a lore file beside them is not a character"
    assert cast.for_place(channel_id=3, category_id=2, guild_id=1).key == "nora"
    assert cast.for_place(channel_id=9, parent_id=4, category_id=2, guild_id=1).key == "lina", (
        "a thread takes its channel's"
    )
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


async def test_erase_and_export_of_a_person_cover_every_character_key_and_no_one_else(db, llm_server, tmp_path, store):
    cast = load_cast(folder(tmp_path, "default: lina\n"), None)
    async with http_client() as http:
        engine = make_engine(db, http, llm_server, tmp_path, cast=cast)
        await engine.start()
        llm_server.handler = lambda r: "{}" if r.json_schema is not None else "ok"
        for user in ("42", "420", "4_2"):
            for key in ("lina", "marc"):
                owner = cast.memory_key(user, cast.characters[key])
                await engine.memories.remember(owner, f"L'utilisateur {user} parle à {key}.", story_id="c", place="g")
                await engine.conversation.turn(
                    Incoming(user_id=owner, user_name="A", text="salut", story_id="c", place="g", character=key)
                )
        assert await owner_keys(db, "42") == ["42", "42@marc"]
        assert await owner_keys(db, "4_2") == ["4_2", "4_2@marc"], "LIKE wildcards in an id are escaped"
        exported = await engine.privacy.export_person("42")
        assert [m["text"] for m in exported["memories"]] == ["L'utilisateur 42 parle à lina."]
        assert [m["text"] for m in exported["characters"]["42@marc"]["memories"]] == ["L'utilisateur 42 parle à marc."]
        report = await engine.privacy.erase_person("42")
        assert report.memories == 2
        assert await owner_keys(db, "42") == ["42"]
        assert len(await store.list("420@marc")) == 1 and len(await store.list("420")) == 1
        async with db.reader.execute("SELECT COUNT(*) FROM exchanges WHERE user_id LIKE '42%'") as cur:
            assert (await cur.fetchone())[0] == 2, "only 420's two exchanges are left"


def test_a_card_declares_its_avatar_and_shared_memory_in_its_echo_extension(tmp_path):
    import json

    card = {
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {
            "name": "Haruhi",
            "description": "Chief.",
            "extensions": {"echo": {"avatar": "https://x.invalid/h.png", "memory": "shared"}},
        },
    }
    (tmp_path / "h.json").write_text(json.dumps(card), encoding="utf-8")
    haruhi = load_character(tmp_path / "h.json")
    assert (haruhi.avatar_url, haruhi.shares_memory) == ("https://x.invalid/h.png", True)


def test_cast_single_keeps_the_default_key():
    echo = load_character(None)
    assert Cast.single(echo).default is echo


async def test_an_erase_stops_a_turn_in_flight_under_a_character_key_and_edits_find_its_message(
    db, llm_server, tmp_path
):
    """The erase counter is the person's: a turn with Marc (key 42@marc, holding nothing yet)
    waiting for the LLM writes nothing after /erase-me; and an edit by the author (Discord id
    42) reaches the exchange kept under 42@marc."""
    import asyncio

    from tests.fakes.llm_server import LLMRequest

    cast = load_cast(folder(tmp_path, "default: lina\n"), None)
    arrived, release = asyncio.Event(), asyncio.Event()

    async def answer(request: LLMRequest) -> str:
        if request.json_schema is not None:
            return "{}"
        if "Zorglub" in str(request.messages):
            arrived.set()
            await release.wait()
        return "ok"

    async with http_client() as http:
        engine = make_engine(db, http, llm_server, tmp_path, cast=cast)
        await engine.start()
        llm_server.handler = answer
        marc = cast.memory_key("42", cast.characters["marc"])
        await engine.conversation.turn(
            Incoming(
                user_id=marc, user_name="A", text="salut", story_id="c", place="g", character="marc", message_id="m-1"
            )
        )
        assert await engine.conversation.message_edited("m-1", "bonjour", author="42") == "reflected as edited"
        assert await engine.conversation.message_edited("m-1", "bonsoir", author="7") == "unknown", (
            "only its author's edit counts"
        )

        await engine.privacy.erase_person("42")
        turn = asyncio.create_task(
            engine.conversation.turn(
                Incoming(user_id=marc, user_name="A", text="Zorglub", story_id="c", place="g", character="marc")
            )
        )
        await asyncio.wait_for(arrived.wait(), 10)
        await engine.privacy.erase("42")  # the person's own key only: the Marc turn must stop all the same
        release.set()
        assert (await asyncio.wait_for(turn, 10)).reply == "ok"
        await engine.conversation.wait_recorded(marc)
        await engine.operator.wait_background(10)
        async with db.reader.execute("SELECT reply FROM exchanges WHERE user_id = ?", (marc,)) as cur:
            assert [r[0] for r in await cur.fetchall()] == [None], "the answer given after the erase is not kept"
        async with db.reader.execute("SELECT COUNT(*) FROM turn_log WHERE user_id = ?", (marc,)) as cur:
            assert (await cur.fetchone())[0] == 0, "nor is the turn logged"
        await engine.privacy.erase_person("42")
        assert await owner_keys(db, "42") == ["42"]
        await engine.close()


def test_buttons_carry_the_character_owner_key_and_only_its_person_may_press_them(tmp_path):
    from cogs.utils.views import EditButton, ForgetButton, ReceiptButton, SwipeButton, owner_in

    for cls, custom_id in (
        (SwipeButton, "echo:swipe:prev:42@marc:7"),
        (ReceiptButton, "echo:receipt:42@marc:7"),
        (ForgetButton, "echo:forget:42@marc:7"),
        (EditButton, "echo:edit:42@marc:7"),
    ):
        match = cls.__discord_ui_compiled_template__.fullmatch(custom_id)
        assert match is not None and match["user"] == "42@marc", custom_id
        assert cls.__discord_ui_compiled_template__.fullmatch(custom_id.replace("42@marc", "42")) is not None
    assert ReceiptButton("42@marc", 7).item.custom_id == "echo:receipt:42@marc:7"
    cast = load_cast(folder(tmp_path, "default: lina\n"), None)
    assert owner_in("echo:forget:42@marc:7", 42, cast) == "42@marc" and owner_in("echo:forget:42:7", 42, cast) == "42"
    assert owner_in("echo:forget:42@marc:7", 43, cast) is None
    assert owner_in("echo:forget:42@nora:7", 42, cast) is None, "nora shares the default's key: 42@nora is none"


async def test_export_files_retired_characters_by_their_stored_key_and_erase_covers_the_same_keys(
    db, http, llm_server, tmp_path
):
    """Two characters with their own memory are removed from the folder: neither overwrites the
    other in the export, and /erase-me deletes exactly the keys /export showed."""
    cast_dir = folder(tmp_path, "default: lina\n")
    (cast_dir / "zoe.yaml").write_text("name: Zoe\npersona: A baker.\n", encoding="utf-8")
    before = load_cast(cast_dir, None)
    engine = make_engine(db, http, llm_server, tmp_path, cast=before)
    await engine.start()
    for key in ("lina", "marc", "zoe"):
        await engine.memories.remember(
            before.memory_key("42", before.characters[key]), f"42 parle à {key}.", story_id="c", place="g"
        )
    await engine.close()
    (cast_dir / "marc.yaml").unlink()
    (cast_dir / "zoe.yaml").unlink()
    after = load_cast(cast_dir, None)
    engine = make_engine(db, http, llm_server, tmp_path, cast=after)
    await engine.start()
    exported = await engine.privacy.export_person("42")
    assert exported["user_id"] == "42"
    assert [m["text"] for m in exported["memories"]] == ["42 parle à lina."]
    filed = {key: [m["text"] for m in data["memories"]] for key, data in exported["characters"].items()}
    assert filed == {"42@marc": ["42 parle à marc."], "42@zoe": ["42 parle à zoe."]}
    assert all(data["user_id"] == key for key, data in exported["characters"].items())
    keys = await owner_keys(db, "42")
    assert keys == [exported["user_id"], *exported["characters"]], "export and erase cover the same keys"
    report = await engine.privacy.erase_person("42")
    assert report.memories == 3
    assert await owner_keys(db, "42") == ["42"]
    assert (await engine.privacy.export_person("42"))["characters"] == {}
    await engine.close()
