"""`python -m bot.config > .env.example`: every setting, documented, with its default."""

from bot.config import render_env_example

print(render_env_example(), end="")
