"""The owner's page, /healthz and /metrics on aiohttp, inside the bot process.

Everything but /healthz and the login form needs the token (WEB_TOKEN): as
`Authorization: Bearer <token>` (Prometheus, scripts) or through the login form, which sets an
HttpOnly cookie holding an HMAC of the token (never the token itself). /healthz says only
whether each dependency answers, so a container healthcheck needs no secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jinja2
from aiohttp import web

from bot.clients.health import Health
from bot.clients.metrics import Metrics
from bot.clients.values import row_id
from bot.engine import Engine
from bot.memory.model import OwnerKey
from bot.web import views

log = logging.getLogger(__name__)

COOKIE = "echo_session"
COOKIE_MAX_AGE = 7 * 24 * 3600
_OPEN_PATHS = frozenset({"/healthz", "/login"})
# Inline CSS and SVG only: no script, no external resource, no framing.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # The page shows users' memories: no copy stays in a browser's or a proxy's cache.
    "Cache-Control": "no-store",
}

_ENGINE = web.AppKey("engine", Engine)
_HEALTH = web.AppKey("health", Health)
_METRICS = web.AppKey("metrics", Metrics)
_TOKEN = web.AppKey("token", str)
_TEMPLATES = web.AppKey("templates", jinja2.Environment)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["user_url"] = lambda user_id: "/users/" + quote(user_id, safe="")
    env.filters["when"] = lambda dt: dt.strftime("%Y-%m-%d %H:%M") if dt else "—"
    env.filters["num"] = lambda n: "—" if n is None else f"{n:,}"
    return env


def session_value(token: str) -> str:
    return hmac.new(token.encode(), b"echo-web-session", hashlib.sha256).hexdigest()


def _authorised(request: web.Request) -> bool:
    token = request.app[_TOKEN]
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    cookie = request.cookies.get(COOKIE, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), session_value(token).encode())


def _render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    text = request.app[_TEMPLATES].get_template(template).render(**context)
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def _local_path(target: str | None) -> str:
    """Where to go after login: a path of this site only, never another host, "/" otherwise.

    Judged on the URL as parsed, never on the string: browsers drop a tab or a newline and read
    a backslash as a slash ("/%09/evil.example/" is "//evil.example/" to them), and a response
    header cannot carry a control character, so anything but visible ASCII is refused first."""
    if not target or not all(" " < char < "\x7f" for char in target) or "\\" in target or target.startswith("//"):
        return "/"
    # urlsplit reads "///host/" as an empty host and the path "/host/"; a browser, as the host.
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or parts.path.startswith("//"):
        return "/"
    return target


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path not in _OPEN_PATHS and not _authorised(request):
        if "text/html" in request.headers.get("Accept", ""):
            response: web.StreamResponse = _render(
                request, "login.html.j2", status=401, next=request.path_qs, failed=False
            )
        else:
            response = web.Response(status=401, text="401: a token is needed (Authorization: Bearer <WEB_TOKEN>)\n")
        response.headers["WWW-Authenticate"] = 'Bearer realm="echo"'
    else:
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # the router's 404 and 405
            exc.headers.update(_SECURITY_HEADERS)
            raise
    response.headers.update(_SECURITY_HEADERS)
    return response


def _see_other(target: str) -> web.Response:
    return web.Response(status=303, headers={"Location": target})


async def _login_form(request: web.Request) -> web.Response:
    return _render(request, "login.html.j2", next=_local_path(request.query.get("next")), failed=False)


async def _login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    given = str(form.get("token", ""))
    target = _local_path(str(form.get("next", "")))
    if not hmac.compare_digest(given.encode(), request.app[_TOKEN].encode()):
        log.warning("the owner's page refused a login from %s", request.remote)
        return _render(request, "login.html.j2", status=401, next=target, failed=True)
    response = _see_other(target)
    response.set_cookie(
        COOKIE,
        session_value(request.app[_TOKEN]),
        max_age=COOKIE_MAX_AGE,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )
    return response


async def _logout(request: web.Request) -> web.StreamResponse:
    response = _see_other("/login")
    response.del_cookie(COOKIE, path="/")
    return response


async def _overview(request: web.Request) -> web.Response:
    context = await views.overview(
        request.app[_ENGINE], request.app[_HEALTH], request.query.get("window"), request.app[_METRICS]
    )
    return _render(request, "overview.html.j2", **context)


async def _user(request: web.Request) -> web.Response:
    user_id = OwnerKey(request.match_info["user_id"])
    context = await views.user(request.app[_ENGINE], user_id, request.query.get("window"))
    if context is None:
        return _render(request, "missing.html.j2", status=404, what=f"Nothing is stored about user {user_id}.")
    return _render(request, "user.html.j2", **context)


async def _turn(request: web.Request) -> web.Response:
    user_id = OwnerKey(request.match_info["user_id"])
    raw = request.match_info["turn_id"]
    # Range-checked like every id from outside: 20 nines named nothing and failed to bind (500).
    turn_id = row_id(raw)
    context = await views.turn(request.app[_ENGINE], user_id, turn_id) if turn_id is not None else None
    if context is None:
        return _render(request, "missing.html.j2", status=404, what=f"No turn {raw} of user {user_id} is kept.")
    return _render(request, "turn.html.j2", **context)


async def _healthz(request: web.Request) -> web.Response:
    checks = await request.app[_HEALTH].checks()
    healthy = all(c.ok for c in checks.values())
    body = {"status": "ok" if healthy else "failing", "checks": {name: c.ok for name, c in checks.items()}}
    return web.Response(text=json.dumps(body), status=200 if healthy else 503, content_type="application/json")


async def _metrics(request: web.Request) -> web.Response:
    metrics = request.app[_METRICS]
    backlog = await request.app[_ENGINE].operator.report.bot_backlog()
    metrics.reflection_backlog.set(backlog.pending)
    metrics.reflection_set_aside.set(backlog.set_aside)
    return web.Response(body=metrics.exposition(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def make_app(engine: Engine, health: Health, metrics: Metrics, token: str) -> web.Application:
    if not token:
        raise ValueError("the owner's page needs a token")
    app = web.Application(middlewares=[_guard])
    app[_ENGINE] = engine
    app[_HEALTH] = health
    app[_METRICS] = metrics
    app[_TOKEN] = token
    app[_TEMPLATES] = _templates()
    app.router.add_get("/", _overview)
    app.router.add_get("/users/{user_id}", _user)
    app.router.add_get("/users/{user_id}/turns/{turn_id}", _turn)
    app.router.add_get("/login", _login_form)
    app.router.add_post("/login", _login)
    app.router.add_post("/logout", _logout)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", _metrics)
    return app


class WebServer:
    """Runs an app on host:port until `stop`; port 0 picks a free one (see `url`)."""

    def __init__(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        self.url = ""

    async def start(self, host: str, port: int) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        bound_host, bound_port = self._runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{bound_port}"

    async def stop(self) -> None:
        await self._runner.cleanup()
