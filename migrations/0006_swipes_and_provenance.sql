-- Regenerate and swipe, settling, message edits and deletes, where each memory came from, and
-- what each reflection changed (the memory receipts).

-- An exchange whose reply can still be regenerated or swiped is open (settled_at NULL): it is
-- reflected only once settled, on the answer the user kept. Rows before this migration were
-- all reflected or pending as they were: they count as settled.
ALTER TABLE exchanges ADD COLUMN settled_at TEXT;
UPDATE exchanges SET settled_at = COALESCE(answered_at, created_at);
-- The messages of the reply call, kept while the exchange is open so that a regenerate asks
-- the same question with the same memories; cleared when it settles.
ALTER TABLE exchanges ADD COLUMN prompt TEXT;
-- Which alternative (exchange_replies.n) is shown and kept; `reply` holds its text.
ALTER TABLE exchanges ADD COLUMN reply_choice INTEGER;
-- The front end's id of the message holding the reply (the one with the buttons).
ALTER TABLE exchanges ADD COLUMN reply_message_id TEXT;
-- The text that was reflected before the user edited the message: its next reflection is a
-- correction of the memories it produced. NULL otherwise.
ALTER TABLE exchanges ADD COLUMN edited_from TEXT;
-- The user deleted the message: its text is gone (user_message is emptied), it is never
-- reflected again.
ALTER TABLE exchanges ADD COLUMN deleted_at TEXT;
CREATE INDEX exchanges_by_message ON exchanges (message_id);

-- Every answer generated for an exchange, in order (n = 1, 2…).
CREATE TABLE exchange_replies (
    id           INTEGER PRIMARY KEY,
    user_id      TEXT    NOT NULL,
    exchange_id  INTEGER NOT NULL REFERENCES exchanges(id) ON DELETE CASCADE,
    n            INTEGER NOT NULL CHECK (n > 0),
    text         TEXT    NOT NULL,
    created_at   TEXT    NOT NULL,
    UNIQUE (exchange_id, n)
);

-- The exchanges each memory came from; a merge or an absorption adds the new one. No foreign
-- key to memories: a forgotten memory restored under its own id keeps where it came from.
CREATE TABLE memory_sources (
    memory_id    INTEGER NOT NULL,
    exchange_id  INTEGER NOT NULL,
    user_id      TEXT    NOT NULL,
    PRIMARY KEY (memory_id, exchange_id)
);
CREATE INDEX memory_sources_by_exchange ON memory_sources (user_id, exchange_id);

-- What one reflection changed in a user's memories, filed under the exchange whose reply shows
-- the receipt. `text` is the memory's text after the change (the forgotten text for
-- 'forgotten'), `before` the text it replaced.
CREATE TABLE memory_changes (
    id           INTEGER PRIMARY KEY,
    user_id      TEXT    NOT NULL,
    exchange_id  INTEGER NOT NULL,
    memory_id    INTEGER NOT NULL,
    action       TEXT    NOT NULL CHECK (action IN ('added', 'replaced', 'forgotten')),
    text         TEXT    NOT NULL,
    before       TEXT,
    at           TEXT    NOT NULL
);
CREATE INDEX memory_changes_by_exchange ON memory_changes (user_id, exchange_id);
