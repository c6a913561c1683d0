"""The REST API under /api/v10, as discord.py calls it.

Every request is authenticated ("Authorization: Bot <token>"), recorded as a `Call`, and
answered with Discord's rate-limit headers. Errors use Discord's JSON error shape
({"message", "code"}), so discord.py raises the exception it would raise against Discord.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.fakes.discord.state import (
    INTERACTION_DEADLINE,
    INTERACTION_TOKEN_LIFETIME,
    Call,
    Channel,
    Webhook,
    new_token,
    snowflake,
)

if TYPE_CHECKING:
    from tests.fakes.discord.server import FakeDiscord

API_PREFIX = "/api/v10"
FAKE_DISCORD: web.AppKey[FakeDiscord] = web.AppKey("fake_discord")
JSON_BODY: web.RequestKey[Any] = web.RequestKey("json_body", object)
MESSAGE_LIMIT = 2000
EPHEMERAL = 1 << 6
LOADING = 1 << 7
# Interaction callback types.
PONG, CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 1, 4, 5, 6, 7
AUTOCOMPLETE_RESULT, MODAL = 8, 9

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class DiscordError(Exception):
    def __init__(self, status: int, code: int, message: str, errors: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.errors = status, code, message, errors

    def response(self) -> web.Response:
        body: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return json_response(body, status=self.status)


def json_response(data: Any, status: int = 200) -> web.Response:
    # Exactly "application/json", as Discord sends it: discord.py compares the whole header.
    return web.Response(body=json.dumps(data).encode(), status=status, content_type="application/json")


def unknown(what: str, code: int) -> DiscordError:
    return DiscordError(404, code, f"Unknown {what}")


def too_long(field: str, limit: int) -> DiscordError:
    error = {"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {limit} or fewer in length."}
    return DiscordError(400, 50035, "Invalid Form Body", {field: {"_errors": [error]}})


def _server(request: web.Request) -> FakeDiscord:
    return request.app[FAKE_DISCORD]


def _body(request: web.Request) -> dict[str, Any]:
    body = request.get(JSON_BODY)
    return body if isinstance(body, dict) else {}


def _id(request: web.Request, name: str) -> int:
    try:
        return int(request.match_info[name])
    except ValueError:
        raise DiscordError(400, 50035, f"Invalid Form Body: {name} is not a snowflake") from None


@web.middleware
async def api_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    server = _server(request)
    if not request.path.startswith(API_PREFIX):
        return await handler(request)
    started = time.monotonic()
    request[JSON_BODY] = await _read_payload(request)
    path = request.path[len(API_PREFIX) :]
    if not _token_in_url(path) and request.headers.get("Authorization") != f"Bot {server.token}":
        response: web.StreamResponse = json_response({"message": "401: Unauthorized", "code": 0}, status=401)
    else:
        if server.latency:
            await asyncio.sleep(server.latency)
        retry_after = server.over_channel_write_limit(request.method, path)
        try:
            if retry_after is not None:
                body = {"message": "You are being rate limited.", "retry_after": round(retry_after, 3), "global": False}
                response = json_response(body, status=429)
                response.headers["Retry-After"] = f"{retry_after:.3f}"
            else:
                response = await handler(request)
        except DiscordError as exc:
            response = exc.response()
        except web.HTTPNotFound:
            response = json_response({"message": "404: Not Found", "code": 0}, status=404)
        except web.HTTPMethodNotAllowed:
            response = json_response({"message": "405: Method Not Allowed", "code": 0}, status=405)
    bucket = server.rate_limit_bucket(request.method, path)
    response.headers.update(bucket)
    server.calls.append(
        Call(
            at=started,
            method=request.method,
            path=path,
            query=dict(request.query),
            json=request[JSON_BODY],
            status=response.status,
            headers={k.lower(): v for k, v in request.headers.items()},
        )
    )
    server.call_arrived.set()
    return response


def _token_in_url(path: str) -> bool:
    """Interaction callbacks and webhook executions carry their token in the URL, no header."""
    parts = path.strip("/").split("/")
    return parts[0] == "interactions" or (parts[0] == "webhooks" and len(parts) >= 3)


async def _read_payload(request: web.Request) -> Any:
    """JSON bodies, or discord.py's multipart form (payload_json plus files[n])."""
    if not request.can_read_body:
        return None
    if request.content_type.startswith("multipart/"):
        payload: Any = None
        files: list[dict[str, Any]] = []
        reader = await request.multipart()
        async for part in reader:
            if part.name == "payload_json":  # type: ignore[union-attr]
                payload = json.loads(await part.text())  # type: ignore[union-attr]
            else:
                files.append({"name": part.name, "filename": part.filename, "size": len(await part.read())})  # type: ignore[union-attr]
        if isinstance(payload, dict):
            payload["_files"] = files
        return payload
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise DiscordError(400, 50109, "The request body contains invalid JSON.") from None


