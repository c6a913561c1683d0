"""The checks of what is on this machine: the settings, the characters, the database and its
backups, the owner's page's port."""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import stat
import tempfile
from pathlib import Path

from bot.characters.cast import Cast, load_cast
from bot.clients.db import POSTGRES_MIGRATIONS_DIR, list_migrations, schema_version
from bot.config import Settings, StorageSettings, load_settings
from bot.doctor.finding import Finding, bad, good
from bot.errors import CharacterError, ConfigError

# Under this much free space a backup, a VACUUM or a busy week of writes can fill the disk.
MIN_FREE_BYTES = 200_000_000
# A database server's first answer.
DATABASE_SECONDS = 10.0


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def check_settings() -> tuple[Settings | None, list[Finding]]:
    """The settings, or None when they are invalid; a key of .env that is no setting (a typo
    the bot would ignore in silence) is a finding of its own."""
    config_log = logging.getLogger("bot.config")
    seen, propagate = _Collect(), config_log.propagate
    config_log.addHandler(seen)
    config_log.propagate = False
    try:
        settings = load_settings()
    except ConfigError as exc:
        return None, [
            bad("settings", str(exc), "correct them in .env (see .env.example); nothing else can be checked before")
        ]
    finally:
        config_log.removeHandler(seen)
        config_log.propagate = propagate
    if seen.lines:
        return settings, [bad("settings", line, "correct the key, or remove it") for line in seen.lines]
    return settings, [good("settings", "read")]


def check_characters(settings: Settings) -> tuple[list[Finding], Cast | None]:
    storage = settings.storage
    try:
        cast = load_cast(storage.characters_dir, storage.character_file)
    except CharacterError as exc:
        return [bad("characters", str(exc), "correct the file named above, or CHARACTER_FILE / CHARACTERS_DIR")], None
    names = ", ".join(c.name for c in cast.characters.values())
    found = [good("characters", f"{len(cast.characters)} loaded ({names})")]
    for character in cast.characters.values():
        lore = character.lore
        ignored = character.ignored + (lore.ignored if lore is not None else ())
        if ignored:
            found.append(
                good("characters", f"{character.name}: ignored (Écho does not act on them): {', '.join(ignored)}")
            )
        if lore is not None and lore.constant_chars > (budget := lore.budget(settings.engine.lore_budget_chars)):
            setting = "its lorebook's budget" if lore.budget_chars is not None else "LORE_BUDGET_CHARS"
            found.append(
                bad(
                    "lore",
                    f"{character.name}: the entries always in (constant) take {lore.constant_chars} characters, over the "
                    f"{budget}-character budget: they are kept, and no other entry fits",
                    f"raise {setting} above {lore.constant_chars}, or shorten the constant entries",
                )
            )
    return found, cast


def _nearest_folder(path: Path) -> Path:
    return next(p for p in path.parents if p.exists())


def check_backups(storage: StorageSettings) -> list[Finding]:
    """Where scheduled backups go can be written (BACKUP_EVERY_HOURS on a SQLite database)."""
    if not storage.backup_every_hours or storage.database_url:
        return []
    folder = storage.backups if storage.backups.exists() else _nearest_folder(storage.backups)
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a folder")
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return [
            bad(
                "backups",
                f"BACKUP_DIR {storage.backups} cannot be written ({exc.strerror or exc})",
                "create it writable for this user, or set BACKUP_DIR elsewhere",
            )
        ]
    return [
        good("backups", f"every {storage.backup_every_hours:g} h into {storage.backups}, {storage.backup_keep} kept")
    ]


def check_sqlite(path: Path) -> list[Finding]:
    folder = path.parent if path.parent.exists() else _nearest_folder(path)
    found: list[Finding] = []
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is not writable by uid {os.getuid()}")
    except OSError as exc:
        read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
        why = "it is on a read-only file system" if read_only else (exc.strerror or str(exc))
        return [
            bad(
                "database",
                f"cannot write in {folder} ({why})",
                "mount the volume read-write, or give this user the folder (in Docker: chown 1000:1000 "
                "<folder>), or set DATABASE_PATH to a writable place",
            )
        ]
    found.append(good("database", f"{path} writable" if path.exists() else f"{path} will be created in {folder}"))
    found.append(_privacy(path))
    known = len(list_migrations())
    if path.exists():
        try:
            version = schema_version(path)
        except sqlite3.Error as exc:
            found.append(
                bad("migrations", f"{path} cannot be read ({exc})", "restore a backup: python -m bot restore FILE")
            )
            version = None
        if version is not None:
            found.append(_migrations(version, known))
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    if free < MIN_FREE_BYTES:
        found.append(
            bad("free disk", f"{free / 1e6:.0f} MB free in {folder}", f"free at least {MIN_FREE_BYTES / 1e6:.0f} MB")
        )
    else:
        found.append(good("free disk", f"{free / 1e9:.1f} GB free"))
    return found


def _privacy(path: Path) -> Finding:
    """Whether users other than the file's owner may read the database or its -wal and -shm:
    they hold every memory and transcript (Écho creates them 0600; an older or copied file may
    be more open)."""
    files = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
    open_to_others = [f"{p.name} ({stat.S_IMODE(p.stat().st_mode):o})" for p in files if p.stat().st_mode & 0o077]
    if open_to_others:
        return bad(
            "database privacy",
            f"{', '.join(open_to_others)} can be read by other users of this machine: every memory and transcript is there",
            f"chmod 600 {path}*",
        )
    return good(
        "database privacy", "readable by this user only" if files else "will be created readable by this user only"
    )


async def check_postgres(url: str) -> list[Finding]:
    import asyncpg

    from bot.clients.postgres import describe, probe

    try:
        read_only, version = await probe(url, timeout=DATABASE_SECONDS)
    except (
        OSError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        TimeoutError,
    ) as exc:  # a bad option is an InterfaceError
        return [
            bad(
                "database",
                f"{describe(url)} refuses: {exc}",
                "check DATABASE_URL, that the server runs and the database exists",
            )
        ]
    if read_only:
        return [bad("database", f"{describe(url)} is read-only (a standby?)", "point DATABASE_URL at the primary")]
    return [
        good("database", f"{describe(url)} answers and accepts writes"),
        _migrations(version, len(list_migrations(POSTGRES_MIGRATIONS_DIR))),
    ]


def _migrations(version: int, known: int) -> Finding:
    if version > known:
        return bad(
            "migrations", f"schema {version}, newer than this Écho ({known})", "update Écho, or restore an older backup"
        )
    pending = known - version
    return good("migrations", "current" if not pending else f"{pending} to apply, automatically, at the next start")


def check_web(settings: Settings) -> list[Finding]:
    web = settings.web
    if not web.enabled:
        return [good("owner's page", "off (WEB_ENABLED=false)")]
    with socket.socket(socket.AF_INET6 if ":" in web.host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((web.host, web.port))
        except OSError as exc:
            return [
                bad(
                    "owner's page",
                    f"cannot listen on {web.host}:{web.port} ({exc.strerror or exc})",
                    "another program (a running Écho?) uses it: set WEB_PORT to a free port, or WEB_HOST to an address of this machine",
                )
            ]
    return [good("owner's page", f"{web.host}:{web.port} free")]
