"""Moving a large bot to PostgreSQL: 100,000 memories copied by `migrate-store`, /export compared.

Run from the repository root: `python bench/move_store.py` (options: --memories 100000
--users 10 --database-url postgresql://…; without a URL a throwaway cluster is started with the
tests' helper, which needs initdb and pg_ctl on the PATH).

An SQLite database is filled through the store (memories with their history, vectors of the
offline embedder's dimension), every user's /export is taken, the database is copied with
bot.memory.stores.move.move (what `python -m bot migrate-store` runs), every user's /export is
taken again on PostgreSQL, and both must be identical. Times are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.characters.character import load_character
from bot.clients.db import SQLiteDatabase
from bot.clients.llm import LLMClient
from bot.clients.postgres import PostgresDatabase
from bot.config import load_settings
from bot.engine import Engine
from bot.memory.model import (
    Cause,
    NewMemory,
    content_hash,
    utcnow,
)
from bot.memory.stores.memories import archive, insert_memory
from bot.memory.stores.move import move
from bot.memory.stores.vectors import VectorRow, store_vectors

DIM = 384
BATCH = 2000


async def fill(db: SQLiteDatabase, memories: int, users: int) -> None:
    rng = np.random.default_rng(16)
    now = utcnow()
    made = 0
    while made < memories:
        async with db.write() as conn:
            rows = []
            for _ in range(min(BATCH, memories - made)):
                user = f"user-{made % users:02d}"
                text = f"L'utilisateur a raconté le souvenir numéro {made} au sujet de {made % 97}."
                memory_id = await insert_memory(conn, user, NewMemory(text=text, type="episode"), now=now)
                if made % 10 == 0:
                    await archive(conn, user, memory_id, "replace", cause=Cause("edit"), now=now)
                rows.append((memory_id, user, text))
                made += 1
            await store_vectors(
                conn,
                [
                    VectorRow(i, u, "bench-model", content_hash(t), rng.random(DIM, dtype=np.float32))
                    for i, u, t in rows
                ],
            )


async def exports(db: SQLiteDatabase | PostgresDatabase, users: int) -> dict[str, object]:
    settings = load_settings(_env_file=None, llm_base_url="http://127.0.0.1:9", embeddings="local")
    async with httpx.AsyncClient(trust_env=False) as http:
        engine = Engine(
            db=db,
            llm=LLMClient(http, api="ollama", base_url="http://127.0.0.1:9"),
            embedder=None,
            settings=settings,
            character=load_character(None),
        )
        out = {}
        for n in range(users):
            data = await engine.privacy.export_person(f"user-{n:02d}")
            data.pop("exported_at", None)
            out[f"user-{n:02d}"] = data
        await engine.close()
    return out


async def main(memories: int, users: int, url: str | None) -> int:
    cluster = None
    if url is None:
        from tests.fakes import postgres_server

        started = postgres_server.start()
        if isinstance(started, str):
            print(f"no PostgreSQL to run against: {started}")
            return 2
        cluster = started
        url = await cluster.reset_database()
    try:
        with tempfile.TemporaryDirectory() as directory:
            source = await SQLiteDatabase.open(Path(directory) / "big.sqlite3")
            t = time.perf_counter()
            await fill(source, memories, users)
            fill_s = time.perf_counter() - t
            t = time.perf_counter()
            before = await exports(source, users)
            export_sqlite_s = time.perf_counter() - t
            target = await PostgresDatabase.open(url)
            t = time.perf_counter()
            reports = await move(source, target, replace=True)
            move_s = time.perf_counter() - t
            t = time.perf_counter()
            after = await exports(target, users)
            export_pg_s = time.perf_counter() - t
            await target.close()
            await source.close()
    finally:
        if cluster is not None:
            cluster.stop()
    rows = {r.table: r.rows for r in reports}
    same = before == after
    print(f"Store copy: {memories:,} memories of {users} users, {rows['memory_history']:,} history rows, "
          f"{rows['memory_vectors']:,} vectors of {DIM} floats")  # fmt: skip
    print(f"  fill SQLite through the store       {fill_s:8.1f} s")
    print(f"  /export of every user on SQLite     {export_sqlite_s:8.1f} s")
    print(f"  migrate-store (copy + verify)       {move_s:8.1f} s")
    print(f"  /export of every user on PostgreSQL {export_pg_s:8.1f} s")
    print(f"{'OK' if same else 'FAIL'}: every user's /export is {'identical' if same else 'DIFFERENT'} after the copy")
    return 0 if same else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.memories, args.users, args.database_url)))
