"""Entry point: `python -m bot` runs the Discord bot, `python -m bot chat --user NAME` the terminal chat,
`python -m bot migrate-store --from sqlite:///… --to postgresql://…` moves the database,
`python -m bot backup [FILE]` / `restore FILE` back it up and put a backup back,
`python -m bot doctor` checks the set-up, `python -m bot import FILE --user ID` brings a past
conversation into memory."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from bot.clients.redaction import redact, redact_logs
from bot.config import load_settings
from bot.errors import BackupError, CharacterError, ConfigError, LLMError, MigrationError, MoveRefused, StartupError

log = logging.getLogger("bot")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bot", description="Écho, a character bot that remembers.")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the Discord bot (the default)")
    chat = sub.add_parser("chat", help="talk to the character in this terminal, no Discord needed")
    chat.add_argument("--user", required=True, help="your name in this chat (memories are kept per name)")
    chat.add_argument("--channel", default="main", help="the story to talk in (default: main)")
    chat.add_argument(
        "--language", help="the language of the chat's own texts: en, fr, es or de (default: your LANG's, else en)"
    )
    move = sub.add_parser("migrate-store", help="copy the SQLite database into PostgreSQL, then verify it")
    move.add_argument("--from", dest="source", required=True, help="sqlite:///path/to/echo.sqlite3")
    move.add_argument("--to", dest="target", required=True, help="postgresql://user:password@host:5432/echo")
    move.add_argument("--replace", action="store_true", help="empty a target that holds other rows first")
    sub.add_parser("doctor", help="check everything the bot needs, one line per check, with the fix")
    save = sub.add_parser("backup", help="a checked copy of the SQLite database, safe while the bot runs")
    save.add_argument("file", nargs="?", type=Path, help="where to write it (default: BACKUP_DIR/echo-<time>.sqlite3)")
    put = sub.add_parser("restore", help="put a backup in place of the SQLite database, with the bot stopped")
    put.add_argument("file", type=Path, help="the backup to restore")
    bring = sub.add_parser(
        "import", help="bring a past conversation into memory: a SillyTavern chat (.jsonl), a "
        "DiscordChatExporter export (.json) or a transcript of `Name: text` lines",
    )  # fmt: skip
    bring.add_argument("file", type=Path, help="the conversation's file")
    bring.add_argument("--user", required=True, help="the person's Discord id (a terminal chat's name)")
    bring.add_argument("--character", help="the key of the character who remembers it (default: the default one)")
    bring.add_argument("--name", help="the person's name in a transcript, when it cannot be told apart")
    bring.add_argument("--dry-run", action="store_true", help="print what would be imported; write nothing")
    return parser.parse_args(argv)


_PG_DUMP = (
    "DATABASE_URL is PostgreSQL: back it up with its own tools, safe while the bot runs:\n"
    '  pg_dump --format=custom --file=echo.dump "$DATABASE_URL"\n'
    "and restore with the bot stopped:\n"
    '  pg_restore --clean --if-exists --dbname="$DATABASE_URL" echo.dump'
)


async def _doctor() -> int:
    from bot.doctor import check_settings, diagnose, report

    settings, findings = check_settings()
    if settings is not None:
        # Each check says what failed; the clients' own log lines would say it twice.
        logging.getLogger().setLevel(logging.ERROR)
        findings += await diagnose(settings)
    print(report(findings))
    return 0 if all(f.ok for f in findings) else 1


def _backup(args: argparse.Namespace) -> int:
    from bot.clients.backup import backup, restore, scheduled_name
    from bot.clients.erasures import ledger_paths

    storage = load_settings().storage
    if storage.database_url:
        print(_PG_DUMP, file=sys.stderr)
        return 2
    try:
        if args.command == "backup":
            target = args.file or storage.backups / scheduled_name()
            print(backup(storage.database_path, target).describe())
        else:
            # The ledgers beside the database, in BACKUP_DIR and beside the backup: a restore of an
            # older backup never brings back someone erased since.
            ledgers = ledger_paths(storage.database_path, storage.backups, args.file.parent)
            print(restore(args.file, storage.database_path, ledgers=ledgers).describe())
    except BackupError as exc:
        print(
            f"Nothing was {'backed up' if args.command == 'backup' else 'restored'}: {redact(str(exc))}",
            file=sys.stderr,
        )
        return 1
    return 0


async def _migrate_store(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bot.clients.databases import is_postgres_url, open_postgres, open_sqlite
    from bot.clients.postgres import describe
    from bot.memory.stores.move import move

    if not args.source.startswith("sqlite:///") or not is_postgres_url(args.target):
        raise StartupError("migrate-store copies --from sqlite:///path/to/echo.sqlite3 --to postgresql://…/echo")
    path = Path(args.source.removeprefix("sqlite:///"))
    if not path.is_file():
        raise StartupError(f"there is no SQLite database at {path}")
    source = await open_sqlite(path)
    try:
        target = await open_postgres(args.target)
        try:
            reports = await move(source, target, replace=args.replace)
        except MoveRefused as exc:
            print(f"Nothing copied: {redact(str(exc))}", file=sys.stderr)
            return 1
        finally:
            await target.close()
    finally:
        await source.close()
    for r in reports:
        print(f"{r.table:18} {r.rows:>9} rows  checksum {r.checksum}  {'copied' if r.copied else 'already there'}")
    print(f"{path} -> {describe(args.target)}: every table verified (rows and checksums match).")
    return 0


async def _chat(args: argparse.Namespace) -> None:
    # Bytes that are not UTF-8 (a terminal in Latin-1, a pasted binary) are read, not fatal:
    # they arrive as lone surrogates, which the engine makes storable; a path keeps its bytes.
    for stream in (sys.stdin, sys.stdout):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")
    settings = load_settings()
    # The terminal is the conversation: only warnings and errors go to the log.
    set_log_level(max(logging.WARNING, logging.getLevelName(settings.logging.level)))
    # Each part is imported once the step before it passed: a start stopped by a setting's
    # mistake (an operator's typo, the tests' many processes) does not load what it never runs.
    from bot.app import open_services

    async with open_services(settings, web_page=False) as services:
        from bot.terminal.chat import run_chat

        await run_chat(
            services.engine,
            user=args.user,
            channel=args.channel,
            stream_replies=settings.discord.stream_replies,
            language=args.language
            or os.environ.get("LC_ALL")
            or os.environ.get("LC_MESSAGES")
            or os.environ.get("LANG")
            or "",
        )


async def _import(args: argparse.Namespace) -> int:
    from bot.importer import ImportArgs, run_import
    from bot.memory.model import PersonId

    settings = load_settings()
    set_log_level(max(logging.WARNING, logging.getLevelName(settings.logging.level)))
    person = PersonId(args.user.strip())
    return await run_import(settings, ImportArgs(args.file, person, args.character, args.name, args.dry_run))


async def _discord() -> None:
    settings = load_settings()
    set_log_level(logging.getLevelName(settings.logging.level))
    # Before anything is opened: without a token nothing is created, not even the database.
    token = settings.discord.require_discord_token()
    # Imported step by step, as in _chat.
    from bot.app import open_services

    async with open_services(settings) as services:
        from cogs.bot import run_discord

        await run_discord(services, token)


async def _until_signalled(job: Coroutine[Any, Any, None]) -> None:
    """Run `job`; SIGTERM (docker stop, systemd) cancels it like Ctrl-C, so every `finally` of
    the shutdown runs: reflections finish or stay pending, the database closes."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):  # not on this platform / not the main thread
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        await job
    except asyncio.CancelledError:
        log.info("stopped by a signal")


# Libraries that log each routine step at INFO: the scheduler each run of a job (thousands of
# lines a day), httpx each model call. Their lines show at DEBUG only.
CHATTY_LOGGERS = ("apscheduler", "httpx")


def set_log_level(level: int) -> None:
    logging.getLogger().setLevel(level)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    set_log_level(logging.INFO)
    redact_logs()
    try:
        if args.command == "doctor":
            return asyncio.run(_doctor())
        if args.command in ("backup", "restore"):
            return _backup(args)
        if args.command == "migrate-store":
            return asyncio.run(_migrate_store(args))
        if args.command == "import":
            return asyncio.run(_import(args))
        if args.command == "chat":
            asyncio.run(_until_signalled(_chat(args)))
        else:
            asyncio.run(_until_signalled(_discord()))
    except (StartupError, ConfigError, CharacterError, LLMError, MigrationError) as exc:
        print(f"\nÉcho cannot start.\n\n{redact(str(exc))}\n", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
