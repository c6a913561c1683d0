"""The Discord front end: the bot class (`cogs.bot`), its extensions (`conversation`, `memory`,
`message_events`) and the Discord-only helpers they share (`cogs.utils`). Everything here
reaches memory through `bot.engine.Engine` only."""
