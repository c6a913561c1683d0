"""SillyTavern cards as SillyTavern reads them: line endings, macros, the V2/V3 fields honoured or
named as ignored, CHARX zips within a PNG's bounds, and SillyTavern's default card's lore brought
in by a question about each entry. The last tests play each card through the real chat and read
the request the scripted model receives: nothing raw in it."""

from __future__ import annotations

import io
import json
import re
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.characters.character import CHAR, USER, fill_turn, load_character, render_character_prompt
from bot.characters.macros import TurnValues
from bot.characters.png_card import MAX_CARD_BYTES, MAX_PNG_BYTES
from bot.errors import CharacterError
from tests.fakes.llm_server import FakeLLMServer
from tests.reliability.process import chat_env, run_chat
from tests.test_character import v2_card
from tests.test_png_card import b64, png

DATA = Path(__file__).parent / "data" / "sillytavern"
NOW = datetime(2026, 1, 2, 20, 30, tzinfo=UTC)


def turn(user: str = "Kyon", seed: str = "s") -> TurnValues:
    return TurnValues(user, NOW, seed=seed, story="c")


def crlf_card() -> dict[str, Any]:
    """A card as a Windows editor saves it: every line ends with \\r\\n."""
    card = v2_card()
    card["data"] = {k: v.replace("\n", "\r\n") if isinstance(v, str) else v for k, v in card["data"].items()}
    return card


def macro_card() -> dict[str, Any]:
    return v2_card(
        description="{{char}} leads the brigade. <BOT> drags <USER> into schemes.{{// the author's note}} {{getvar::mood}}",
        personality="loud",
        first_mes="{{random::Yo::Hey}}, {{user}}! It is {{time}} on {{weekday}}.",
        mes_example="<START>\n{{user}}: roll for me\n{{char}}: You rolled {{roll:1d6}}.{{newline}}Again!",
        system_prompt="{{original}} Today is {{date}}. {{char}} is {{personality}}.",
        post_history_instructions="Remember {{user}} picked {{pick::red::blue}}.",
        extensions={
            "depth_prompt": {"prompt": "{{char}} keeps the club's secrets from {{user}}.", "depth": 2, "role": "system"}
        },
        character_book={
            "entries": [
                {
                    "keys": ["brigade"],
                    "content": "{{char}} founded the brigade for {{user}} at {{isotime}}.",
                    "enabled": True,
                    "insertion_order": 1,
                    "extensions": {},
                },
            ]
        },
    )


def charx(card: dict[str, Any], *, extra: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("card.json", json.dumps(card))
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return buffer.getvalue()


# --- line endings and macros ----------------------------------------------------------------------


def test_a_card_saved_with_windows_line_endings_reads_as_the_same_card(tmp_path: Path) -> None:
    (tmp_path / "unix.json").write_text(json.dumps(v2_card()), encoding="utf-8")
    (tmp_path / "windows.json").write_text(json.dumps(crlf_card()), encoding="utf-8")
    unix, windows = load_character(tmp_path / "unix.json"), load_character(tmp_path / "windows.json")
    assert (
        windows.example_dialogue
        == unix.example_dialogue
        == [
            (USER, "hi"),
            (CHAR, "hello"),
            (USER, "what now?"),
            (CHAR, "We find aliens.\nObviously."),
        ]
    )
    prompt = render_character_prompt(windows, turn())
    assert "<START>" not in prompt and "\r" not in prompt


def test_every_macro_is_replaced_or_removed_and_the_unknown_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "card.json").write_text(json.dumps(macro_card()), encoding="utf-8")
    haruhi = load_character(tmp_path / "card.json")
    values = turn()
    prompt = render_character_prompt(haruhi, values)
    texts = [
        prompt,
        fill_turn(haruhi.greeting, values),
        fill_turn(haruhi.post_history_instructions, values),
        fill_turn(haruhi.depth_prompt, values),
    ]
    assert not any(re.search(r"\{\{|\}\}|<user>|<bot>", t, re.IGNORECASE) for t in texts), texts
    assert "Haruhi leads the brigade. Haruhi drags Kyon into schemes." in prompt
    assert "the author's note" not in prompt
    assert "Today is January 2, 2026. Haruhi is loud." in prompt
    assert re.search(r"You rolled [1-6]\.\nAgain!", prompt)
    assert re.fullmatch(r"(Yo|Hey), Kyon! It is 20:30 on Friday\.", texts[1])
    assert re.fullmatch(r"Remember Kyon picked (red|blue)\.", texts[2])
    assert haruhi.ignored == ("data.alternate_greetings (1)", "{{getvar}}")
    assert texts[1] == fill_turn(haruhi.greeting, turn()), "the same turn draws the same"