def _check_message(body: dict[str, Any], *, creating: bool) -> None:
    content = body.get("content")
    if content is not None and len(content) > MESSAGE_LIMIT:
        raise too_long("content", MESSAGE_LIMIT)
    if creating and not (
        content or body.get("embeds") or body.get("_files") or body.get("components") or body.get("poll")
    ):
        raise DiscordError(400, 50006, "Cannot send an empty message")


# --- identity and gateway -----------------------------------------------------------------


async def users_me(request: web.Request) -> web.Response:
    server = _server(request)
    return json_response(server.bot_user.payload() | {"verified": True, "mfa_enabled": False, "locale": "en-US"})


async def my_guilds(request: web.Request) -> web.Response:
    server = _server(request)
    mine = [g for g in server.guilds.values() if server.bot_user.id in g.members]
    return json_response(
        [{"id": str(g.id), "name": g.name, "icon": None, "owner": False, "features": []} for g in mine]
    )


async def application_me(request: web.Request) -> web.Response:
    return json_response(_server(request).application_payload())


async def gateway_bot(request: web.Request) -> web.Response:
    server = _server(request)
    return json_response(
        {
            "url": server.gateway_url,
            "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1},
        }
    )


async def get_user(request: web.Request) -> web.Response:
    server = _server(request)
    user = server.users.get(_id(request, "user_id"))
    if user is None:
        raise unknown("User", 10013)
    return json_response(user.payload())


async def open_dm(request: web.Request) -> web.Response:
    server = _server(request)
    recipient = server.users.get(int(_body(request).get("recipient_id", 0)))
    if recipient is None:
        raise unknown("User", 10013)
    return json_response(server.dm_channel(recipient).payload())


async def get_member(request: web.Request) -> web.Response:
    server = _server(request)
    guild = server.guilds.get(_id(request, "guild_id"))
    user_id = _id(request, "user_id")
    if guild is None or user_id not in guild.members:
        raise unknown("Member", 10007)
    return json_response(server.member_payload(guild, user_id, with_user=True))


# --- channels and messages ----------------------------------------------------------------


def _channel(request: web.Request) -> Channel:
    channel = _server(request).channels.get(_id(request, "channel_id"))
    if channel is None:
        raise unknown("Channel", 10003)
    return channel


def _message(request: web.Request, channel: Channel) -> dict[str, Any]:
    message = _server(request).messages.get(_id(request, "message_id"))
    if message is None or int(message["channel_id"]) != channel.id:
        raise unknown("Message", 10008)
    return message


async def get_channel(request: web.Request) -> web.Response:
    return json_response(_channel(request).payload())


