-- Exchanges: every message addressed to the bot and its reply, kept until the user erases
-- their data (/erase-me). An answered exchange whose reflected_at is NULL after a restart is
-- reflected when the bot comes back.
CREATE TABLE exchanges (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id             TEXT    NOT NULL,
    user_name           TEXT    NOT NULL,
    story_id            TEXT    NOT NULL,
    place               TEXT    NOT NULL,
    message_id          TEXT,
    user_message        TEXT    NOT NULL,
    reply               TEXT,
    created_at          TEXT    NOT NULL,
    answered_at         TEXT,
    reflected_at        TEXT,
    reflection_attempts INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT
);
CREATE INDEX exchanges_pending ON exchanges (reflected_at, answered_at);
CREATE INDEX exchanges_by_user ON exchanges (user_id, story_id, id);

-- One row per turn's selection, so that /why can explain the last turn after a restart.
CREATE TABLE turns (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     TEXT    NOT NULL,
    story_id    TEXT    NOT NULL,
    place       TEXT    NOT NULL,
    query       TEXT    NOT NULL,
    degraded    INTEGER NOT NULL,
    detail      TEXT    NOT NULL,   -- JSON: slots (id, reason, score, type, pinned, text), rules, story
    created_at  TEXT    NOT NULL
);
CREATE INDEX turns_by_user_story ON turns (user_id, story_id, id);

-- Persisted per-user turn counters: degraded turns must stay visible after a restart.
CREATE TABLE turn_stats (
    user_id         TEXT    PRIMARY KEY,
    turns           INTEGER NOT NULL DEFAULT 0,
    degraded_turns  INTEGER NOT NULL DEFAULT 0
);

-- Per-user choices. share_memories: memories learned in DMs or another guild may be used here.
CREATE TABLE user_settings (
    user_id         TEXT    PRIMARY KEY,
    share_memories  INTEGER NOT NULL DEFAULT 0 CHECK (share_memories IN (0, 1))
);
