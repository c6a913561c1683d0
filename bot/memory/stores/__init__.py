"""Every SQL statement on memory data, by table: the only modules of bot/memory that talk
to the database (both stores, SQLite and PostgreSQL, through bot.clients.storage)."""