async def create_message(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    if channel.guild_id is None and channel.recipient is not None and channel.recipient.id in server.dms_refused:
        # What Discord answers a DM to someone whose DMs are closed to the bot (or who shares
        # no server with it).
        raise DiscordError(403, 50007, "Cannot send messages to this user")
    body = _body(request)
    _check_message(body, creating=True)
    reference = body.get("message_reference")
    replied: dict[str, Any] | None = None
    if reference:
        replied = server.messages.get(int(reference["message_id"]))
        if replied is None and reference.get("fail_if_not_exists", True):
            error = {"code": "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "message": "Unknown message"}
            raise DiscordError(400, 50035, "Invalid Form Body", {"message_reference": {"_errors": [error]}})
    message = server.new_message(
        channel,
        server.bot_user,
        body.get("content") or "",
        replied=replied,
        ping_replied=bool((body.get("allowed_mentions") or {}).get("replied_user", True)),
        embeds=body.get("embeds") or [],
        components=body.get("components") or [],
        flags=int(body.get("flags") or 0),
    )
    await server.dispatch_message("MESSAGE_CREATE", message)
    return json_response(message)


async def edit_message(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    message = _message(request, channel)
    if int(message["author"]["id"]) != server.bot_user.id:
        raise DiscordError(403, 50005, "Cannot edit a message authored by another user")
    body = _body(request)
    _check_message(body, creating=False)
    server.apply_edit(message, body)
    await server.dispatch_message("MESSAGE_UPDATE", message)
    return json_response(message)


async def delete_message(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    message = _message(request, channel)
    await server.delete_message(message)
    return web.Response(status=204)


async def get_message(request: web.Request) -> web.Response:
    channel = _channel(request)
    return json_response(_message(request, channel))


async def channel_history(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    limit = min(int(request.query.get("limit", 50)), 100)
    before = int(request.query["before"]) if "before" in request.query else None
    after = int(request.query["after"]) if "after" in request.query else None
    found = [
        m
        for m in server.messages.values()
        if int(m["channel_id"]) == channel.id
        and not int(m.get("flags") or 0) & EPHEMERAL
        and (before is None or int(m["id"]) < before)
        and (after is None or int(m["id"]) > after)
    ]
    found.sort(key=lambda m: int(m["id"]), reverse=after is None)
    return json_response(found[:limit])


async def typing(request: web.Request) -> web.Response:
    _channel(request)
    return web.Response(status=204)


async def add_reaction(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    message = _message(request, channel)
    server.reactions.setdefault(int(message["id"]), []).append(request.match_info["emoji"])
    return web.Response(status=204)


async def remove_reaction(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    message = _message(request, channel)
    emojis = server.reactions.get(int(message["id"]), [])
    if request.match_info["emoji"] in emojis:
        emojis.remove(request.match_info["emoji"])
    return web.Response(status=204)


# --- channel webhooks ---------------------------------------------------------------------


async def create_webhook(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    _may_manage_webhooks(server, channel.id)
    body = _body(request)
    name = body.get("name") or ""
    if not 1 <= len(name) <= 80:
        raise DiscordError(
            400,
            50035,
            "Invalid Form Body",
            {"name": {"_errors": [{"code": "BASE_TYPE_BAD_LENGTH", "message": "Must be between 1 and 80 in length."}]}},
        )
    webhook = Webhook(
        id=snowflake(),
        token=new_token(),
        channel_id=channel.id,
        guild_id=channel.guild_id,
        name=name,
        avatar=None if body.get("avatar") is None else "fakeavatarhash",
        creator=server.bot_user,
    )
    server.webhooks[webhook.id] = webhook
    return json_response(server.webhook_payload(webhook))


def _may_manage_webhooks(server: Any, place_id: int) -> None:
    """`webhooks_forbidden` holds channel ids, and guild ids where it is refused server-wide."""
    if place_id in server.webhooks_forbidden:
        raise DiscordError(403, 50013, "Missing Permissions")


async def channel_webhooks(request: web.Request) -> web.Response:
    server = _server(request)
    channel = _channel(request)
    _may_manage_webhooks(server, channel.id)
    return json_response([server.webhook_payload(w) for w in server.webhooks.values() if w.channel_id == channel.id])


async def guild_webhooks(request: web.Request) -> web.Response:
    server = _server(request)
    guild_id = _id(request, "guild_id")
    _may_manage_webhooks(server, guild_id)
    return json_response([server.webhook_payload(w) for w in server.webhooks.values() if w.guild_id == guild_id])


def _channel_webhook(request: web.Request) -> Webhook:
    webhook = _server(request).webhooks.get(_id(request, "webhook_id"))
    token = request.match_info.get("token")
    if webhook is None or (token is not None and token != webhook.token):
        raise unknown("Webhook", 10015)
    return webhook


async def get_webhook(request: web.Request) -> web.Response:
    return json_response(_server(request).webhook_payload(_channel_webhook(request)))


async def delete_webhook(request: web.Request) -> web.Response:
    webhook = _channel_webhook(request)
    del _server(request).webhooks[webhook.id]
    return web.Response(status=204)


# --- /webhooks/{id}/{token}: channel webhooks and interaction followups --------------------


async def execute_webhook(request: web.Request) -> web.StreamResponse:
    server = _server(request)
    body = _body(request)
    _check_message(body, creating=True)
    if _id(request, "webhook_id") == server.application_id:
        interaction = server.interaction_by_token(request.match_info["token"], lifetime=INTERACTION_TOKEN_LIFETIME)
        if not interaction.responded:
            raise DiscordError(404, 10015, "Unknown Webhook")
        message = server.new_message(
            server.channels[int(interaction.payload["channel_id"])],
            server.bot_user,
            body.get("content") or "",
            embeds=body.get("embeds") or [],
            components=body.get("components") or [],
            flags=int(body.get("flags") or 0),
            interaction=interaction,
        )
    else:
        webhook = _channel_webhook(request)
        username = body.get("username") or webhook.name
        if len(username) > 80:
            raise too_long("username", 80)
        message = server.new_message(
            server.channels[webhook.channel_id],
            None,
            body.get("content") or "",
            webhook=webhook,
            webhook_username=username,
            webhook_avatar_url=body.get("avatar_url"),
            embeds=body.get("embeds") or [],
        )
    await server.dispatch_message("MESSAGE_CREATE", message)
    if request.query.get("wait") in ("1", "true", "True"):
        return json_response(message)
    return web.Response(status=204)


def _webhook_message(request: web.Request) -> dict[str, Any]:
    server = _server(request)
    target = request.match_info["message_id"]
    if _id(request, "webhook_id") == server.application_id:
        interaction = server.interaction_by_token(request.match_info["token"], lifetime=INTERACTION_TOKEN_LIFETIME)
        if target == "@original":
            if interaction.original is None:
                raise unknown("Message", 10008)
            return interaction.original
        message = server.messages.get(int(target))
        if message is None or message.get("_interaction_id") != interaction.id:
            raise unknown("Message", 10008)
        return message
    webhook = _channel_webhook(request)
    message = server.messages.get(int(target)) if target.isdigit() else None
    if message is None or message.get("webhook_id") != str(webhook.id):
        raise unknown("Message", 10008)
    return message


async def get_webhook_message(request: web.Request) -> web.Response:
    return json_response(_webhook_message(request))


async def edit_webhook_message(request: web.Request) -> web.Response:
    server = _server(request)
    message = _webhook_message(request)
    body = _body(request)
    _check_message(body, creating=False)
    server.apply_edit(message, body)
    message["flags"] = int(message.get("flags") or 0) & ~LOADING
    if not int(message["flags"]) & EPHEMERAL:
        await server.dispatch_message("MESSAGE_UPDATE", message)
    return json_response(message)


async def delete_webhook_message(request: web.Request) -> web.Response:
    server = _server(request)
    await server.delete_message(_webhook_message(request))
    return web.Response(status=204)


# --- interactions -------------------------------------------------------------------------


async def interaction_callback(request: web.Request) -> web.Response:
    server = _server(request)
    interaction = server.interactions.get(_id(request, "interaction_id"))
    if interaction is None or interaction.token != request.match_info["token"]:
        raise unknown("interaction", 10062)
    if time.monotonic() - interaction.created > INTERACTION_DEADLINE:
        server.late_callbacks.append(interaction.id)
        raise unknown("interaction", 10062)
    if interaction.responded:
        raise DiscordError(400, 40060, "Interaction has already been acknowledged.")
    body = _body(request)
    kind = int(body.get("type", 0))
    data = body.get("data") or {}
    channel = server.channels.get(int(interaction.payload.get("channel_id", 0)))
    resource: dict[str, Any] = {"type": kind}
    response_message_id: str | None = None
    if kind in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE):
        _check_message(data, creating=kind == CHANNEL_MESSAGE)
        assert channel is not None
        flags = int(data.get("flags") or 0) | (LOADING if kind == DEFERRED_CHANNEL_MESSAGE else 0)
        message = server.new_message(
            channel,
            server.bot_user,
            data.get("content") or "",
            embeds=data.get("embeds") or [],
            components=data.get("components") or [],
            flags=flags,
            interaction=interaction,
        )
        interaction.original = message
        response_message_id = message["id"]
        resource["message"] = message
        if not flags & EPHEMERAL:
            await server.dispatch_message("MESSAGE_CREATE", message)
    elif kind == UPDATE_MESSAGE:
        target = interaction.payload.get("message")
        if target is None:
            raise DiscordError(400, 40060, "Interaction has no message to update")
        message = server.messages[int(target["id"])]
        interaction.original = message  # what @original edits after it
        _check_message(data, creating=False)
        server.apply_edit(message, data)
        resource["message"] = message
        response_message_id = message["id"]
        if not int(message.get("flags") or 0) & EPHEMERAL:
            await server.dispatch_message("MESSAGE_UPDATE", message)
    elif kind == MODAL:
        if not data.get("custom_id") or not data.get("components"):
            raise DiscordError(400, 50035, "Invalid Form Body: a modal needs a custom_id and components")
    elif kind == DEFERRED_UPDATE:
        target = interaction.payload.get("message")
        # A component's message: @original edits it from then on.
        interaction.original = server.messages.get(int(target["id"])) if target is not None else None
    elif kind not in (PONG, AUTOCOMPLETE_RESULT):
        raise DiscordError(400, 50035, f"Invalid Form Body: unknown callback type {kind}")
    interaction.responded = True
    interaction.callback = body
    answer: dict[str, Any] = {
        "interaction": {
            "id": str(interaction.id),
            "type": interaction.payload["type"],
            "activity_instance_id": None,
            "response_message_id": response_message_id,
            "response_message_loading": kind == DEFERRED_CHANNEL_MESSAGE,
            "response_message_ephemeral": bool(int(data.get("flags") or 0) & EPHEMERAL),
        },
        "resource": resource,
    }
    if request.query.get("with_response") in ("1", "true", "True"):
        return json_response(answer)
    return web.Response(status=204)


# --- application commands -----------------------------------------------------------------


def _check_app(request: web.Request) -> FakeDiscord:
    server = _server(request)
    if _id(request, "application_id") != server.application_id:
        raise DiscordError(403, 50001, "Missing Access")
    return server


async def put_commands(request: web.Request) -> web.Response:
    server = _check_app(request)
    guild_id = int(request.match_info["guild_id"]) if "guild_id" in request.match_info else None
    if guild_id is not None and guild_id not in server.guilds:
        raise DiscordError(403, 50001, "Missing Access")
    body = request.get(JSON_BODY)
    if not isinstance(body, list):
        raise DiscordError(400, 50035, "Invalid Form Body: expected a list of commands")
    server.commands[guild_id] = [server.command_payload(c, guild_id) for c in body]
    return json_response(server.commands[guild_id])


async def get_commands(request: web.Request) -> web.Response:
    server = _check_app(request)
    guild_id = int(request.match_info["guild_id"]) if "guild_id" in request.match_info else None
    return json_response(server.commands.get(guild_id, []))


# --- attachments (the CDN) ----------------------------------------------------------------


async def attachment(request: web.Request) -> web.Response:
    server = _server(request)
    found = server.attachments.get(int(request.match_info["attachment_id"]))
    if found is None or found.filename != request.match_info["filename"]:
        return web.Response(status=404, text="Not Found")
    server.downloads.append(found.id)
    return web.Response(body=found.data, content_type=found.content_type)


def add_routes(app: web.Application) -> None:
    p = API_PREFIX
    r = app.router
    r.add_get(p + "/users/@me", users_me)
    r.add_get(p + "/users/@me/guilds", my_guilds)
    r.add_get(p + "/oauth2/applications/@me", application_me)
    r.add_get(p + "/applications/@me", application_me)
    r.add_get(p + "/gateway/bot", gateway_bot)
    r.add_get(p + "/gateway", gateway_bot)
    r.add_post(p + "/users/@me/channels", open_dm)
    r.add_get(p + "/users/{user_id}", get_user)
    r.add_get(p + "/guilds/{guild_id}/members/{user_id}", get_member)
    r.add_get(p + "/guilds/{guild_id}/webhooks", guild_webhooks)
    r.add_get(p + "/channels/{channel_id}", get_channel)
    r.add_post(p + "/channels/{channel_id}/messages", create_message)
    r.add_get(p + "/channels/{channel_id}/messages", channel_history)
    r.add_get(p + "/channels/{channel_id}/messages/{message_id}", get_message)
    r.add_patch(p + "/channels/{channel_id}/messages/{message_id}", edit_message)
    r.add_delete(p + "/channels/{channel_id}/messages/{message_id}", delete_message)
    r.add_post(p + "/channels/{channel_id}/typing", typing)
    r.add_put(p + "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", add_reaction)
    r.add_delete(p + "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", remove_reaction)
    r.add_post(p + "/channels/{channel_id}/webhooks", create_webhook)
    r.add_get(p + "/channels/{channel_id}/webhooks", channel_webhooks)
    r.add_get(p + "/webhooks/{webhook_id}", get_webhook)
    r.add_delete(p + "/webhooks/{webhook_id}", delete_webhook)
    r.add_get(p + "/webhooks/{webhook_id}/{token}", get_webhook)
    r.add_post(p + "/webhooks/{webhook_id}/{token}", execute_webhook)
    r.add_get(p + "/webhooks/{webhook_id}/{token}/messages/{message_id}", get_webhook_message)
    r.add_patch(p + "/webhooks/{webhook_id}/{token}/messages/{message_id}", edit_webhook_message)
    r.add_delete(p + "/webhooks/{webhook_id}/{token}/messages/{message_id}", delete_webhook_message)
    r.add_post(p + "/interactions/{interaction_id}/{token}/callback", interaction_callback)
    r.add_put(p + "/applications/{application_id}/commands", put_commands)
    r.add_get(p + "/applications/{application_id}/commands", get_commands)
    r.add_put(p + "/applications/{application_id}/guilds/{guild_id}/commands", put_commands)
    r.add_get(p + "/applications/{application_id}/guilds/{guild_id}/commands", get_commands)
    r.add_get("/attachments/{channel_id}/{attachment_id}/{filename}", attachment)
