-- Follow-ups on dated memories, check-ins and imports; kept in step with migrations/0011_followups_imports.sql
-- (SQLite), which says what each state means.
CREATE TABLE followups (
    user_id             TEXT COLLATE "C" NOT NULL,
    memory_id           BIGINT  NOT NULL,
    text                TEXT COLLATE "C" NOT NULL,
    content_hash        TEXT COLLATE "C" NOT NULL,
    event_at            TEXT COLLATE "C" NOT NULL,
    story_id            TEXT COLLATE "C" NOT NULL,
    state               TEXT COLLATE "C" NOT NULL CHECK (state IN (
        'offered', 'asked', 'spent', 'dropped', 'claimed', 'checked_in', 'answered')),
    turns               INTEGER NOT NULL DEFAULT 0,
    exchange_id         BIGINT,
    answer_exchange_id  BIGINT,
    claimed_by          TEXT COLLATE "C",
    created_at          TEXT COLLATE "C" NOT NULL,
    updated_at          TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (user_id, memory_id)
);
CREATE INDEX followups_by_state ON followups (user_id, state, updated_at);

CREATE TABLE checkin_settings (
    user_id     TEXT COLLATE "C" PRIMARY KEY,
    enabled     INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    timezone    TEXT COLLATE "C",
    notice      TEXT COLLATE "C",
    updated_at  TEXT COLLATE "C" NOT NULL
);
CREATE INDEX checkin_settings_enabled ON checkin_settings (enabled);

CREATE TABLE imports (
    user_id      TEXT COLLATE "C" NOT NULL,
    story_id     TEXT COLLATE "C" NOT NULL,
    source       TEXT COLLATE "C" NOT NULL,
    exchanges    INTEGER NOT NULL,
    finished_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (user_id, story_id, source)
);
