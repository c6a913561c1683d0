-- Kept in step with migrations/0010_consolidations_and_erasures.sql (SQLite): each
-- consolidation read whole, and every erase by a hash of the person's id.
CREATE TABLE consolidations (
    memory_id   BIGINT  PRIMARY KEY,
    user_id     TEXT COLLATE "C" NOT NULL,
    at          TEXT COLLATE "C" NOT NULL,
    undone_at   TEXT COLLATE "C",
    undone_by   TEXT COLLATE "C" CHECK (undone_by IN ('restore', 'source'))
);
CREATE INDEX consolidations_by_user ON consolidations (user_id, memory_id);

CREATE TABLE consolidation_members (
    memory_id   BIGINT  NOT NULL,
    member_id   BIGINT  NOT NULL,
    user_id     TEXT COLLATE "C" NOT NULL,
    history_id  BIGINT  NOT NULL,
    PRIMARY KEY (memory_id, member_id)
);
CREATE INDEX consolidation_members_by_member ON consolidation_members (user_id, member_id);

INSERT INTO consolidation_members (memory_id, member_id, user_id, history_id)
    SELECT CAST(substring(cause from 20) AS BIGINT), memory_id, user_id, id FROM memory_history
    WHERE operation = 'consolidate' AND cause LIKE 'consolidated into #%';
INSERT INTO consolidations (memory_id, user_id, at, undone_at, undone_by)
    SELECT CAST(substring(cause from 20) AS BIGINT), user_id, MIN(archived_at), MAX(restored_at),
           CASE WHEN MAX(restored_at) IS NULL THEN NULL ELSE 'restore' END
    FROM memory_history WHERE operation = 'consolidate' AND cause LIKE 'consolidated into #%'
    GROUP BY CAST(substring(cause from 20) AS BIGINT), user_id;

CREATE TABLE erasures (
    person_hash  TEXT COLLATE "C" NOT NULL,
    erased_at    TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (person_hash, erased_at)
);
