"""The bot against a real model server: llama.cpp's llama-server and SmolLM2-135M-Instruct.

Every other test talks to a scripted model. Here the server is real, and so are its context,
its refusals, its streaming, its JSON-schema grammar and its prompt cache. A 135M model writes
poor replies and poorer memories, so these tests assert only what it cannot spoil: the
plumbing (what was asked, what the server answered, what the bot read of it), the limits (the
context, read and respected), the errors (said for what they are) and that nothing is lost —
never the wording.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from bot.clients.databases import open_database
from bot.clients.llm import LLMClient
from bot.engine import Incoming
from bot.engine.prompting import ChannelLine
from tests.builders import DISTINCT_FACTS, http_client, make_engine
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.discord.echo_process import start_echo_process
from tests.real_server.conftest import MODEL_ALIAS, StartLlama, free_port
from tests.real_server.recorder import Exchange
from tests.reliability.process import chat_env, run_chat
from tests.test_doctor import doctor_env

pytestmark = pytest.mark.asyncio(loop_scope="module")

WEB_TOKEN = "lane-token-0123456789abcdef"


def _grammar_held(exchange: Exchange) -> bool:
    """An answer under a JSON schema is JSON the grammar allowed, unless it stopped at its token
    limit: what the model wrote inside it is its own affair."""
    if exchange.status != 200:
        return False
    data = json.loads(exchange.text)
    choice = data["choices"][0]
    if choice["finish_reason"] == "length":
        return True
    return isinstance(json.loads(choice["message"]["content"]), dict)


# --- a context too small: 1,024 tokens ---------------------------------------------------------


async def test_a_1024_token_server_is_flagged_by_doctor_and_each_message_says_why_it_is_not_answered(
    llama: StartLlama, tmp_path: Path
) -> None:
    server = await llama(1024)
    env = doctor_env(
        LLM_API="openai",
        LLM_BASE_URL=server.recorder.url,
        LLM_MODEL=MODEL_ALIAS,
        DATABASE_PATH=str(tmp_path / "doctor.sqlite3"),
        EMBEDDINGS="local",
    )
    code, out = await _doctor(env, tmp_path)
    assert code == 1, out
    assert f"✓ LLM model: '{MODEL_ALIAS}' present" in out
    assert "✓ LLM reply:" in out and "✓ LLM streaming:" in out
    assert "✗ LLM context: 1,024 tokens (said by llama.cpp, per slot): too small for even the smallest prompt" in out
    assert "llama.cpp: a prompt_cache_key per conversation (salted hash), cache_prompt" in out
    # The JSON probe went through the server's grammar: JSON, or cut at the token limit.
    structured = [e for e in server.recorder.chats if e.structured]
    assert structured and all(_grammar_held(e) for e in structured)
    assert re.search(r"[✓✗] LLM JSON: ", out)
    asked = len(server.recorder.chats)

    run = await run_chat(
        chat_env(server.recorder.url, tmp_path / "chat.sqlite3", LLM_API="openai", LLM_MODEL=MODEL_ALIAS),
        tmp_path,
        "Bonjour, je m'appelle Alice.\nTu es là ?\n".encode(),
        timeout=300,
    )
    assert run.code == 0, run.stderr
    notes = [line for line in run.stdout.splitlines() if "context is too small" in line]
    assert len(notes) == 2 and all("the model holds 1,024" in n and "try again" not in n for n in notes), run.stdout
    turns = server.recorder.chats[asked:]
    assert [e.status for e in turns] == [400], "one refusal taught the context: the second message asks nothing"
    assert run.stderr.count("too small for the bot's prompts") == 1, run.stderr
    with sqlite3.connect(tmp_path / "chat.sqlite3") as db:
        kept = db.execute("SELECT user_message, reply FROM exchanges ORDER BY id").fetchall()
    assert kept == [("Bonjour, je m'appelle Alice.", None), ("Tu es là ?", None)]


# --- through the fake Discord: streaming, the reflection's grammar, the prompt cache ----------


async def test_turns_through_discord_stream_reflect_through_the_grammar_and_read_the_servers_cache_figures(
    llama: StartLlama, tmp_path: Path
) -> None:
    server = await llama(4096, generated=96)
    web_port = free_port()
    said = [
        "Bonjour ! Je m'appelle Alice et j'ai deux chats, Miso et Tofu.",
        "Tu te souviens du nom de mes chats ?",
    ]
    async with FakeDiscord() as discord:
        # Each answer settles at once: its reflection, through the grammar, follows its reply.
        echo = await start_echo_process(
            discord,
            server.recorder.url,
            MODEL_ALIAS,
            tmp_path,
            LLM_API="openai",
            BURST_SECONDS="0",
            SETTLE_SECONDS="0",
            LLM_TIMEOUT_SECONDS="300",
            REFLECTION_TIMEOUT_SECONDS="300",
            WEB_ENABLED="true",
            WEB_TOKEN=WEB_TOKEN,
            WEB_PORT=str(web_port),
        )
        try:
            channel = discord.general
            for n, text in enumerate(said, 1):
                message = await discord.user_says(ALICE, channel, text, mention_bot=True)
                await discord.wait_for_call(
                    "POST",
                    f"/channels/{channel.id}/messages",
                    count=n,
                    timeout=300,
                    where=lambda c: c.json is not None and "message_reference" in c.json,
                )
                posted = [
                    c
                    for c in discord.calls_to("POST", f"/channels/{channel.id}/messages")
                    if c.json and "message_reference" in c.json
                ]
                assert str(posted[-1].json["message_reference"]["message_id"]) == message["id"]
            await _until(lambda: _reflections_tried(echo.database_path) >= 1, 300)
            async with http_client() as http:
                metrics = (
                    await http.get(
                        f"http://127.0.0.1:{web_port}/metrics", headers={"Authorization": f"Bearer {WEB_TOKEN}"}
                    )
                ).text
                page = (
                    await http.get(f"http://127.0.0.1:{web_port}/", headers={"Authorization": f"Bearer {WEB_TOKEN}"})
                ).text
            why_interaction = await discord.run_command(ALICE, channel, "why")
            [callback] = await discord.wait_for_call(
                "POST", f"/interactions/{why_interaction.id}/{why_interaction.token}/callback"
            )
            why = callback.json["data"]["content"]
        finally:
            await echo.stop()
            if echo.process.returncode not in (0, -15):
                print(echo.log())

    replies = [e for e in server.recorder.chats if not e.structured]
    reflections = [e for e in server.recorder.chats if e.structured]
    # Streamed: asked so, answered as server-sent events in pieces.
    assert len(replies) == len(said)
    assert all(e.body and e.body["stream"] is True and e.status == 200 and e.pieces > 1 for e in replies)
    # Told what a llama.cpp server is told: one key for the conversation, cache_prompt.
    assert len({e.body["prompt_cache_key"] for e in replies if e.body}) == 1
    assert all(e.body and e.body.get("cache_prompt") is True for e in server.recorder.chats)
    # The reflection went through the grammar and was read: applied or, cut at the limit, kept pending.
    assert reflections and all(_grammar_held(e) for e in reflections)
    # The server's own figures: it took the shared start of each later reply from its cache,
    # and the bot counts exactly what the server said.
    cached = [_cached(e) for e in replies]
    assert all(c > 0 for c in cached[1:]), cached
    reused = float(re.search(r'echo_prompt_tokens_reused_total\{call="reply"\} (\S+)', metrics).group(1))  # type: ignore[union-attr]
    assert reused == sum(cached)
    read = float(re.search(r'echo_prompt_tokens_read_total\{call="reply"\} (\S+)', metrics).group(1))  # type: ignore[union-attr]
    assert read == sum(e.usage["prompt_tokens"] for e in replies) - sum(cached)
    assert "llama.cpp, context 4,096 tokens (llama.cpp /props n_ctx)" in page
    assert "of a 4,096-token context" in why and "from the server's cache" in why
    # Nothing lost: every message and every reply kept; the first reflected or still pending (a
    # tiny model's JSON cut at its token limit is tried again later).
    with sqlite3.connect(echo.database_path) as db:
        rows = db.execute(
            "SELECT user_message, reply, reflected_at, reflection_attempts FROM exchanges ORDER BY id"
        ).fetchall()
    assert [r[0] for r in rows] == said and all(r[1] for r in rows)
    assert rows[0][2] is not None or rows[0][3] >= 1


# --- 2,048 tokens: a 40-turn conversation, every turn answered --------------------------------


async def test_a_40_turn_conversation_with_every_slot_full_is_answered_every_turn_in_2048_tokens(
    llama: StartLlama, tmp_path: Path
) -> None:
    server = await llama(2048, generated=8)
    db = await open_database(tmp_path / "forty.sqlite3")
    async with http_client(timeout=120) as http:
        llm = LLMClient(http, api="openai", base_url=server.recorder.url, timeout=120)
        await llm.describe(MODEL_ALIAS)
        engine = make_engine(db, http, None, tmp_path, llm=llm, llm_model=MODEL_ALIAS, llm_base_url=server.recorder.url)
        try:
            for fact in DISTINCT_FACTS:
                memory_id = await engine.memories.remember(
                    "alice", f"L'utilisateur {fact}.", story_id="forty", place="guild"
                )
                # Pinned, they come in the same order every turn: the server reads their block once
                # and each turn only what is new (a tiny model on one thread reads ~100 tokens/s).
                await engine.memories.pin("alice", memory_id)
            history: list[ChannelLine] = []
            answered = 0
            for turn in range(40):
                text = f"Message {turn + 1} : {LINES[turn % len(LINES)]}"
                # Open for swipes, each in a story of its own (the conversation's lines are given as
                # its history): none settles, so no reflection competes with a turn for the slot.
                result = await engine.conversation.turn(
                    Incoming(
                        user_id="alice",
                        user_name="Alice",
                        text=text,
                        story_id=f"forty-{turn}",
                        place="guild",
                        history=list(history),
                        swipes=True,
                    )
                )
                assert result.reply is not None, (turn, result.failure, result.error)
                answered += 1
                history += [ChannelLine("Alice", text), ChannelLine("Écho", result.reply, from_bot=True)]
            selection = await engine.memories.why("alice", "forty-39")
        finally:
            await engine.close(timeout=5)
            await db.close()
    assert answered == 40
    assert selection is not None and len(selection.slots) == 24
    figures = selection.figures
    assert figures.context_tokens == 2048 and figures.history_left_out + figures.memories_left_out > 0
    refused = [e for e in server.recorder.chats if e.status == 400]
    assert len(refused) <= 1, "at most the first turn, counted at a guessed rate, is refused and fitted again"
    assert all(e.usage["prompt_tokens"] + 8 <= 2048 for e in server.recorder.chats if e.status == 200)


LINES = [
    "Aujourd'hui j'ai réparé un vélo pour ma voisine, la chaîne avait sauté.",
    "La chorale répète une nouvelle pièce, un canon à quatre voix.",
    "Il a plu toute la journée, les tomates du balcon sont contentes.",
    "J'ai lu trois chapitres de mon polar suédois dans le tram.",
]


# --- helpers ----------------------------------------------------------------------------------


def _cached(exchange: Exchange) -> int:
    """The prompt tokens the server took from its cache, as it said them: OpenAI's field, else
    llama.cpp's timings (a streamed answer's last chunks carry one or the other)."""
    details = exchange.usage.get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens", exchange.timings.get("cache_n", 0)))


def _reflections_tried(database: Path) -> int:
    with sqlite3.connect(database) as db:
        row = db.execute(
            "SELECT COUNT(*) FROM exchanges WHERE reflected_at IS NOT NULL OR reflection_attempts > 0"
        ).fetchone()
    return int(row[0])


async def _doctor(env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """`python -m bot doctor`, bounded by what its three model calls may take on a busy machine."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "doctor",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=cwd,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 400)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def _until(condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout} s")
        await asyncio.sleep(0.5)
