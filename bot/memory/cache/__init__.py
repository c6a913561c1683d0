"""Each person's memories held in memory, in step with the database; knows nothing of the read
or write path (what derives state from an entry follows it through `Follower`)."""
