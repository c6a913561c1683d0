-- Every front-end message an exchange was built from, in order; kept in step with
-- migrations/0008_exchange_messages.sql (SQLite).
CREATE TABLE exchange_messages (
    user_id      TEXT COLLATE "C" NOT NULL,
    exchange_id  BIGINT  NOT NULL REFERENCES exchanges(id) ON DELETE CASCADE,
    n            INTEGER NOT NULL CHECK (n > 0),
    message_id   TEXT COLLATE "C" NOT NULL,
    text         TEXT COLLATE "C" NOT NULL,
    marks        TEXT COLLATE "C" NOT NULL DEFAULT '',
    deleted_at   TEXT COLLATE "C",
    PRIMARY KEY (exchange_id, n)
);
CREATE INDEX exchange_messages_by_message ON exchange_messages (message_id);
CREATE INDEX exchange_messages_by_user ON exchange_messages (user_id, exchange_id);

INSERT INTO exchange_messages (user_id, exchange_id, n, message_id, text, deleted_at)
SELECT user_id, id, 1, message_id, user_message, deleted_at FROM exchanges WHERE message_id IS NOT NULL;
