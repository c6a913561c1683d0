-- A person's dated memories by date: every turn asks which dates passed since the last one
-- (follow-ups, bot/memory/stores/followups.py). Through memories_by_user it read every row of
-- the person: 58 ms a turn at 100,000 memories, on the shared reader everyone's turns wait on.
CREATE INDEX memories_by_expiry ON memories (user_id, expires_at) WHERE expires_at IS NOT NULL;
