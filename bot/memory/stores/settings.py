"""SQLite storage of each user's own settings (today: whether memories cross places).

Every statement filters on user_id. Functions taking `conn` join the caller's write transaction.
"""

from __future__ import annotations

from bot.clients.storage import Connection, Database, fetch_one
from bot.memory.model import OwnerKey
from bot.memory.stores.followups import erase_user_followups
from bot.memory.stores.imports import erase_user_imports


async def sharing(db: Database, user_id: OwnerKey) -> bool:
    row = await fetch_one(db.reader, "SELECT share_memories FROM user_settings WHERE user_id = ?", (user_id,))
    return bool(row and row["share_memories"])


async def set_sharing(db: Database, user_id: OwnerKey, share: bool) -> None:
    async with db.write() as conn:
        await conn.execute(
            "INSERT INTO user_settings (user_id, share_memories) VALUES (?, ?) "
            "ON CONFLICT (user_id) DO UPDATE SET share_memories = excluded.share_memories",
            (user_id, int(share)),
        )


async def erase_user_settings(conn: Connection, user_id: OwnerKey) -> None:
    """Their choices, their follow-ups and check-ins (none is ever sent after) and the record of
    their imports included."""
    await conn.execute("DELETE FROM user_settings WHERE user_id = ?", (user_id,))
    await erase_user_followups(conn, user_id)
    await erase_user_imports(conn, user_id)
