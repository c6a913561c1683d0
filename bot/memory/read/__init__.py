"""The read path of a turn: recall, the conversation's part in the query, the selection of the
slots over the cache's columns, and the background indexing that embeds memories."""