def test_a_v3_card_calls_its_character_by_its_nickname(tmp_path: Path) -> None:
    card = {
        **v2_card(nickname="Suzumiya", description="{{char}} is the chief."),
        "spec": "chara_card_v3",
        "spec_version": "3.0",
    }
    (tmp_path / "card.json").write_text(json.dumps(card), encoding="utf-8")
    haruhi = load_character(tmp_path / "card.json")
    assert haruhi.name == "Haruhi" and haruhi.persona.startswith("Suzumiya is the chief.")


def test_the_fields_echo_leaves_aside_are_named_and_the_depth_prompt_is_honoured(tmp_path: Path) -> None:
    card = {
        **v2_card(
            alternate_greetings=["Yo.", "Hey."],
            group_only_greetings=["All of you!"],
            brand_new_field=1,
            extensions={
                "depth_prompt": {"prompt": "Stay brief.", "depth": 3, "role": "user"},
                "regex_scripts": [{"x": 1}],
            },
        ),
        "spec": "chara_card_v3",
        "spec_version": "3.0",
    }
    (tmp_path / "card.json").write_text(json.dumps(card), encoding="utf-8")
    haruhi = load_character(tmp_path / "card.json")
    assert (haruhi.depth_prompt, haruhi.depth_prompt_depth) == ("Stay brief.", 3)
    assert set(haruhi.ignored) == {
        "data.alternate_greetings (2)",
        "data.group_only_greetings (1)",
        "data.brand_new_field",
        "data.extensions.regex_scripts",
        "data.extensions.depth_prompt.role (it goes in as the system's text)",
    }


# --- CHARX ------------------------------------------------------------------------------------------


def test_a_charx_card_is_the_character_of_its_card_json(tmp_path: Path) -> None:
    card = {**v2_card(), "spec": "chara_card_v3", "spec_version": "3.0"}
    (tmp_path / "haruhi.charx").write_bytes(
        charx(card, extra={"assets/icon/images/main.png": png(), "module.risum": b"\x00" * 100})
    )
    (tmp_path / "haruhi.json").write_text(json.dumps(card), encoding="utf-8")
    from_zip, from_json = load_character(tmp_path / "haruhi.charx"), load_character(tmp_path / "haruhi.json")
    assert (from_zip.name, from_zip.persona, from_zip.example_dialogue) == (
        from_json.name,
        from_json.persona,
        from_json.example_dialogue,
    )


def zip_bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("card.json", b" " * (MAX_CARD_BYTES + 10))
    return buffer.getvalue()


def many_members() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("card.json", json.dumps(v2_card()))
        for n in range(50_001):
            archive.writestr(f"a/{n}", b"")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"PK\x03\x04 not really", "not a CHARX card"),
        (b"plain text", "not a CHARX card"),
        (None, "without card.json"),
        ("bomb", "card.json is larger than 1 MiB"),
        ("members", "more than 50000 files"),
    ],
)
def test_a_charx_that_is_not_a_usable_card_is_refused_in_one_sentence(tmp_path: Path, content: Any, said: str) -> None:
    if content is None:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("assets/x.png", b"x")
        content = buffer.getvalue()
    elif content == "bomb":
        content = zip_bomb()
        assert len(content) < 10_000, "a small file that inflates past the bound"
    elif content == "members":
        content = many_members()
    (tmp_path / "card.charx").write_bytes(content)
    with pytest.raises(CharacterError) as caught:
        load_character(tmp_path / "card.charx")
    assert str(caught.value).startswith(f"{tmp_path / 'card.charx'}: ") and said in str(caught.value)


def test_a_charx_larger_than_a_png_card_may_be_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    with (tmp_path / "big.charx").open("wb") as file:
        file.truncate(MAX_PNG_BYTES + 1)
    with pytest.raises(CharacterError, match="larger than 20 MiB, the most a CHARX card may be"):
        load_character(tmp_path / "big.charx")


