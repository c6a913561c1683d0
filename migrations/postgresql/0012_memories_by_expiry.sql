-- A person's dated memories by date; kept in step with migrations/0012_memories_by_expiry.sql
-- (SQLite), which says why.
CREATE INDEX memories_by_expiry ON memories (user_id, expires_at) WHERE expires_at IS NOT NULL;
