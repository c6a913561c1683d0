-- Derived indexes over memories. Neither holds anything that memories does not: both can be
-- dropped and rebuilt at any time.

-- One vector per memory and embedding model. `content_hash` is the hash of the text the vector
-- was computed from: when it differs from memories.content_hash the vector is stale and is not
-- served. Keyed by model so that a query is only ever compared with vectors of its own model.
CREATE TABLE memory_vectors (
    memory_id     INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    user_id       TEXT    NOT NULL,
    model         TEXT    NOT NULL,
    content_hash  TEXT    NOT NULL,
    dim           INTEGER NOT NULL CHECK (dim > 0),
    vector        BLOB    NOT NULL CHECK (length(vector) = 4 * dim),
    embedded_at   TEXT    NOT NULL,
    PRIMARY KEY (memory_id, model)
);
CREATE INDEX memory_vectors_by_user ON memory_vectors (user_id, model);

-- Full-text index on memory text: the lexical fallback when no query vector can be had.
-- External content (the text lives once, in memories), kept in sync by triggers.
CREATE VIRTUAL TABLE memories_fts USING fts5(
    text,
    content = 'memories',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER memories_fts_after_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;

-- An external-content table cannot look the old text up itself once the row has changed:
-- the 'delete' command must be given the exact text that was indexed.
CREATE TRIGGER memories_fts_after_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TRIGGER memories_fts_after_update AFTER UPDATE OF text ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;

INSERT INTO memories_fts (memories_fts) VALUES ('rebuild');
