"""`python -m bot doctor`: every set-up mistake `make run` would meet, found in one run.

One line per check, ✓ or ✗, and after a ✗ what to do (bot/doctor/finding.py). The groups run
side by side, each call bounded: what is on this machine (bot/doctor/local.py: settings and
characters, the database, the owner's page), the models (bot/doctor/models.py: the LLM, the
embedder) and the Discord application (bot/doctor/discord_app.py); a group stops at its first
failure that the next checks depend on (a refused token hides the intents). Reads and asks;
changes nothing: no migration is applied, no file is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import httpx

from bot.clients.redaction import redact
from bot.config import Settings
from bot.doctor.discord_app import check_discord
from bot.doctor.finding import Finding, bad
from bot.doctor.local import check_backups, check_characters, check_postgres, check_settings, check_sqlite, check_web
from bot.doctor.models import check_embedder, check_llm

__all__ = ["Finding", "check_settings", "diagnose", "report"]


async def _bounded(name: str, job: Awaitable[list[Finding]]) -> list[Finding]:
    try:
        return await job
    except Exception as exc:  # a check that breaks is a finding, not the end of the run
        return [bad(name, f"the check failed: {type(exc).__name__}: {exc}", "report it with this line")]


async def diagnose(settings: Settings) -> list[Finding]:
    found, cast = check_characters(settings)
    async with httpx.AsyncClient(trust_env=False) as http:
        storage = settings.storage
        database: Awaitable[list[Finding]]
        if storage.database_url:
            database = check_postgres(storage.database_url)
        else:
            database = asyncio.to_thread(lambda: check_sqlite(storage.database_path) + check_backups(storage))
        groups = await asyncio.gather(
            _bounded("database", database),
            _bounded("LLM", check_llm(settings, http, cast)),
            _bounded("embedder", check_embedder(settings, http)),
            _bounded("Discord", check_discord(settings, cast, http)),
        )
    for group in groups:
        found += group
    return found + check_web(settings)


def report(findings: list[Finding]) -> str:
    failed = sum(not f.ok for f in findings)
    # Whatever a check quotes (a URL, a driver's error): no password or token is printed.
    lines = [redact(f.line()) for f in findings]
    lines.append(
        f"{len(findings) - failed} passed, {failed} to fix." if failed else f"All {len(findings)} checks pass."
    )
    return "\n".join(lines)
