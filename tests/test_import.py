"""Importing past conversations (issue 34, item 3): the three formats read as their tools write
them, the import reflected as the live path would, bounded and malformed files refused in one
sentence without writing anything; the command line's dry run. Resuming after a kill -9 and a
second run are in tests/reliability/test_import_processes.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.__main__ import main
from bot.characters import transcripts
from bot.characters.transcripts import read_transcript
from bot.engine import Incoming
from bot.engine.importing import ReplayClock
from bot.errors import ImportFileError
from tests.builders import bundled_character, make_engine, msg
from tests.fakes.llm_server import LLMRequest, Reply

DATA = Path(__file__).parent / "data" / "imports"
ALICE = "311122223333444455"
ECHO = bundled_character().name  # "Écho"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def conversation(kind: str, transcript) -> list[tuple[str, str]]:
    return [(e.text, e.reply) for e in transcript.exchanges()]


EXPECTED = [
    ("Je m'appelle Alice et j'ai un chat qui s'appelle Pixel.", "Pixel, quel joli nom ! Il a quel âge ?"),
    ("Il a trois ans.\nEt je suis allergique aux arachides.", "Noté : pas d'arachides pour toi."),
    ("Mon examen de chimie est le 20 mai.", "Bonne chance pour ton examen !"),
]


def test_a_sillytavern_chat_is_read_as_sillytavern_writes_it():
    t = read_transcript(DATA / "sillytavern_chat.jsonl", character_name=ECHO, person_id=ALICE)
    assert (t.kind, t.person_name, t.character_name, t.direct) == ("sillytavern", "Alice", "Écho", True)
    # The greeting before the person's first line is no exchange; only the answer kept of the
    # swipes; the hidden system line is skipped.
    assert conversation("st", t) == EXPECTED
    assert t.skipped == 1
    [first, _, third] = t.exchanges()
    assert first.at == utc(2024, 5, 10, 19, 3) and third.replied_at == utc(2024, 5, 12, 8, 15, 4)
    assert t.story == "sillytavern:Écho:2024-05-10@19h02m11s"


def test_a_discord_export_tells_the_person_and_the_character_apart_by_author_id():
    dm = read_transcript(DATA / "discord_dm_export.json", character_name=ECHO, person_id=ALICE)
    assert (dm.kind, dm.direct, dm.story, dm.character_id) == (
        "discord",
        True,
        "1239999999999999999",
        "411122223333444466",
    )
    assert conversation("dm", dm) == EXPECTED
    assert dm.exchanges()[0].at == utc(2024, 5, 10, 17, 3, 0, 123000), "the export's offset read, dates in UTC"
    assert dm.skipped == 1, "the pin notice"
    channel = read_transcript(DATA / "discord_channel_export.json", character_name=ECHO, person_id=ALICE)
    assert (channel.direct, channel.guild_id) == (False, "1100000000000000001")
    assert conversation("channel", channel) == [
        ("Je m'appelle Alice et j'ai un chat qui s'appelle Pixel.", "Pixel, quel joli nom ! Il a quel âge ?"),
        ("Il a trois ans.", "Trois ans, un jeune chat !"),
    ]
    assert channel.others == {"Bob": 2}, "Bob's lines are his, left out"


def test_a_plain_transcript_is_read_by_its_names():
    t = read_transcript(DATA / "transcript.txt", character_name=ECHO, person_id=ALICE)
    assert (t.person_name, t.character_name) == ("Alice", "Écho")
    [_, second, third] = t.exchanges()
    assert second.text == "Il a trois ans.\nEt je suis allergique aux arachides."
    assert second.reply == "Noté : pas d'arachides pour toi.\nRemarque: je m'en souviendrai."
    assert third.at == utc(2024, 5, 12, 8, 15)


def test_dates_in_every_style_the_tools_write():
    assert transcripts.parse_date("June 19, 2023 2:20pm") == utc(2023, 6, 19, 14, 20)
    assert transcripts.parse_date("June 19, 2023 12:05am") == utc(2023, 6, 19, 0, 5)
    assert transcripts.parse_date("2023-06-19@14h20m05s") == utc(2023, 6, 19, 14, 20, 5)
    assert transcripts.parse_date(1687184400000) == utc(2023, 6, 19, 14, 20)
    assert transcripts.parse_date("2023-06-19T16:20:00+02:00") == utc(2023, 6, 19, 14, 20)
    assert transcripts.parse_date("yesterday") is None and transcripts.parse_date(True) is None


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        (
            "chat.jsonl",
            '{"user_name": "A", "character_name": "Écho"}\n{"name": "A", "is_user": true, "mes": "ok"}\n{oops\n',
            "chat.jsonl, line 3: not a JSON object",
        ),
        (
            "chat.jsonl",
            '{"name": "A", "is_user": true, "mes": "hi"}\n',
            "chat.jsonl, line 1: the first line of a SillyTavern chat",
        ),
        (
            "chat.jsonl",
            '{"user_name": "A", "character_name": "Écho"}\n{"name": "A", "is_user": "yes", "mes": "hi"}\n',
            "chat.jsonl, line 2: a SillyTavern message needs",
        ),
        (
            "export.json",
            '{\n  "channel": {"id": "1"},\n  "messages": [\n    {"id": "2",,}\n  ]\n}',
            "export.json, line 4: invalid JSON",
        ),
        (
            "export.json",
            '{"channel": {"id": "1"}, "messages": [{"id": "2", "content": "hi"}]}',
            "export.json, line 1, message 1: a message needs",
        ),
        (
            "export.json",
            (
                '{\n  "guild": {"messages": []},\n  "channel": {"id": "1"},\n  "messages": [\n    {"id": "2", "timestamp": "2024-05-10T19:03:00+02:00",\n'
                '     "author": {"id": "3"}, "content": "hi"},\n    {"id": "4",\n     "content": "no author"}\n  ]\n}'
            ),
            "export.json, line 7, message 2: a message needs",
        ),
        (
            "talk.txt",
            "Alice: salut\nÉcho: bonjour\nMallory: moi aussi\n",
            "cannot tell who is who among Alice, Écho, Mallory",
        ),
        ("talk.txt", "just words without a speaker\n", "talk.txt, line 1: a transcript line starts with who speaks"),
    ],
)
def test_a_malformed_file_is_one_sentence_naming_the_line(tmp_path, name, content, said):
    file = tmp_path / name
    file.write_text(content, encoding="utf-8")
    with pytest.raises(ImportFileError) as refused:
        read_transcript(file, character_name=ECHO, person_id=ALICE)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_the_bounds_of_a_conversation_file(tmp_path, monkeypatch):
    # A rule each bound protects, with room: the reader stops at the bound, whatever lies past it.
    monkeypatch.setattr(transcripts, "MAX_IMPORT_MESSAGES", 3)
    many = tmp_path / "many.txt"
    many.write_text("".join(f"Alice: {n}\nÉcho: ok\n" for n in range(3)), encoding="utf-8")
    with pytest.raises(ImportFileError, match=r"line 4: more than 3 messages"):
        read_transcript(many, character_name=ECHO, person_id=ALICE)
    monkeypatch.setattr(transcripts, "MAX_LINE_CHARS", 100)
    long = tmp_path / "long.txt"
    long.write_text("Alice: " + "x" * 200 + "\n", encoding="utf-8")
    with pytest.raises(ImportFileError, match=r"long.txt, line 1: longer than 100 characters"):
        read_transcript(long, character_name=ECHO, person_id=ALICE)
    monkeypatch.setattr(
        transcripts, "CONVERSATION_FILE", dataclasses.replace(transcripts.CONVERSATION_FILE, max_bytes=1000)
    )
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * 2000)
    with pytest.raises(ImportFileError, match="larger than"):
        read_transcript(big, character_name=ECHO, person_id=ALICE)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Alice: salut\nÉcho: ça va\n".encode("latin-1"))
    with pytest.raises(ImportFileError, match=r"latin.txt, line 2: not UTF-8"):
        read_transcript(latin, character_name=ECHO, person_id=ALICE)


# --- the import, as the live path -----------------------------------------------------------

# What the scripted reflection learns from each exchange: the same answer to the same prompt.
LEARNED = {
    "chat qui s'appelle Pixel": [
        {"text": "L'utilisateur a un chat qui s'appelle Pixel", "type": "fact", "confidence": 0.95}
    ],
    "allergique aux arachides": [
        {"text": "L'utilisateur est allergique aux arachides", "type": "fact", "confidence": 0.99}
    ],
    "examen de chimie": [
        {
            "text": "L'utilisateur a un examen de chimie le 20 mai 2024",
            "type": "fact",
            "confidence": 0.95,
            "expires_at": "2024-05-20",
        }
    ],
}


def reflection_of(request: LLMRequest) -> str:
    if "The exchange:" not in request.last_user:
        return json.dumps({"summary": "Alice a un chat, Pixel, et un examen de chimie."})
    exchange = request.last_user.split("The exchange:", 1)[1]
    for key, memories in LEARNED.items():
        if key in exchange:
            return json.dumps({"memories": memories, "summary": f"Alice a parlé de {key}."})
    return "{}"


def memory_rows(db_path: Path, owner: str) -> list[tuple]:
    with sqlite3.connect(db_path) as conn:
        return conn.execute(
            "SELECT text, type, scope, story_id, place, confidence, created_at, updated_at FROM memories "
            "WHERE user_id = ? ORDER BY id",
            (owner,),
        ).fetchall()


@pytest.mark.parametrize(
    ("file", "learned"),
    [
        ("sillytavern_chat.jsonl", 3),
        ("discord_dm_export.json", 3),
        ("discord_channel_export.json", 1),
        ("transcript.txt", 3),
    ],
)
async def test_an_import_writes_the_memories_the_live_path_writes(
    http, llm_server, tmp_path, migrated_sqlite, file, learned
):
    from bot.clients.databases import open_database

    transcript = read_transcript(DATA / file, character_name=ECHO, person_id=ALICE)
    paths = {}
    for way in ("live", "import"):
        paths[way] = tmp_path / f"{way}.sqlite3"
        paths[way].write_bytes(migrated_sqlite.read_bytes())
    # Played live: each message at its time, answered with the reply the file kept.
    live_db = await open_database(paths["live"])
    clock = ReplayClock()
    engine = make_engine(live_db, http, llm_server, tmp_path, clock=clock)
    plan = engine.operator.import_plan(transcript, ALICE, engine.character)
    replies = {e.text: e.reply for e in plan.exchanges}
    llm_server.handler = lambda r: (
        reflection_of(r) if r.json_schema is not None else replies[r.messages[-1]["content"].split(": ", 1)[1]]
    )
    for exchange in plan.exchanges:
        clock.at = exchange.replied_at
        said = Incoming(
            user_id=plan.owner, user_name=plan.user_name, text=exchange.text, story_id=plan.story_id, place=plan.place
        )
        await engine.conversation.turn(said)
        await engine.operator.wait_reflections(plan.owner)
    await engine.close()
    await live_db.close()
    # Imported.
    import_db = await open_database(paths["import"])
    engine = make_engine(import_db, http, llm_server, tmp_path, clock=ReplayClock())
    done = await engine.operator.import_conversation(plan)
    assert (done.done, done.skipped, done.set_aside) == (len(plan.exchanges), 0, 0) and done.memories == learned
    await engine.close()
    live, imported = memory_rows(paths["live"], plan.owner), memory_rows(paths["import"], plan.owner)
    assert imported == live and len(live) == learned
    assert datetime.fromisoformat(imported[0][6]) == plan.exchanges[0].replied_at, "dated by the original message"
    # The same file again: nothing written, nothing asked of the model.
    calls = len(llm_server.chats)
    engine = make_engine(import_db, http, llm_server, tmp_path, clock=ReplayClock())
    again = await engine.operator.import_conversation(plan)
    await engine.close()
    await import_db.close()
    assert again.already and len(llm_server.chats) == calls
    assert memory_rows(paths["import"], plan.owner) == imported


async def test_a_dated_fact_whose_date_passed_is_kept_as_history_and_never_followed_up(db, http, llm_server, tmp_path):
    transcript = read_transcript(DATA / "sillytavern_chat.jsonl", character_name=ECHO, person_id=ALICE)
    engine = make_engine(db, http, llm_server, tmp_path, clock=ReplayClock())
    llm_server.handler = lambda r: reflection_of(r) if r.json_schema is not None else "ok"
    plan = engine.operator.import_plan(transcript, ALICE, engine.character)
    done = await engine.operator.import_conversation(plan)
    assert done.history == 1 and done.summary
    [exam] = [m for m in await engine.memories.list(plan.owner) if "examen" in m.text]
    assert exam.expires_at is None, "history, not a future event"
    # The reflection read the exchange on its own day: the date was still ahead then.
    reflections = [r for r in llm_server.chats if r.json_schema is not None and "examen de chimie" in r.last_user]
    assert "Today is 2024-05-12." in reflections[0].text
    summary_call = [r for r in llm_server.chats if "Rewrite it in full" in r.system]
    assert len(summary_call) == 1
    # A later live turn asks nothing about it.
    engine2 = make_engine(db, http, llm_server, tmp_path)
    await engine2.conversation.turn(msg("Salut", user=plan.owner, story=plan.story_id, place="dm"))
    assert not any(
        "Follow-up:" in str(m.get("content"))
        for m in [r for r in llm_server.chats if r.json_schema is None][-1].messages
    )
    # Importing it again writes nothing and asks the model nothing.
    calls = len(llm_server.chats)
    again = await make_engine(db, http, llm_server, tmp_path, clock=ReplayClock()).operator.import_conversation(plan)
    assert again.already and len(llm_server.chats) == calls


async def test_live_turns_have_the_model_first_while_an_import_runs(db, http, llm_server, tmp_path):
    transcript = read_transcript(DATA / "sillytavern_chat.jsonl", character_name=ECHO, person_id=ALICE)
    live = make_engine(db, http, llm_server, tmp_path)
    importer = make_engine(db, http, llm_server, tmp_path, clock=ReplayClock())
    arrivals: list[tuple[str, float]] = []

    def handler(request: LLMRequest):
        now = time.monotonic()
        if request.json_schema is None:
            arrivals.append(("live", now))
            return Reply("une réponse lente", delay=1.0)
        if "Alice" in request.system:
            arrivals.append(("import", now))
        return reflection_of(request)

    llm_server.handler = handler
    plan = importer.operator.import_plan(transcript, ALICE, importer.character)
    turn = asyncio.create_task(live.conversation.turn(msg("Bonjour ?", user="bob")))
    while not arrivals:
        await asyncio.sleep(0.01)
    done = await importer.operator.import_conversation(plan)
    assert (await turn).reply == "une réponse lente" and done.done == 3
    live_at = arrivals[0][1]
    first_import = next(at for who, at in arrivals if who == "import")
    # The live reply took 1 s at the model: no import call reached it meanwhile.
    assert first_import >= live_at + 0.9


def test_a_dry_run_says_who_is_who_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_PATH", str(tmp_path / "echo.sqlite3"))
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9")
    code = main(["import", str(DATA / "discord_channel_export.json"), "--user", ALICE, "--dry-run"])
    shown = capsys.readouterr().out
    assert code == 0
    assert "the person: Alice (id 311122223333444455), 2 messages" in shown
    assert "the character: Écho (id 411122223333444466), 2 messages" in shown
    assert "left out: 2 messages of Bob" in shown
    assert "2 exchanges, from 2024-05-10 17:03 UTC to 2024-05-10 17:05 UTC" in shown
    assert not (tmp_path / "echo.sqlite3").exists()


def test_a_malformed_file_on_the_command_line_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_PATH", str(tmp_path / "echo.sqlite3"))
    bad = tmp_path / "chat.jsonl"
    bad.write_text(
        '{"user_name": "A", "character_name": "Écho"}\n{"name": "A", "is_user": true, "mes": "a"}\nnope\n',
        encoding="utf-8",
    )
    assert main(["import", str(bad), "--user", ALICE]) == 1
    said = capsys.readouterr().err.strip()
    assert said == f"Nothing was imported: {bad}, line 3: not a JSON object (Expecting value)."
    assert not (tmp_path / "echo.sqlite3").exists()
