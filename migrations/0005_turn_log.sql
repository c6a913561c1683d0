-- One row per turn, kept until the user erases their data (/erase-me): the owner's page draws
-- turns over time, latencies and prompt sizes from it, where `turns` keeps only the last
-- selections of each story for /why.
CREATE TABLE turn_log (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id            TEXT    NOT NULL,
    story_id           TEXT    NOT NULL,
    outcome            TEXT    NOT NULL CHECK (outcome IN ('answered', 'degraded', 'failed')),
    memory_ms          INTEGER,
    reply_ms           INTEGER,
    prompt_tokens      INTEGER,     -- as the LLM server counted them; NULL when it did not say
    completion_tokens  INTEGER,
    context_tokens     INTEGER,     -- the context asked of the server (Ollama's num_ctx), if any
    context_full       INTEGER NOT NULL DEFAULT 0 CHECK (context_full IN (0, 1)),
    created_at         TEXT    NOT NULL
);
CREATE INDEX turn_log_by_time ON turn_log (created_at);
CREATE INDEX turn_log_by_user ON turn_log (user_id, created_at);
