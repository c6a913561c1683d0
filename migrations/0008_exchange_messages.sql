-- Every front-end message an exchange was built from, in order: a burst (messages a user sends
-- less than BURST_SECONDS apart) is one exchange of several messages, and an edit or a delete of
-- any of them must find its exchange. The exchange's user_message is these texts joined (with
-- the image marks after them); `deleted_at` set: the message was deleted, its text emptied.
CREATE TABLE exchange_messages (
    user_id      TEXT    NOT NULL,
    exchange_id  INTEGER NOT NULL REFERENCES exchanges(id) ON DELETE CASCADE,
    n            INTEGER NOT NULL CHECK (n > 0),
    message_id   TEXT    NOT NULL,
    text         TEXT    NOT NULL,
    marks        TEXT    NOT NULL DEFAULT '',
    deleted_at   TEXT,
    PRIMARY KEY (exchange_id, n)
);
CREATE INDEX exchange_messages_by_message ON exchange_messages (message_id);
CREATE INDEX exchange_messages_by_user ON exchange_messages (user_id, exchange_id);

-- Exchanges saved before this migration knew one message, the last: it stands for all of them.
INSERT INTO exchange_messages (user_id, exchange_id, n, message_id, text, deleted_at)
SELECT user_id, id, 1, message_id, user_message, deleted_at FROM exchanges WHERE message_id IS NOT NULL;
