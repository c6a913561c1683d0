-- Per-story memory beside the 24 slots: the summary, code-held anchors, the character's
-- positions and its bounded state. A story is a channel or thread; every row belongs to one user
-- in one story, and every statement filters on both.

-- The full summary, rewritten by each reflection; the previous text goes to story_history.
CREATE TABLE story_summaries (
    user_id     TEXT NOT NULL,
    story_id    TEXT NOT NULL,
    summary     TEXT NOT NULL CHECK (length(summary) > 0),
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (user_id, story_id)
);

-- Key facts held by the code above the summary; removed only with a reason, archived first.
CREATE TABLE story_anchors (
    id          INTEGER PRIMARY KEY,
    user_id     TEXT NOT NULL,
    story_id    TEXT NOT NULL,
    text        TEXT NOT NULL CHECK (length(text) > 0),
    created_at  TEXT NOT NULL,
    cause       TEXT NOT NULL
);
CREATE INDEX story_anchors_by_story ON story_anchors (user_id, story_id);

-- What the character thinks about a subject. subject_key is the subject's identity (content
-- words, see story.subject_key); updated_at moves only when a justification re-anchors it.
CREATE TABLE story_positions (
    id             INTEGER PRIMARY KEY,
    user_id        TEXT NOT NULL,
    story_id       TEXT NOT NULL,
    subject        TEXT NOT NULL CHECK (length(subject) > 0),
    subject_key    TEXT NOT NULL,
    stance         TEXT NOT NULL CHECK (length(stance) > 0),
    justification  TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    UNIQUE (user_id, story_id, subject_key)
);

-- Bounded values declared in the character file (mood, trust...). Names no longer declared stay
-- stored but are neither served nor changed.
CREATE TABLE story_state (
    user_id     TEXT NOT NULL,
    story_id    TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       REAL NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (user_id, story_id, name)
);

-- Written before each change, in the same transaction: the replaced summary, the removed anchor
-- (with the model's reason), the previous or evicted position, each state change. payload is
-- JSON holding the previous version; item_id is the anchor's or position's id.
CREATE TABLE story_history (
    id          INTEGER PRIMARY KEY,
    user_id     TEXT NOT NULL,
    story_id    TEXT NOT NULL,
    operation   TEXT NOT NULL CHECK (operation IN (
                    'summary_replaced', 'anchor_removed', 'position_updated',
                    'position_evicted', 'state_changed')),
    item_id     INTEGER,
    payload     TEXT NOT NULL,
    reason      TEXT,
    cause       TEXT NOT NULL,
    at          TEXT NOT NULL
);
CREATE INDEX story_history_by_story ON story_history (user_id, story_id, at);
