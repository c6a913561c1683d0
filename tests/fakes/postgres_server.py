"""A throwaway PostgreSQL cluster for the tests: initdb in a temporary folder, the server on a
Unix socket in that folder (no TCP), one fresh database per test cloned from a migrated template.

As root, initdb and postgres refuse to run: they run as the `postgres` user (runuser), and the
folder belongs to that user. Where no server binary exists, `start()` returns the reason and
the PostgreSQL half of the suite is skipped with it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATE = "echo_template"
SHARED = "echo_shared"


def _binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "pg_ctl").exists():
            return candidate
    return None


@dataclass
class Cluster:
    folder: Path
    bin: Path
    run_as: list[str]
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))
    _shared_made: bool = False

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.folder}"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.run_as, *args], check=True, capture_output=True, text=True, timeout=120)

    async def new_database(self) -> str:
        """A fresh, migrated database: its URL."""
        import asyncpg

        name = f"echo_test_{os.getpid()}_{next(self._names)}"
        conn = await asyncpg.connect(self.url("postgres"))
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE}')
        finally:
            await conn.close()
        return self.url(name)

    async def reset_database(self) -> str:
        """The shared test database, emptied (every row deleted, ids restarted): its URL.

        A fresh database per test would be CREATE DATABASE, about a second on a busy machine;
        this is some 50 ms and leaves the same thing: the migrated schema, no rows."""
        import asyncpg

        url = self.url(SHARED)
        if not self._shared_made:
            await self._create(SHARED, TEMPLATE)
            self._shared_made = True
        conn = await asyncpg.connect(url)
        try:
            # DELETE, not TRUNCATE: on a few rows it is ten times faster (no new files).
            async with conn.transaction():
                for (table,) in await conn.fetch(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename != 'schema_version'"
                ):
                    await conn.execute(f'DELETE FROM "{table}"')
                for (sequence,) in await conn.fetch(
                    "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
                ):
                    await conn.execute(f'ALTER SEQUENCE "{sequence}" RESTART')
        finally:
            await conn.close()
        return url

    async def _create(self, name: str, template: str) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.url("postgres"))
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {template}')
        finally:
            await conn.close()

    async def empty_database(self) -> str:
        """A fresh database with no schema at all (for migration tests): its URL."""
        import asyncpg

        name = f"echo_empty_{os.getpid()}_{next(self._names)}"
        conn = await asyncpg.connect(self.url("postgres"))
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        finally:
            await conn.close()
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Cluster | str:
    """A running cluster with a migrated template database, or why there is none."""
    bin_dir = _binaries()
    if bin_dir is None:
        return "no PostgreSQL server binary (pg_ctl, initdb) on this machine: install PostgreSQL 15"
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "the asyncpg package is not installed (pip install -e '.[dev]')"
    run_as: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="echo-pg-"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(folder, ignore_errors=True)
            return "running as root and there is no `postgres` user to run the server as"
        os.chown(folder, user.pw_uid, user.pw_gid)
        folder.chmod(0o700)
        run_as = ["runuser", "-u", "postgres", "--"]
    cluster = Cluster(folder, bin_dir, run_as)
    data = folder / "data"
    try:
        cluster._run(
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        options = (
            f"-k {folder} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB"
        )
        cluster._run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start")
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        shutil.rmtree(folder, ignore_errors=True)
        return f"the throwaway PostgreSQL cluster did not start: {exc} {detail}".strip()
    try:
        # In a thread of its own: the fixture may be set up from inside a running event loop.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _make_template(cluster)).result()
    except Exception:
        cluster.stop()
        raise
    return cluster


async def _make_template(cluster: Cluster) -> None:
    import asyncpg

    from bot.clients.postgres import PostgresDatabase

    conn = await asyncpg.connect(cluster.url("postgres"))
    try:
        await conn.execute(f"CREATE DATABASE {TEMPLATE}")
    finally:
        await conn.close()
    db = await PostgresDatabase.open(cluster.url(TEMPLATE))
    await db.close()
