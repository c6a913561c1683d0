"""The owner's web page, /healthz and /metrics, served by the bot process (aiohttp, Jinja2)."""
