"""`python -m bot doctor`, the real command, against the fakes: the fake Discord, the scripted
LLM server, a refused embedding server, a database on a file system mounted read-only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sys
from pathlib import Path

import pytest

from bot.clients.db import SQLiteDatabase
from tests.fakes.discord import FakeDiscord
from tests.fakes.embedding_server import EmbeddingServer
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest
from tests.reliability.process import REPO
from tests.reliability.test_storage_faults import read_only, tmpfs

TIMEOUT = 120.0


def doctor_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **settings)
    return env


async def doctor(env: dict[str, str], cwd: Path) -> tuple[int, str]:
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
    out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def failed(output: str) -> list[str]:
    return [line[2:].split(":", 1)[0] for line in output.splitlines() if line.startswith("✗ ")]


def prose_for_json(request: LLMRequest) -> str:
    """A server that ignores the schema it is given."""
    return "Sure! The user has two cats, Miso and Tofu." if request.json_schema is not None else "ready"


def write_cast(folder: Path, channel_id: int) -> Path:
    folder.mkdir()
    (folder / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\n", encoding="utf-8")
    (folder / "marc.yaml").write_text("name: Marc\npersona: Un forgeron.\n", encoding="utf-8")
    (folder / "channels.yaml").write_text(f"default: lina\nchannels:\n  {channel_id}: marc\n", encoding="utf-8")
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_one_run_finds_a_wrong_token_a_missing_model_no_json_a_dead_embedder_and_a_read_only_database(
    tmp_path: Path, llm_server: FakeLLMServer, refused_url: str
) -> None:
    llm_server.handler = prose_for_json
    folder = tmp_path / "data"
    with contextlib.ExitStack() as stack:
        if os.geteuid() == 0:
            stack.enter_context(tmpfs(folder, "8m"))
        else:
            folder.mkdir()
        await (await SQLiteDatabase.open(folder / "echo.sqlite3")).close()
        stack.enter_context(read_only(folder))
        async with FakeDiscord() as discord:
            env = doctor_env(
                DISCORD_TOKEN="not-the-token",
                DISCORD_API_URL=discord.api_url,
                LLM_BASE_URL=llm_server.url,
                LLM_MODEL="qwen2.5:7b",
                REFLECTION_MODEL=FAKE_MODEL,
                EMBEDDINGS="ollama",
                EMBEDDINGS_BASE_URL=refused_url,
                DATABASE_PATH=str(folder / "echo.sqlite3"),
            )
            code, out = await doctor(env, tmp_path)
    assert code == 1, out
    assert failed(out) == ["database", "LLM model", "LLM JSON", "embedder", "Discord token"], out
    assert "read-only file system" in out or "Permission denied" in out
    assert "'qwen2.5:7b' is not on the server" in out and "ollama pull qwen2.5:7b" in out
    assert "answered 'Sure! The user has two cats" in out
    assert "EMBEDDINGS=ollama does not answer" in out
    assert "refused by Discord (401)" in out and "Reset Token" in out
    assert "Traceback" not in out


async def test_one_run_finds_a_missing_intent_a_missing_server_a_missing_webhook_permission_and_a_short_context(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.context_length = 4096
    async with FakeDiscord(message_content_enabled=False) as discord:
        elsewhere = discord.add_guild("Another guild")
        port = discord.add_text_channel(discord.guild, "port")
        discord.webhooks_forbidden.add(port.id)
        env = doctor_env(
            DISCORD_TOKEN=discord.token,
            DISCORD_API_URL=discord.api_url,
            DEV_GUILD_ID=str(elsewhere.id),
            ALLOWED_CHANNEL_IDS=str(discord.general.id),
            CHARACTERS_DIR=str(write_cast(tmp_path / "cast", port.id)),
            LLM_BASE_URL=llm_server.url,
            LLM_MODEL=FAKE_MODEL,
            LLM_CONTEXT_TOKENS="8192",
            DATABASE_PATH=str(tmp_path / "echo.sqlite3"),
        )
        code, out = await doctor(env, tmp_path)
    assert code == 1, out
    assert failed(out) == ["LLM context", "Discord intents", "Discord server", "Discord webhooks"], out
    assert "✓ Discord token: valid" in out
    assert "LLM_CONTEXT_TOKENS=8192, but 'fake-llm' handles 4096 tokens" in out
    assert "Message Content Intent" in out
    assert f"not in DEV_GUILD_ID {elsewhere.id}" in out and "oauth2/authorize?client_id=" in out
    assert f"no Manage Webhooks in channel {port.id}" in out


async def test_a_good_set_up_passes_every_check_and_exits_0(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.handler = lambda r: '{"memories": []}' if r.json_schema is not None else "ready"
    async with FakeDiscord() as discord:
        env = doctor_env(
            DISCORD_TOKEN=discord.token,
            DISCORD_API_URL=discord.api_url,
            DEV_GUILD_ID=str(discord.guild.id),
            ALLOWED_CHANNEL_IDS=str(discord.general.id),
            CHARACTERS_DIR=str(write_cast(tmp_path / "cast", discord.general.id)),
            LLM_BASE_URL=llm_server.url,
            LLM_MODEL=FAKE_MODEL,
            DATABASE_PATH=str(tmp_path / "echo.sqlite3"),
            WEB_ENABLED="true",
            WEB_TOKEN="a-long-enough-secret-token",
            WEB_PORT=str(free_port()),
        )
        code, out = await doctor(env, tmp_path)
    assert code == 0, out
    assert failed(out) == []
    assert "All 18 checks pass." in out
    assert "✓ LLM server settings: keep_alive 30m (LLM_KEEP_ALIVE), num_ctx 8192 on every call" in out
    assert not (tmp_path / "echo.sqlite3").exists(), "the doctor creates nothing"


@pytest.mark.parametrize(("setting", "value"), [("INDEX_INTERVAL_SECONDS", "-1"), ("LLM_API", "mistral")])
async def test_bad_settings_are_one_line_each_and_exit_1(tmp_path: Path, setting: str, value: str) -> None:
    code, out = await doctor(doctor_env(**{setting: value}), tmp_path)
    assert code == 1 and out.startswith("✗ settings:") and setting in out
    assert "Traceback" not in out


async def test_a_postgresql_database_is_checked_for_writes_and_migrations(
    tmp_path: Path, llm_server: FakeLLMServer, postgres_cluster
) -> None:
    from bot.clients.postgres import PostgresDatabase

    url = await postgres_cluster.empty_database()
    env = doctor_env(LLM_BASE_URL=llm_server.url, LLM_MODEL=FAKE_MODEL, DATABASE_URL=url)
    _code, out = await doctor(env, tmp_path)
    assert "✓ database: postgresql://" in out and "accepts writes" in out
    assert re.search(r"✓ migrations: \d+ to apply, automatically, at the next start", out), out
    await (await PostgresDatabase.open(url)).close()
    _code, out = await doctor(env, tmp_path)
    assert "✓ migrations: current" in out, out


async def test_scheduled_backups_into_a_folder_that_cannot_be_written_are_a_finding(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    settings = {
        "LLM_BASE_URL": llm_server.url,
        "LLM_MODEL": FAKE_MODEL,
        "DATABASE_PATH": str(tmp_path / "echo.sqlite3"),
    }
    _code, out = await doctor(
        doctor_env(**settings, BACKUP_EVERY_HOURS="24", BACKUP_DIR=str(blocked / "backups")), tmp_path
    )
    assert "backups" in failed(out) and f"BACKUP_DIR {blocked / 'backups'} cannot be written" in out
    _code, out = await doctor(doctor_env(**settings, BACKUP_EVERY_HOURS="24"), tmp_path)
    assert f"✓ backups: every 24 h into {tmp_path / 'backups'}, 7 kept" in out


async def test_a_misspelt_key_in_env_is_a_finding(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    (tmp_path / ".env").write_text("LLM_MODLE=qwen2.5:7b\n", encoding="utf-8")
    env = doctor_env(LLM_BASE_URL=llm_server.url, LLM_MODEL=FAKE_MODEL, DATABASE_PATH=str(tmp_path / "echo.sqlite3"))
    code, out = await doctor(env, tmp_path)
    assert code == 1 and failed(out)[0] == "settings"
    assert "LLM_MODLE is not a setting of this bot and is ignored (did you mean LLM_MODEL?)" in out


async def test_an_embedder_without_a_measured_threshold_is_a_finding_until_the_setting_gives_one(
    tmp_path: Path, llm_server: FakeLLMServer, embedding_server: EmbeddingServer
) -> None:
    llm_server.handler = lambda r: '{"memories": []}' if r.json_schema is not None else "ready"
    async with FakeDiscord() as discord:
        env = doctor_env(
            DISCORD_TOKEN=discord.token,
            DISCORD_API_URL=discord.api_url,
            LLM_BASE_URL=llm_server.url,
            LLM_MODEL=FAKE_MODEL,
            DATABASE_PATH=str(tmp_path / "echo.sqlite3"),
            EMBEDDINGS="ollama",
            EMBEDDINGS_BASE_URL=embedding_server.url,
            EMBEDDINGS_MODEL="fake-embed",
        )
        code, out = await doctor(env, tmp_path)
        assert code == 1 and failed(out) == ["embedder threshold"], out
        assert "python bench/recall_public.py --embeddings ollama --embeddings-model fake-embed" in out
        code, out = await doctor({**env, "SEMANTIC_THRESHOLD": "0.25"}, tmp_path)
    assert code == 0 and failed(out) == [], out
    assert "✓ embedder threshold: 0.25, from SEMANTIC_THRESHOLD" in out


async def test_a_missing_reflection_model_names_its_setting_and_lore_echo_leaves_aside_is_listed(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.handler = lambda r: '{"memories": []}' if r.json_schema is not None else "ready"
    cast = tmp_path / "cast"
    cast.mkdir()
    world = {
        "entries": {
            "0": {"uid": 0, "key": ["harbour"], "content": "It freezes.", "vectorized": True, "futureField": 1},
            "1": {"uid": 1, "key": [], "content": "s" * 300, "constant": True},
        }
    }
    (cast / "world.json").write_text(__import__("json").dumps(world), encoding="utf-8")
    (cast / "lina.yaml").write_text("name: Lina\npersona: Une marinière.\nlore: world.json\n", encoding="utf-8")
    env = doctor_env(
        LLM_BASE_URL=llm_server.url,
        LLM_MODEL=FAKE_MODEL,
        REFLECTION_MODEL="absent:1b",
        CHARACTERS_DIR=str(cast),
        DATABASE_PATH=str(tmp_path / "echo.sqlite3"),
        LORE_BUDGET_CHARS="200",
    )
    code, out = await doctor(env, tmp_path)
    assert code == 1
    model = next(line for line in out.splitlines() if line.startswith("✗ LLM model"))
    fix = out.splitlines()[out.splitlines().index(model) + 1]
    assert "'absent:1b'" in model and "REFLECTION_MODEL" in fix and "LLM_MODEL" not in fix
    assert (
        "✓ characters: Lina: ignored (Écho does not act on them): vectorized (matching by embeddings), futureField"
        in out
    )
    assert "✗ lore: Lina: the entries always in (constant) take 300 characters, over the 200-character budget" in out
    assert "raise LORE_BUDGET_CHARS above 300" in out
