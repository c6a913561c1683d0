"""discord.py extensions: thin translators between Discord and bot.engine."""
