-- A version per user, bumped by triggers in the same transaction as any change to that user's
-- memories or vectors, so that a process holding a user's memories in memory can tell with one
-- indexed read whether they are current, and which rows to read again when they are not.
-- `epoch` is drawn at random when the row is created: after an erase (the row is deleted) the
-- versions start again under another epoch, so an old (epoch, version) never matches again.
-- Kept in step with migrations/0007_memory_versions.sql (SQLite).
CREATE TABLE memory_versions (
    user_id  TEXT COLLATE "C" PRIMARY KEY,
    epoch    BIGINT NOT NULL,
    version  BIGINT NOT NULL
);

-- The version at which each memory of a user last changed (its row or one of its vectors): the
-- rows to read again to catch up from a version. One row per memory id ever changed.
CREATE TABLE memory_version_log (
    user_id    TEXT COLLATE "C" NOT NULL,
    memory_id  BIGINT NOT NULL,
    version    BIGINT NOT NULL,
    PRIMARY KEY (user_id, memory_id)
);
CREATE INDEX memory_version_log_by_version ON memory_version_log (user_id, version);

CREATE FUNCTION echo_bump_memory_version(owner TEXT, changed BIGINT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    bumped BIGINT;
BEGIN
    INSERT INTO memory_versions AS v (user_id, epoch, version)
        VALUES (owner, floor(random() * 9007199254740991)::bigint, 1)
        ON CONFLICT (user_id) DO UPDATE SET version = v.version + 1
        RETURNING v.version INTO bumped;
    INSERT INTO memory_version_log AS l (user_id, memory_id, version)
        VALUES (owner, changed, bumped)
        ON CONFLICT (user_id, memory_id) DO UPDATE SET version = excluded.version;
END;
$$;

CREATE FUNCTION echo_memories_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM echo_bump_memory_version(OLD.user_id, OLD.id);
        RETURN OLD;
    END IF;
    PERFORM echo_bump_memory_version(NEW.user_id, NEW.id);
    RETURN NEW;
END;
$$;

CREATE FUNCTION echo_memory_vectors_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM echo_bump_memory_version(OLD.user_id, OLD.memory_id);
        RETURN OLD;
    END IF;
    PERFORM echo_bump_memory_version(NEW.user_id, NEW.memory_id);
    RETURN NEW;
END;
$$;

CREATE TRIGGER memories_version_after_insert AFTER INSERT ON memories
    FOR EACH ROW EXECUTE FUNCTION echo_memories_version();
-- The read counters (times_*) are not part of what a cache serves: updating them is no change.
CREATE TRIGGER memories_version_after_update
    AFTER UPDATE OF user_id, text, type, scope, story_id, place, confidence, pinned, created_at,
        updated_at, expires_at, source, content_hash ON memories
    FOR EACH ROW EXECUTE FUNCTION echo_memories_version();
CREATE TRIGGER memories_version_after_delete AFTER DELETE ON memories
    FOR EACH ROW EXECUTE FUNCTION echo_memories_version();

CREATE TRIGGER memory_vectors_version_after_insert AFTER INSERT ON memory_vectors
    FOR EACH ROW EXECUTE FUNCTION echo_memory_vectors_version();
CREATE TRIGGER memory_vectors_version_after_update AFTER UPDATE ON memory_vectors
    FOR EACH ROW EXECUTE FUNCTION echo_memory_vectors_version();
CREATE TRIGGER memory_vectors_version_after_delete AFTER DELETE ON memory_vectors
    FOR EACH ROW EXECUTE FUNCTION echo_memory_vectors_version();
