-- Follow-ups on dated memories (issue 34). A memory whose date (expires_at) has passed is
-- followed up once: by the conversation, at the person's next message within the window, or by
-- a check-in, a message the character sends first (opt-in). One row per memory so followed up,
-- kept until the person erases their data: a memory is never followed up twice.
--   offered     carried by the person's turns, until the character asks or FOLLOWUP_TURNS pass
--   asked       the character asked; the person's next message in the story is its answer
--   spent       FOLLOWUP_TURNS turns carried it without the question
--   dropped     the memory was forgotten or edited since: never asked about
--   claimed     one bot process is writing and sending its check-in (claimed_by, updated_at)
--   checked_in  the check-in was sent; the person's next message in that story is its answer
--   answered    that answer was saved (answer_exchange_id): its reflection is told of the event
CREATE TABLE followups (
    user_id             TEXT    NOT NULL,
    memory_id           INTEGER NOT NULL,
    text                TEXT    NOT NULL,
    content_hash        TEXT    NOT NULL,
    event_at            TEXT    NOT NULL,
    story_id            TEXT    NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN (
        'offered', 'asked', 'spent', 'dropped', 'claimed', 'checked_in', 'answered')),
    turns               INTEGER NOT NULL DEFAULT 0,
    exchange_id         INTEGER,
    answer_exchange_id  INTEGER,
    claimed_by          TEXT,
    created_at          TEXT    NOT NULL,
    updated_at          TEXT    NOT NULL,
    PRIMARY KEY (user_id, memory_id)
);
CREATE INDEX followups_by_state ON followups (user_id, state, updated_at);

-- Each person's check-ins, keyed by their own id (never a character's key): off unless they
-- turn them on. `timezone` is theirs (IANA name) when they set it; `notice` is what their next
-- turn says about them ('blocked': their DMs refused a check-in, so check-ins were turned off).
CREATE TABLE checkin_settings (
    user_id     TEXT    PRIMARY KEY,
    enabled     INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    timezone    TEXT,
    notice      TEXT,
    updated_at  TEXT    NOT NULL
);
CREATE INDEX checkin_settings_enabled ON checkin_settings (enabled);

-- Past conversations imported (`python -m bot import`): one row per conversation finished (every
-- exchange reflected, the story's summary rebuilt), so that importing it again writes nothing.
-- `source` names the conversation's exchanges (a hash of their keys); each imported exchange is
-- an exchange row whose message_id is its key ("import:…").
CREATE TABLE imports (
    user_id      TEXT    NOT NULL,
    story_id     TEXT    NOT NULL,
    source       TEXT    NOT NULL,
    exchanges    INTEGER NOT NULL,
    finished_at  TEXT    NOT NULL,
    PRIMARY KEY (user_id, story_id, source)
);
