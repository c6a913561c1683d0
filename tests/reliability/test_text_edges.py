"""Text that is not valid Unicode, at every place text enters Écho: the terminal's stdin (bytes
that are not UTF-8), a Discord message (a lone surrogate from the gateway's JSON), the model's
reply and reflection (a JSON-escaped lone surrogate), a character file (the same escape in JSON
or YAML). Each is answered and stored with U+FFFD in place of what could not be kept, never a
traceback or silence.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.app import Services
from bot.engine import Incoming
from bot.engine.prompting import ChannelLine
from bot.memory.text import storable
from cogs.conversation import Conversation
from tests.cogs import ALICE, BOT_ID, fake_channel, fake_message, fake_user, offline_bot
from tests.fakes.llm_server import FakeLLMServer
from tests.lanes import examples
from tests.reliability.process import chat_env, run_chat

REPLACEMENT = "\ufffd"


def _exchanges(database: Path) -> list[tuple[str, str, str | None]]:
    """(user_name, user_message, reply) of every exchange, as SQLite reads them back."""
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT user_name, user_message, reply FROM exchanges ORDER BY id").fetchall()


# --- the terminal: bytes that are not UTF-8, through the real process --------------------------

# (bytes of one line, what is stored of it)
TERMINAL_INPUTS = [
    (b"caf\xe9 au lait", "caf\ufffd au lait"),  # Latin-1
    (b"\xff\xfe\x00bonjour", "\ufffd\ufffdbonjour"),  # a UTF-16 BOM and a NUL
    (b"sur \xed\xa0\x80 rogate", "sur \ufffd\ufffd\ufffd rogate"),  # a surrogate encoded as UTF-8
    (b"cut \xe2\x82 short", "cut \ufffd\ufffd short"),  # a truncated sequence
]


async def test_terminal_bytes_that_are_not_utf8_are_answered_and_stored(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Through the real process: each line as a message and as /remember, from a user whose
    name (argv) is not UTF-8 either."""
    database = tmp_path / "echo.sqlite3"
    stdin = b"".join(line + b"\n/remember " + line + b"\n" for line, _ in TERMINAL_INPUTS)
    run = await run_chat(chat_env(llm_server.url, database), tmp_path, stdin, user=b"Zo\xe9")
    assert run.code == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stdout.count("Écho: echo: Zo\ufffd:") == len(TERMINAL_INPUTS), run.stdout
    assert run.stdout.count("Remembered as #") == len(TERMINAL_INPUTS), run.stdout
    with sqlite3.connect(database) as conn:
        user = ("terminal:Zo\ufffd",)
        messages = [
            r[0] for r in conn.execute("SELECT user_message FROM exchanges WHERE user_id = ? ORDER BY id", user)
        ]
        memories = [r[0] for r in conn.execute("SELECT text FROM memories WHERE user_id = ? ORDER BY id", user)]
    assert messages == [stored for _, stored in TERMINAL_INPUTS]
    assert len(memories) == len(TERMINAL_INPUTS)
    for (_, stored), memory in zip(TERMINAL_INPUTS, memories, strict=True):
        assert stored.replace("\ufffd", "") in memory.replace("\ufffd", ""), memory


# --- a character file holding an escaped lone surrogate, through the real process --------------


@pytest.mark.parametrize(
    ("name", "body"),
    [
        (
            "card.json",
            json.dumps({"spec": "chara_card_v2", "data": {"name": "Zo\ud800e", "description": "a \udfff b"}}),
        ),
        ("character.yaml", 'name: "Zo\\ud800e"\npersona: "p \\udc80"\nrules: ["Sois \\ud800 gentille."]\n'),
    ],
)
async def test_a_character_file_with_a_lone_surrogate_starts_and_answers(
    name: str, body: str, tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    character = tmp_path / name
    character.write_text(body, encoding="utf-8")
    database = tmp_path / "echo.sqlite3"
    run = await run_chat(chat_env(llm_server.url, database, CHARACTER_FILE=str(character)), tmp_path, b"Salut\n")
    assert run.code == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "Zo\ufffde: echo: alice: Salut" in run.stdout
    (system,) = [m["content"] for m in llm_server.chats[0].messages if m["role"] == "system"][:1]
    assert "Zo\ufffde" in system
    if name.endswith(".yaml"):
        with sqlite3.connect(database) as conn:
            assert conn.execute("SELECT text FROM memories WHERE type = 'rule'").fetchall() == [
                ("Sois \ufffd gentille.",)
            ]


# --- the model: a JSON-escaped lone surrogate in a reply and in a reflection --------------------


async def test_a_lone_surrogate_in_the_models_reply_is_answered_and_stored(
    services: Services, llm_server: FakeLLMServer
) -> None:
    # The fake server sends this JSON-escaped: "Bonjour \\udc80 Alice \\ud800".
    llm_server.handler = lambda request: "{}" if request.json_schema is not None else "Bonjour \udc80 Alice \ud800"
    result = await services.engine.conversation.turn(
        Incoming(user_id="u1", user_name="Alice", text="Salut", story_id="s", place="p")
    )
    assert result.reply == f"Bonjour {REPLACEMENT} Alice {REPLACEMENT}" and result.error is None
    assert _exchanges(services.db.path) == [("Alice", "Salut", f"Bonjour {REPLACEMENT} Alice {REPLACEMENT}")]
    # The next turn sends that reply back in its history: the request is made, and answered.
    again = await services.engine.conversation.turn(
        Incoming(
            user_id="u1",
            user_name="Alice",
            text="Et alors ?",
            story_id="s",
            place="p",
            history=[ChannelLine("Écho", "Bonjour \udc80", from_bot=True)],
        )
    )
    assert again.reply is not None and again.error is None
    assert {"role": "assistant", "content": f"Bonjour {REPLACEMENT}"} in llm_server.chats[-1].messages


# --- Discord: a message and a display name holding a lone surrogate -----------------------------


async def test_a_discord_message_with_a_lone_surrogate_is_answered(
    services: Services, llm_server: FakeLLMServer
) -> None:
    cog = Conversation(offline_bot(services), services.engine)
    channel = fake_channel()
    me = fake_user(BOT_ID, "Écho", bot=True)
    message = fake_message(
        f"<@{BOT_ID}> je suis \ud83d contente", author=fake_user(ALICE, "Al\udfffice"), channel=channel, mentions=[me]
    )
    await cog.on_message(message)
    assert [content for content, _ in channel.sent] == [f"echo: Al{REPLACEMENT}ice: je suis {REPLACEMENT} contente"]
    assert _exchanges(services.db.path) == [
        (
            f"Al{REPLACEMENT}ice",
            f"je suis {REPLACEMENT} contente",
            f"echo: Al{REPLACEMENT}ice: je suis {REPLACEMENT} contente",
        )
    ]


# --- property: whatever text a front end hands the engine, the turn is answered and stored ------

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), min_size=1, max_size=40)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ANY_TEXT, name=ANY_TEXT)
async def test_any_text_from_a_front_end_is_answered_and_stored(
    services: Services, llm_server: FakeLLMServer, text: str, name: str
) -> None:
    result = await services.engine.conversation.turn(
        Incoming(user_id="prop", user_name=name, text=text, story_id="s", place="p")
    )
    assert result.reply is not None and result.error is None
    name_stored, message, reply = _exchanges(services.db.path)[-1]
    assert (name_stored, message) == (storable(name), storable(text).strip())
    assert reply is not None
