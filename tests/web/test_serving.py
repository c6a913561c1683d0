"""The page in the bot's composition: off by default, never without a token, /healthz honest."""

from __future__ import annotations

import socket

import httpx
import pytest

from bot.__main__ import main
from bot.app import open_services
from bot.clients.health import Health
from bot.clients.llm import LLMClient
from bot.config import load_settings
from bot.errors import ConfigError, StartupError
from bot.web.server import WebServer, make_app
from tests.builders import http_client
from tests.fakes.llm_server import FAKE_MODEL
from tests.web.conftest import TOKEN, Page


def settings(tmp_path, llm_url: str, **overrides):
    return load_settings(
        _env_file=None, llm_base_url=llm_url, llm_model=FAKE_MODEL, database_path=tmp_path / "echo.sqlite3", **overrides
    )


def test_the_page_is_off_by_default_and_on_loopback(tmp_path):
    s = settings(tmp_path, "http://127.0.0.1:1")
    assert s.web.enabled is False and s.web.host == "127.0.0.1"


@pytest.mark.parametrize("token", [None, "", "   ", "short-token"])
def test_the_page_never_starts_without_a_real_token(tmp_path, token):
    extra = {"web_token": token} if token is not None else {}
    with pytest.raises(ConfigError, match="WEB_TOKEN"):
        settings(tmp_path, "http://127.0.0.1:1", web_enabled=True, **extra)


def test_enabled_without_a_token_the_bot_says_it_cannot_start(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WEB_ENABLED", "true")
    monkeypatch.delenv("WEB_TOKEN", raising=False)
    assert main(["chat", "--user", "alice"]) == 2
    err = capsys.readouterr().err
    assert "Écho cannot start." in err and "WEB_TOKEN: required when WEB_ENABLED=true" in err


async def test_open_services_serves_the_page_while_the_bot_runs(tmp_path, llm_server):
    s = settings(tmp_path, llm_server.url, web_enabled=True, web_token=TOKEN, web_port=0)
    async with http_client() as http:
        async with open_services(s) as services:
            assert services.web is not None and services.web.url.startswith("http://127.0.0.1:")
            url = services.web.url
            health = await http.get(url + "/healthz")
            assert health.status_code == 200 and health.json()["status"] == "ok"
            assert (await http.get(url + "/")).status_code == 401
            page = await http.get(url + "/", headers={"Authorization": f"Bearer {TOKEN}"})
            assert page.status_code == 200 and "Overview" in page.text
        with pytest.raises(httpx.ConnectError):
            await http.get(url + "/healthz")


async def test_a_port_in_use_is_a_clear_startup_error(tmp_path, llm_server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        s = settings(tmp_path, llm_server.url, web_enabled=True, web_token=TOKEN, web_port=port)
        with pytest.raises(StartupError, match=f"cannot listen on 127.0.0.1:{port}.*WEB_PORT"):
            async with open_services(s):
                pass


async def test_healthz_fails_when_the_llm_does_not_answer_and_the_page_says_why(page: Page, refused_url):
    health = Health(
        db=page.db, llm=LLMClient(page.http, api="ollama", base_url=refused_url), model=FAKE_MODEL, embedder=None
    )
    web = WebServer(make_app(page.engine, health, page.metrics, TOKEN))
    await web.start("127.0.0.1", 0)
    try:
        response = await page.http.get(web.url + "/healthz")
        assert response.status_code == 503
        assert response.json() == {"status": "failing", "checks": {"llm": False, "database": True}}
        assert refused_url not in response.text  # the open endpoint says nothing more
        overview = await page.http.get(web.url + "/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert "Cannot reach the Ollama server" in overview.text and refused_url in overview.text
    finally:
        await web.stop()


async def test_healthz_reports_a_disconnected_discord(page: Page):
    connected = False
    page.health.discord = lambda: connected
    response = await page.http.get(page.url + "/healthz")
    assert response.status_code == 503 and response.json()["checks"]["discord"] is False
    connected = True
    response = await page.http.get(page.url + "/healthz")
    assert response.status_code == 200 and response.json()["checks"]["discord"] is True


async def test_the_llm_is_asked_once_per_cache_period_not_per_probe(page: Page):
    for _ in range(5):
        assert (await page.http.get(page.url + "/healthz")).status_code == 200
    assert sum(r.path == "/api/tags" for r in page.llm.requests) == 1


async def test_the_compose_healthcheck_passes_on_a_healthy_bot_and_fails_otherwise(page: Page):
    """The command of docker-compose.yml's healthcheck, run as Docker runs it."""
    import asyncio
    import os
    import sys
    from pathlib import Path
    from urllib.parse import urlsplit

    import yaml

    compose = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())
    test = compose["services"]["echo"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    env = dict(os.environ, WEB_PORT=str(urlsplit(page.url).port))

    async def run() -> int:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *test[2:], env=env, stderr=asyncio.subprocess.DEVNULL
        )
        return await proc.wait()

    assert await run() == 0
    page.health.discord = lambda: False
    assert await run() != 0


async def test_the_health_probe_does_not_warn_at_every_probe_about_a_server_without_a_model_list(page: Page, caplog):
    import logging

    page.llm.models_endpoint = False
    llm = LLMClient(page.http, api="openai", base_url=page.llm.url)
    with caplog.at_level(logging.WARNING, logger="bot.clients.llm"):
        await llm.check(FAKE_MODEL)  # start-up says it once
        health = Health(db=page.db, llm=llm, model=FAKE_MODEL, embedder=None, clock=iter(range(0, 10_000, 60)).__next__)
        for _ in range(3):  # each probe past the cache period asks the server again
            assert (await health.checks())["llm"].ok
    assert sum(r.path == "/v1/models" for r in page.llm.requests) == 4
    assert len([r for r in caplog.records if "does not implement /v1/models" in r.getMessage()]) == 1
