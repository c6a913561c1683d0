"""The keys a person's data is filed under: their own id, and the derived keys of characters with
a memory of their own (bot/characters/cast.py), found in every table that holds user data, for
/export and /erase-me."""

from __future__ import annotations

import logging

from bot.clients.storage import (
    Database,
    fetch_all,
)
from bot.memory.model import (
    OwnerKey,
    PersonId,
)

log = logging.getLogger(__name__)


# Every table keyed by user_id: a derived key that holds rows in only one of them (a turn_log
# line, an archived memory) is still that person's data, found by /export and /erase-me.
_OWNER_KEYS_SQL = (
    "SELECT user_id FROM memories WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_history WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM exchanges WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM exchange_replies WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM exchange_messages WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_sources WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_versions WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_version_log WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM memory_changes WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM turns WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM turn_stats WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM turn_log WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM user_settings WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_summaries WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_anchors WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_positions WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_state WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM story_history WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM consolidations WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
    "UNION SELECT user_id FROM consolidation_members WHERE user_id = ? OR user_id LIKE ? ESCAPE '\\' "
)


_OWNER_KEYS_TABLES = _OWNER_KEYS_SQL.count("SELECT ")


async def owner_keys(db: Database, user_id: PersonId) -> list[OwnerKey]:
    """Every owner key that holds data of one person: their own id and the derived keys
    `<id>@<character>` of characters with a memory of their own (bot.characters.cast)."""
    derived = user_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "@%"
    rows = await fetch_all(db.reader, _OWNER_KEYS_SQL, (user_id, derived) * _OWNER_KEYS_TABLES)
    found = sorted({OwnerKey(r["user_id"]) for r in rows} - {OwnerKey(user_id)})
    return [OwnerKey(user_id), *found]
