"""A chat server as its failures are told to the person running the bot: its name, its address
without credentials, its answers quoted without the API key, and what to do about each failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from bot.clients.kinds import Api
from bot.errors import LLMBadResponse, ModelNotFound

# A proxy's HTML error page quoted whole would bury the one line that matters.
MAX_QUOTED_CHARS = 500


def connect_failure(exc: BaseException) -> str:
    """Why a connection failed; httpx words a refusal "All connection attempts failed"."""
    cause: BaseException | None = exc
    visited: set[int] = set()
    while cause is not None and id(cause) not in visited:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        visited.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return str(exc) or "connection failed"


def without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True, slots=True)
class LLMServer:
    api: Api
    # The base URL, without a trailing slash (nor OpenAI's /v1).
    root: str
    api_key: str | None

    @property
    def name(self) -> str:
        return "Ollama server" if self.api == "ollama" else "OpenAI-compatible server"

    def url(self, path: str) -> str:
        return without_credentials(self.root + path)

    def unreachable_message(self, path: str, reason: str) -> str:
        if self.api == "ollama":
            advice = (
                "Start Ollama with `ollama serve` (or the Ollama app), or set LLM_BASE_URL to the "
                "address where it runs."
            )
        else:
            advice = (
                "Check that the server is running, or set LLM_BASE_URL to the address where it "
                "runs."
            )
        return f"Cannot reach the {self.name} at {self.url(path)} ({reason}). {advice}"

    def scrub(self, text: str) -> str:
        # A proxy may echo the request headers back in its error page.
        return text.replace(self.api_key, "***") if self.api_key else text

    def quote(self, text: str) -> str:
        text = self.scrub(" ".join(text.split()))
        if len(text) > MAX_QUOTED_CHARS:
            text = text[:MAX_QUOTED_CHARS] + "…"
        return repr(text) if text else "(empty body)"

    def error_text(self, response: httpx.Response) -> str:
        """The server's own explanation, from whichever error shape it uses."""
        try:
            data = response.json()
        except ValueError:
            return self.quote(response.text)
        if isinstance(data, dict):
            error = data.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return self.quote(error["message"])
            for candidate in (error, data.get("message"), data.get("detail")):
                if isinstance(candidate, str):
                    return self.quote(candidate)
        return self.quote(response.text)

    def raise_if_model_missing(self, response: httpx.Response, model: str) -> None:
        """A 404 names a missing model only when its body says so; a bare 404 is a wrong URL."""
        try:
            data = response.json()
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        error = data.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        if not isinstance(message, str):
            other = data.get("message")
            message = other if isinstance(other, str) else ""
        lowered = message.lower()
        if code == "model_not_found" or (
            "model" in lowered and ("not found" in lowered or "does not exist" in lowered)
        ):
            raise ModelNotFound(
                self.missing_model_message(model, server_said=self.quote(message)), model=model
            )

    def missing_model_message(
        self, model: str, *, listed: list[str] | None = None, server_said: str | None = None
    ) -> str:
        root = without_credentials(self.root)
        where = f"The {self.name} at {root} does not have the model {model!r}"
        said = f" (server said: {server_said})" if server_said else ""
        if listed is not None:
            shown = ", ".join(listed[:10]) + (", …" if len(listed) > 10 else "")
            said = f" (it has: {shown})" if listed else " (it has no model at all)"
        if self.api == "ollama":
            # The client does not know which setting named the model (LLM_MODEL or
            # REFLECTION_MODEL): whoever catches this names it.
            advice = f"Download it with `ollama pull {model}`, or name a model shown by `ollama list`."
        else:
            advice = "The model must be one of the model ids this server offers."
        return f"{where}{said}. {advice}"

    def raise_for_status(self, response: httpx.Response, path: str) -> None:
        status = response.status_code
        if status < 400:
            return
        hint = ""
        if status in (401, 403):
            hint = " Check the API key (LLM_API_KEY)."
        elif status == 404:
            hint = f" Is LLM_BASE_URL the address of an {self.name}?"
        raise LLMBadResponse(
            f"The {self.name} at {self.url(path)} answered HTTP {status}: "
            f"{self.error_text(response)}.{hint}",
            status=status,
        )

    def json(self, response: httpx.Response, path: str) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise LLMBadResponse(
                f"The {self.name} at {self.url(path)} answered something "
                f"that is not a JSON object: {self.quote(response.text)}",
                status=response.status_code,
            )
        return data

    def extract(self, data: dict[str, Any], path: str) -> tuple[str, str | None]:
        """(content, stop reason) from a chat answer of this client's API."""
        try:
            if self.api == "ollama":
                content, stop = data["message"]["content"], data.get("done_reason")
            else:
                choice = data["choices"][0]
                content, stop = choice["message"]["content"], choice.get("finish_reason")
        except (KeyError, IndexError, TypeError):
            content, stop = None, None
        if not isinstance(content, str):
            if self.api == "ollama":
                where = '["message"]["content"]'
            else:
                where = '["choices"][0]["message"]["content"]'
            raise LLMBadResponse(
                f"The {self.name} at {self.url(path)} answered JSON without a "
                f"text at {where}: {self.quote(json.dumps(data, ensure_ascii=False))}"
            )
        return content, stop
