-- A version per user, bumped by triggers in the same transaction as any change to that user's
-- memories or vectors, so that a process holding a user's memories in memory can tell with one
-- indexed read whether they are current, and which rows to read again when they are not.
-- `epoch` is drawn at random when the row is created: after an erase (the row is deleted) the
-- versions start again under another epoch, so an old (epoch, version) never matches again.
CREATE TABLE memory_versions (
    user_id  TEXT    PRIMARY KEY,
    epoch    INTEGER NOT NULL,
    version  INTEGER NOT NULL
);

-- The version at which each memory of a user last changed (its row or one of its vectors): the
-- rows to read again to catch up from a version. One row per memory id ever changed.
CREATE TABLE memory_version_log (
    user_id    TEXT    NOT NULL,
    memory_id  INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    PRIMARY KEY (user_id, memory_id)
);
CREATE INDEX memory_version_log_by_version ON memory_version_log (user_id, version);

CREATE TRIGGER memories_version_after_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_versions (user_id, epoch, version) VALUES (new.user_id, random(), 1)
        ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
    INSERT INTO memory_version_log (user_id, memory_id, version)
        VALUES (new.user_id, new.id, (SELECT version FROM memory_versions WHERE user_id = new.user_id))
        ON CONFLICT (user_id, memory_id) DO UPDATE SET version = excluded.version;
END;

-- The read counters (times_*) are not part of what a cache serves: updating them is no change.
CREATE TRIGGER memories_version_after_update
AFTER UPDATE OF user_id, text, type, scope, story_id, place, confidence, pinned, created_at,
    updated_at, expires_at, source, content_hash ON memories BEGIN
    INSERT INTO memory_versions (user_id, epoch, version) VALUES (new.user_id, random(), 1)
        ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
    INSERT INTO memory_version_log (user_id, memory_id, version)
        VALUES (new.user_id, new.id, (SELECT version FROM memory_versions WHERE user_id = new.user_id))
        ON CONFLICT (user_id, memory_id) DO UPDATE SET version = excluded.version;
END;

CREATE TRIGGER memories_version_after_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memory_versions (user_id, epoch, version) VALUES (old.user_id, random(), 1)
        ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
    INSERT INTO memory_version_log (user_id, memory_id, version)
        VALUES (old.user_id, old.id, (SELECT version FROM memory_versions WHERE user_id = old.user_id))
        ON CONFLICT (user_id, memory_id) DO UPDATE SET version = excluded.version;
END;

CREATE TRIGGER memory_vectors_version_after_insert AFTER INSERT ON memory_vectors BEGIN
    INSERT INTO memory_versions (user_id, epoch, version) VALUES (new.user_id, random(), 1)
        ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
    INSERT INTO memory_version_log (user_id, memory_id, version)
        VALUES (new.user_id, new.memory_id, (SELECT version FROM memory_versions WHERE user_id = new.user_id))
        ON CONFLICT (user_id, memory_id) DO UPDATE SET version = excluded.version;
END;

CREATE TRIGGER memory_vectors_version_after_update AFTER UPDATE ON memory_vectors BEGIN
    INSERT INTO memory_versions (user_id, epoch, version) VALUES (new.user_id, random(), 1)
        ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
    INSERT INTO memory_version_log (user_id, memory_id, version)
        VALUES (new.user_id, new.memory_id, (SELECT version FROM memory_versions WHERE user_id = new.user_id))
        ON CONFLICT (user_id, memory_id) DO UPDATE SET version = excluded.version;
END;

CREATE TRIGGER memory_vectors_version_after_delete AFTER DELETE ON memory_vectors BEGIN
    INSERT INTO memory_versions (user_id, epoch, version) VALUES (old.user_id, random(), 1)
        ON CONFLICT (user_id) DO UPDATE SET version = version + 1;
    INSERT INTO memory_version_log (user_id, memory_id, version)
        VALUES (old.user_id, old.memory_id, (SELECT version FROM memory_versions WHERE user_id = old.user_id))
        ON CONFLICT (user_id, memory_id) DO UPDATE SET version = excluded.version;
END;
