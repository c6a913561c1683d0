-- Derived indexes over memories, kept in step with migrations/0002_vectors.sql. Neither holds
-- anything that memories does not: both can be dropped and rebuilt at any time.

-- One vector per memory and embedding model, little-endian float32 bytes as on SQLite.
-- `content_hash` is the hash of the text the vector was computed from: when it differs from
-- memories.content_hash the vector is stale and is not served.
CREATE TABLE memory_vectors (
    memory_id     BIGINT  NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    user_id       TEXT COLLATE "C" NOT NULL,
    model         TEXT COLLATE "C" NOT NULL,
    content_hash  TEXT COLLATE "C" NOT NULL,
    dim           INTEGER NOT NULL CHECK (dim > 0),
    vector        BYTEA   NOT NULL CHECK (octet_length(vector) = 4 * dim),
    embedded_at   TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (memory_id, model)
);
CREATE INDEX memory_vectors_by_user ON memory_vectors (user_id, model);

-- Full-text search, the lexical fallback when no query vector can be had: the words of the
-- text, lower-cased with the usual Latin diacritics removed (SQLite's FTS5 uses
-- remove_diacritics). A function of its own so the query side folds words the same way;
-- translate() is immutable, unlike the unaccent extension, which is not always installed.
CREATE FUNCTION echo_fold(value TEXT) RETURNS TEXT
LANGUAGE SQL IMMUTABLE PARALLEL SAFE
RETURN translate(lower(value),
    'àáâãäåāăąçćčďèéêëēĕėęěìíîïĩīįñńňòóôõöøōőùúûüũūůűųýÿžźżšśşł',
    'aaaaaaaaacccdeeeeeeeeeiiiiiiinnnooooooooouuuuuuuuuyyzzzsssl');

ALTER TABLE memories ADD COLUMN search tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', echo_fold(text))) STORED;
CREATE INDEX memories_search ON memories USING gin (search);
