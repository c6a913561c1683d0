-- The memory store: one row per memory, every row owned by one user.
CREATE TABLE memories (
    -- AUTOINCREMENT: an id is never reused, so a stale id shown to the model can never
    -- designate a newer memory, and a deleted memory can be restored under its own id.
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id          TEXT    NOT NULL,
    text             TEXT    NOT NULL CHECK (length(text) > 0),
    type             TEXT    NOT NULL CHECK (type IN ('fact', 'preference', 'promise', 'episode', 'rule')),
    scope            TEXT    NOT NULL DEFAULT 'global' CHECK (scope IN ('global', 'story')),
    story_id         TEXT,
    place            TEXT,
    confidence       REAL    NOT NULL DEFAULT 1.0,
    pinned           INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    expires_at       TEXT,
    source           TEXT,
    content_hash     TEXT    NOT NULL,
    times_candidate  INTEGER NOT NULL DEFAULT 0,
    times_served     INTEGER NOT NULL DEFAULT 0,
    times_semantic   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX memories_by_user ON memories (user_id, type);

-- Every replace, merge and delete archives the previous version here first, in the same
-- transaction. Rows outlive their memory: that is what makes a wrong delete repairable.
CREATE TABLE memory_history (
    id           INTEGER PRIMARY KEY,
    user_id      TEXT    NOT NULL,
    memory_id    INTEGER NOT NULL,
    operation    TEXT    NOT NULL,
    text         TEXT    NOT NULL,
    type         TEXT    NOT NULL,
    scope        TEXT    NOT NULL,
    story_id     TEXT,
    place        TEXT,
    confidence   REAL    NOT NULL,
    pinned       INTEGER NOT NULL,
    created_at   TEXT    NOT NULL,
    updated_at   TEXT    NOT NULL,
    expires_at   TEXT,
    source       TEXT,
    archived_at  TEXT    NOT NULL,
    cause        TEXT    NOT NULL,
    restored_at  TEXT
);
CREATE INDEX memory_history_by_user ON memory_history (user_id, archived_at);
