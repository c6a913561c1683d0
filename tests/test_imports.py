"""What a start loads: the parts a deployment may not use (PostgreSQL, the owner's page) only
when configured, and the engine, the embedder and discord.py only once the settings, the
character, the LLM and the database passed. The tests and operators start the bot as a process
often, and a start stopped by a setting's mistake should cost little more than reading it.

Each check runs in a fresh interpreter: the test session's own sys.modules holds everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.reliability.process import chat_env

# Loaded only when DATABASE_URL is PostgreSQL / WEB_ENABLED is true.
OPTIONAL = ("asyncpg", "bot.clients.postgres", "jinja2", "aiohttp.web", "bot.web.server")
# Loaded only once the services are being built.
SERVICES = ("bot.engine", "bot.clients.embeddings", "numpy", "apscheduler", "prometheus_client", "discord", "aiohttp")


def run_and_list_modules(code: str, env: dict[str, str], cwd: Path) -> tuple[Any, set[str], str]:
    """Run `code` (which sets `result`) in a fresh interpreter: the result, the modules then
    loaded, and what it wrote to stderr."""
    script = f"import json, sys\n{code}\nprint(json.dumps([result, sorted(sys.modules)]))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result, modules = json.loads(done.stdout.splitlines()[-1])
    return result, set(modules), done.stderr


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


def test_importing_the_composition_loads_no_optional_part_and_no_engine(tmp_path: Path, refused_url: str) -> None:
    env = chat_env(refused_url, tmp_path / "echo.sqlite3")
    _, modules, _ = run_and_list_modules("import bot.app\nresult = None", env, tmp_path)
    assert "bot.characters.cast" in modules  # what open_services runs first is there
    assert _loaded(modules, OPTIONAL + SERVICES) == []


def test_a_chat_stopped_by_its_character_file_loads_no_optional_part_and_no_engine(
    tmp_path: Path, refused_url: str
) -> None:
    env = chat_env(refused_url, tmp_path / "echo.sqlite3", CHARACTER_FILE=str(tmp_path / "missing.yaml"))
    code, modules, stderr = run_and_list_modules(
        "from bot.__main__ import main\nresult = main(['chat', '--user', 'alice'])", env, tmp_path
    )
    assert code == 2 and "Écho cannot start." in stderr and "missing.yaml: no such file" in stderr, stderr
    assert "bot.characters.cast" in modules
    assert _loaded(modules, OPTIONAL + SERVICES) == []


def test_a_bot_without_a_token_loads_neither_the_services_nor_discord(tmp_path: Path, refused_url: str) -> None:
    env = chat_env(refused_url, tmp_path / "echo.sqlite3")
    env.pop("DISCORD_TOKEN", None)
    code, modules, stderr = run_and_list_modules("from bot.__main__ import main\nresult = main([])", env, tmp_path)
    assert code == 2 and "DISCORD_TOKEN is not set" in stderr, stderr
    assert "bot.config" in modules
    assert _loaded(modules, ("bot.app", *OPTIONAL, *SERVICES)) == []