# --- SillyTavern's default card, in its shape -----------------------------------------------------------


QUESTIONS = {
    "veyl": "Where exactly is this forest?",
    "gloomhound": "What were those beasts that attacked me?",
    "glade": "Why is this glade so safe?",
    "power": "How does your magic work?",
}
# A phrase of each entry, as it reaches the model.
PHRASES = {
    "veyl": "the old wood that covers these hills",
    "gloomhound": "They hunt in threes and they do not tire.",
    "glade": "Because this is the glade, and the glade is kept.",
    "power": "The wood lends me a little of its strength",
}


def test_with_the_default_settings_a_question_about_each_entry_brings_it_in() -> None:
    from bot.config import load_settings

    settings = load_settings(_env_file=None).engine
    card = load_character(DATA / "ysolde_card.json")
    assert card.lore is not None
    assert sum(e.cost for e in card.lore.entries) <= settings.lore_budget_chars, (
        "the whole book fits the default budget"
    )
    for name, question in QUESTIONS.items():
        hits = card.lore.match(
            [question], budget_chars=settings.lore_budget_chars, scan_depth=settings.lore_scan_depth
        ).hits
        assert name in [h.name for h in hits if h.kept], question


# --- through the real chat --------------------------------------------------------------------------------


def requests(llm_server: FakeLLMServer) -> list[str]:
    return [json.dumps(r.messages, ensure_ascii=False) for r in llm_server.chats if r.json_schema is None]


@pytest.mark.parametrize("kind", ["crlf", "macros", "charx"])
async def test_a_card_plays_through_the_real_chat_with_nothing_raw_in_the_request(
    tmp_path: Path, llm_server: FakeLLMServer, kind: str
) -> None:
    if kind == "charx":
        path = tmp_path / "haruhi.charx"
        path.write_bytes(charx({**macro_card(), "spec": "chara_card_v3", "spec_version": "3.0"}))
    else:
        path = tmp_path / "haruhi.json"
        path.write_text(json.dumps(crlf_card() if kind == "crlf" else macro_card()), encoding="utf-8")
    llm_server.handler = lambda r: "{}" if r.json_schema is not None else "Fine."
    env = chat_env(llm_server.url, tmp_path / "echo.sqlite3", CHARACTER_FILE=str(path))
    run = await run_chat(env, tmp_path, b"Tell me about the brigade.\nAnd what now?\n")
    assert run.code == 0, run.stderr
    sent = requests(llm_server)
    assert len(sent) == 2
    for request in sent:
        assert not re.search(r"\{\{|\}\}|<user>|<bot>|<START>|\\r", request, re.IGNORECASE), request
        assert "Haruhi" in request and "alice" in request
    if kind != "crlf":
        assert "Haruhi founded the brigade for alice" in sent[0], "the lore's macros too"
        assert "Haruhi keeps the club's secrets from alice." in sent[0], "the depth prompt"


async def test_sillytaverns_default_card_shape_brings_each_entry_into_the_real_chats_prompt(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    path = tmp_path / "ysolde.png"
    path.write_bytes(png((b"chara", b64(json.loads((DATA / "ysolde_card.json").read_text(encoding="utf-8"))))))
    llm_server.handler = lambda r: "{}" if r.json_schema is not None else "*She nods.*"
    env = chat_env(llm_server.url, tmp_path / "echo.sqlite3", CHARACTER_FILE=str(path))
    run = await run_chat(env, tmp_path, "".join(f"{q}\n/why\n" for q in QUESTIONS.values()).encode())
    assert run.code == 0, run.stderr
    sent = requests(llm_server)
    for request, name in zip(sent, QUESTIONS, strict=True):
        assert PHRASES[name] in request, name
    assert "left out" not in run.stdout


def test_a_start_marker_in_the_description_is_not_sent(tmp_path: Path) -> None:
    # SillyTavern's default card writes example chats in its description, after <START>.
    card = v2_card(description="{{char}} keeps the glade.\n<START>\n{{user}}: Who are you?\n{{char}}: A guardian.")
    (tmp_path / "card.json").write_text(json.dumps(card), encoding="utf-8")
    prompt = render_character_prompt(load_character(tmp_path / "card.json"), turn())
    assert "<START>" not in prompt and "Kyon: Who are you?\nHaruhi: A guardian." in prompt
