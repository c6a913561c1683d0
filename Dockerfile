# Écho: the Discord bot in a slim Python image, running as a non-root user, its SQLite database
# on a volume. Build: docker build -t echo-bot .   Run: see docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DATABASE_PATH=/data/echo.sqlite3

RUN useradd --create-home --uid 1000 echo \
    && mkdir -p /data && chown echo:echo /data

WORKDIR /app
COPY pyproject.toml requirements.lock README.md ./
COPY bot ./bot
COPY cogs ./cogs
COPY migrations ./migrations
# Editable, so the package finds migrations/ beside it as it does in a checkout; the lock pins
# every dependency to the versions the tests ran with (the dev tools in it are not installed).
RUN pip install -c requirements.lock -e .

USER echo
VOLUME ["/data"]
CMD ["python", "-m", "bot"]
