-- Each consolidation of a series, read whole (never through a window of the history): which
-- memory holds it, each member and the history entry of its archived version, and whether it
-- was undone, by whom. `undone_by` 'restore': the user undid it (its members are never asked
-- again together); 'source': a member's message was deleted or edited, which undid it (its
-- other members may be consolidated again).
CREATE TABLE consolidations (
    memory_id   INTEGER PRIMARY KEY,
    user_id     TEXT    NOT NULL,
    at          TEXT    NOT NULL,
    undone_at   TEXT,
    undone_by   TEXT    CHECK (undone_by IN ('restore', 'source'))
);
CREATE INDEX consolidations_by_user ON consolidations (user_id, memory_id);

CREATE TABLE consolidation_members (
    memory_id   INTEGER NOT NULL,
    member_id   INTEGER NOT NULL,
    user_id     TEXT    NOT NULL,
    history_id  INTEGER NOT NULL,
    PRIMARY KEY (memory_id, member_id)
);
CREATE INDEX consolidation_members_by_member ON consolidation_members (user_id, member_id);

-- Consolidations made before this migration, read back from the history they were written in.
INSERT INTO consolidation_members (memory_id, member_id, user_id, history_id)
    SELECT CAST(substr(cause, 20) AS INTEGER), memory_id, user_id, id FROM memory_history
    WHERE operation = 'consolidate' AND cause LIKE 'consolidated into #%';
INSERT INTO consolidations (memory_id, user_id, at, undone_at, undone_by)
    SELECT CAST(substr(cause, 20) AS INTEGER), user_id, MIN(archived_at), MAX(restored_at),
           CASE WHEN MAX(restored_at) IS NULL THEN NULL ELSE 'restore' END
    FROM memory_history WHERE operation = 'consolidate' AND cause LIKE 'consolidated into #%'
    GROUP BY CAST(substr(cause, 20) AS INTEGER), user_id;

-- Every erase, by a hash of the person's id (not the id) and its time, written in the erase's
-- transaction; the same line goes to the erasure ledger outside the database
-- (bot/clients/erasures.py). A restored backup that lacks a line of the ledger predates that
-- erase: the restore erases the person from it again.
CREATE TABLE erasures (
    person_hash  TEXT NOT NULL,
    erased_at    TEXT NOT NULL,
    PRIMARY KEY (person_hash, erased_at)
);
