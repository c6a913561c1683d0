"""`FakeDiscord`: REST and the gateway of a small Discord on 127.0.0.1, for the real bot.

The world starts with one guild ("Fake guild") holding a text channel #general and two
members, alice and bob, plus the bot user of an application. Tests play the users:

    await discord.user_says(ALICE, channel, "hello @bot", mention_bot=True)
    await discord.run_command(ALICE, channel, "memories")
    call = await discord.wait_for_call("POST", "/channels/{}/messages".format(channel.id))

and assert on `discord.calls` (every REST request the bot made, with its JSON and time).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.discord.gateway import GatewaySession, gateway_handler
from tests.fakes.discord.rest import (
    API_PREFIX,
    EPHEMERAL,
    FAKE_DISCORD,
    DiscordError,
    add_routes,
    api_middleware,
    unknown,
)
from tests.fakes.discord.state import (
    Attachment,
    Call,
    Channel,
    Guild,
    Interaction,
    Role,
    User,
    Webhook,
    iso_now,
    new_token,
    snowflake,
)

TOKEN = "fake-bot-token.for-tests-only"
RATE_LIMIT = 5  # per bucket and window: what Discord gives message routes
RATE_LIMIT_WINDOW = 5.0

ALICE = User(id=snowflake(), username="alice", global_name="Alice")
BOB = User(id=snowflake(), username="bob", global_name="Bob")


class FakeDiscord:
    def __init__(self, *, heartbeat_interval_ms: int = 41_250, message_content_enabled: bool = True) -> None:
        self.token = TOKEN
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.message_content_enabled = message_content_enabled
        self.latency = 0.0  # seconds added to every REST answer
        self.application_id = snowflake()
        # GATEWAY_MESSAGE_CONTENT_LIMITED when the intent is enabled, as the gateway's check says.
        self.application_flags = 1 << 19 if message_content_enabled else 0
        self.bot_user = User(id=self.application_id, username="Écho", bot=True)
        self.owner = User(id=snowflake(), username="owner")
        self.users: dict[int, User] = {u.id: u for u in (self.bot_user, self.owner, ALICE, BOB)}
        self.guilds: dict[int, Guild] = {}
        self.channels: dict[int, Channel] = {}
        self.messages: dict[int, dict[str, Any]] = {}
        self.reactions: dict[int, list[str]] = {}
        self.webhooks: dict[int, Webhook] = {}
        # Channels where the bot lacks Manage Webhooks: listing or creating webhooks is refused.
        self.webhooks_forbidden: set[int] = set()
        # Users whose DMs refuse the bot: a message to their DM channel gets 403, code 50007.
        self.dms_refused: set[int] = set()
        self.attachments: dict[int, Attachment] = {}
        self.interactions: dict[int, Interaction] = {}
        self.commands: dict[int | None, list[dict[str, Any]]] = {}
        self.calls: list[Call] = []
        self.call_arrived = asyncio.Event()
        self.late_callbacks: list[int] = []
        self.downloads: list[int] = []
        self.gateway_log: list[dict[str, Any]] = []
        self.sessions: list[GatewaySession] = []
        self._buckets: dict[str, list[float]] = {}
        # When set, a channel's message writes (posts and edits, as the bot or through a channel
        # webhook) past RATE_LIMIT per RATE_LIMIT_WINDOW get 429, as Discord answers them.
        self.enforce_channel_write_limit = False
        self._channel_writes: dict[int, list[float]] = {}
        self.url = ""
        self._runner: web.AppRunner | None = None

        self.member_role = Role(id=snowflake(), name="member", position=1)
        self.guild = self.add_guild("Fake guild", roles=[self.member_role])
        self.general = self.add_text_channel(self.guild, "general")
        for user in (ALICE, BOB, self.owner):
            self.guild.members[user.id] = [self.member_role.id]
        self.guild.members[self.bot_user.id] = []

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        """What DISCORD_API_URL is set to."""
        return self.url + API_PREFIX

    @property
    def gateway_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/gateway"

    async def start(self) -> None:
        app = web.Application(middlewares=[api_middleware])
        app[FAKE_DISCORD] = self
        app.router.add_get("/gateway", gateway_handler)
        add_routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        for session in list(self.sessions):
            await session.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def wait_identified(self, timeout: float = 30.0, *, sessions: int = 1) -> GatewaySession:
        """The bot's gateway session, once READY and every GUILD_CREATE were sent (the last of
        `sessions` to, when several bot processes connect)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = [session for session in self.sessions if session.identified.is_set()]
            if len(ready) >= sessions:
                return ready[-1]
            await asyncio.sleep(0.05)
        raise TimeoutError("the bot did not identify on the fake gateway")

    def forget_records(self) -> None:
        """Forget the REST calls, downloads, late callbacks and gateway frames recorded so far:
        the next test on a bot that stays connected reads only its own. The world stays (users,
        channels, messages, interactions, webhooks, synced commands): the bot may still edit a
        message or follow up an interaction of an earlier test."""
        self.calls.clear()
        self.downloads.clear()
        self.late_callbacks.clear()
        self.gateway_log.clear()

    # --- the world ------------------------------------------------------------------------

    def add_guild(self, name: str, *, roles: list[Role] = ()) -> Guild:  # type: ignore[assignment]
        guild = Guild(id=snowflake(), name=name, owner_id=self.owner.id)
        everyone = Role(id=guild.id, name="@everyone")
        guild.roles = [everyone, *roles]
        self.guilds[guild.id] = guild
        return guild

    def add_text_channel(self, guild: Guild, name: str) -> Channel:
        channel = Channel(id=snowflake(), name=name, guild_id=guild.id)
        guild.channels.append(channel)
        self.channels[channel.id] = channel
        return channel

    async def create_text_channel(self, guild: Guild, name: str) -> Channel:
        """A channel created while the bot is connected: Discord tells the bot (CHANNEL_CREATE),
        so that it knows the channel as a text channel of the guild, not a bare id."""
        channel = self.add_text_channel(guild, name)
        await self.dispatch("CHANNEL_CREATE", channel.payload())
        return channel

    def add_user(
        self,
        username: str,
        *,
        guild: Guild | None = None,
        global_name: str | None = None,
        roles: list[Role] = (),  # type: ignore[assignment]
    ) -> User:
        user = User(id=snowflake(), username=username, global_name=global_name)
        self.users[user.id] = user
        if guild is not None:
            guild.members[user.id] = [role.id for role in roles]
        return user

    def dm_channel(self, user: User) -> Channel:
        for channel in self.channels.values():
            if channel.guild_id is None and channel.recipient is not None and channel.recipient.id == user.id:
                return channel
        channel = Channel(id=snowflake(), name="", guild_id=None, type=1, recipient=user)
        self.channels[channel.id] = channel
        return channel

    def add_attachment(self, channel: Channel, filename: str, data: bytes, content_type: str) -> dict[str, Any]:
        """An uploaded file, served at its `url` like Discord's CDN; pass it to `user_says`."""
        found = Attachment(
            id=snowflake(), channel_id=channel.id, filename=filename, content_type=content_type, data=data
        )
        self.attachments[found.id] = found
        url = f"{self.url}/attachments/{channel.id}/{found.id}/{filename}"
        payload: dict[str, Any] = {
            "id": str(found.id),
            "filename": filename,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }
        if content_type.startswith("image/"):
            payload |= {"width": 64, "height": 64}
        return payload

    # --- payloads -------------------------------------------------------------------------

    def application_payload(self) -> dict[str, Any]:
        return {
            "id": str(self.application_id),
            "name": "Écho",
            "icon": None,
            "description": "",
            "summary": "",
            "type": None,
            "hook": True,
            "bot_public": True,
            "bot_require_code_grant": False,
            "verify_key": "0" * 64,
            "flags": self.application_flags,
            "owner": self.owner.payload(),
            "team": None,
            "bot": self.bot_user.payload(),
            "rpc_origins": [],
            "tags": [],
            "redirect_uris": [],
            "interactions_endpoint_url": None,
            "role_connections_verification_url": None,
            "install_params": None,
            "integration_types_config": {"0": {}},
            "approximate_guild_count": len(self.guilds),
        }

    def member_payload(self, guild: Guild, user_id: int, *, with_user: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "roles": [str(r) for r in guild.members.get(user_id, [])],
            "nick": None,
            "avatar": None,
            "banner": None,
            "joined_at": "2025-01-01T00:00:00+00:00",
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "pending": False,
            "flags": 0,
            "communication_disabled_until": None,
        }
        if with_user:
            data["user"] = self.users[user_id].payload()
        return data

    def guild_create_payload(self, guild: Guild) -> dict[str, Any]:
        return {
            "id": str(guild.id),
            "name": guild.name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(guild.owner_id),
            "region": None,
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "preferred_locale": "en-US",
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "max_members": 500000,
            "vanity_url_code": None,
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [r.payload() for r in guild.roles],
            "channels": [c.payload() for c in guild.channels],
            "threads": [],
            "members": [self.member_payload(guild, uid, with_user=True) for uid in guild.members],
            "member_count": len(guild.members),
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "large": False,
            "unavailable": False,
            "lazy": True,
            "joined_at": "2025-01-01T00:00:00+00:00",
            "application_id": None,
            "premium_progress_bar_enabled": False,
        }

    def webhook_payload(self, webhook: Webhook) -> dict[str, Any]:
        return {
            "id": str(webhook.id),
            "type": 1,
            "guild_id": str(webhook.guild_id) if webhook.guild_id else None,
            "channel_id": str(webhook.channel_id),
            "name": webhook.name,
            "avatar": webhook.avatar,
            "token": webhook.token,
            "application_id": str(self.application_id),
            "user": webhook.creator.payload(),
        }

    def command_payload(self, command: dict[str, Any], guild_id: int | None) -> dict[str, Any]:
        same = [c for c in self.commands.get(guild_id, []) if c["name"] == command["name"]]
        data = {
            "type": 1,
            "description": "",
            "options": [],
            "default_member_permissions": None,
            "nsfw": False,
            "contexts": None,
            "integration_types": [0],
            "dm_permission": True,
            **command,
            "id": same[0]["id"] if same else str(snowflake()),
            "application_id": str(self.application_id),
            "version": str(snowflake()),
        }
        if guild_id is not None:
            data["guild_id"] = str(guild_id)
        return data

    def new_message(
        self,
        channel: Channel,
        author: User | None,
        content: str,
        *,
        mentions: list[User] = (),  # type: ignore[assignment]
        replied: dict[str, Any] | None = None,
        ping_replied: bool = True,
        attachments: list[dict[str, Any]] = (),  # type: ignore[assignment]
        embeds: list[dict[str, Any]] = (),  # type: ignore[assignment]
        components: list[dict[str, Any]] = (),  # type: ignore[assignment]
        flags: int = 0,
        webhook: Webhook | None = None,
        webhook_username: str | None = None,
        webhook_avatar_url: str | None = None,
        interaction: Interaction | None = None,
    ) -> dict[str, Any]:
        """Stores and returns a message in the shape Discord sends it (not yet dispatched)."""
        message_id = snowflake()
        guild = self.guilds.get(channel.guild_id) if channel.guild_id is not None else None
        if webhook is not None:
            author_payload = {
                "id": str(webhook.id),
                "username": webhook_username or webhook.name,
                "discriminator": "0000",
                "global_name": None,
                "avatar": None,
                "avatar_url": webhook_avatar_url,  # not in Discord's payload; kept for tests
                "bot": True,
            }
        else:
            assert author is not None
            author_payload = author.payload()
        mentioned = list(mentions)
        # A reply pings its target unless told not to (allowed_mentions.replied_user).
        if ping_replied and replied is not None and replied["author"]["id"] not in {str(u.id) for u in mentioned}:
            replied_author = self.users.get(int(replied["author"]["id"]))
            if replied_author is not None:
                mentioned.append(replied_author)
        message: dict[str, Any] = {
            "id": str(message_id),
            "channel_id": str(channel.id),
            "author": author_payload,
            "content": content,
            "timestamp": iso_now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [self._mention(u, guild) for u in mentioned],
            "mention_roles": [],
            "mention_channels": [],
            "attachments": list(attachments),
            "embeds": list(embeds),
            "reactions": [],
            "pinned": False,
            "type": 19 if replied is not None else (20 if interaction is not None else 0),
            "flags": flags,
            "components": list(components),
        }
        if guild is not None:
            message["guild_id"] = str(guild.id)
            if author is not None and webhook is None and author.id in guild.members:
                message["member"] = self.member_payload(guild, author.id)
        if webhook is not None:
            message["webhook_id"] = str(webhook.id)
        if replied is not None:
            message["message_reference"] = {
                "type": 0,
                "message_id": replied["id"],
                "channel_id": replied["channel_id"],
                **({"guild_id": replied["guild_id"]} if "guild_id" in replied else {}),
            }
            message["referenced_message"] = {k: v for k, v in replied.items() if not k.startswith("_")}
        if interaction is not None:
            user = interaction.payload.get("member", {}).get("user") or interaction.payload.get("user")
            message["interaction_metadata"] = {
                "id": str(interaction.id),
                "type": interaction.payload["type"],
                "user": user,
                "authorizing_integration_owners": {"0": str(channel.guild_id)}
                if channel.guild_id
                else {"1": user["id"]},
            }
            message["application_id"] = str(self.application_id)
            message["webhook_id"] = str(self.application_id)
            message["_interaction_id"] = interaction.id
        self.messages[message_id] = message
        return message

    def _mention(self, user: User, guild: Guild | None) -> dict[str, Any]:
        data = user.payload()
        if guild is not None and user.id in guild.members:
            data["member"] = self.member_payload(guild, user.id)
        return data

    def apply_edit(self, message: dict[str, Any], body: dict[str, Any]) -> None:
        for key in ("content", "embeds", "components", "attachments"):
            if key in body and body[key] is not None:
                message[key] = body[key]
        if "flags" in body and body["flags"] is not None:
            message["flags"] = int(body["flags"])
        message["edited_timestamp"] = iso_now()

    def public(self, message: dict[str, Any]) -> dict[str, Any]:
        """The message as the gateway sends it (the fake's private keys removed)."""
        return {k: v for k, v in message.items() if not k.startswith("_")}

    # --- gateway dispatch -----------------------------------------------------------------

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        for session in list(self.sessions):
            if session.identified.is_set():
                await session.dispatch(event, data)

    async def dispatch_message(self, event: str, message: dict[str, Any]) -> None:
        """MESSAGE_CREATE/UPDATE, with the content blanked for sessions without the Message
        Content intent, as Discord does (except DMs, mentions of the bot and its own)."""
        for session in list(self.sessions):
            if not session.identified.is_set():
                continue
            data = self.public(message)
            if not session.intents & (1 << 15) and not self._content_visible(message):
                data = data | {"content": "", "embeds": [], "attachments": [], "components": []}
            await session.dispatch(event, data)

    def _content_visible(self, message: dict[str, Any]) -> bool:
        bot_id = str(self.bot_user.id)
        return (
            "guild_id" not in message
            or message["author"]["id"] == bot_id
            or any(m["id"] == bot_id for m in message["mentions"])
        )

    async def delete_message(self, message: dict[str, Any]) -> None:
        del self.messages[int(message["id"])]
        data = {"id": message["id"], "channel_id": message["channel_id"]}
        if "guild_id" in message:
            data["guild_id"] = message["guild_id"]
        if not int(message.get("flags") or 0) & EPHEMERAL:
            await self.dispatch("MESSAGE_DELETE", data)

    # --- the users' side ------------------------------------------------------------------

    async def user_says(
        self,
        user: User,
        channel: Channel,
        content: str,
        *,
        mention_bot: bool = False,
        reply_to: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """A user posts a message; with `mention_bot`, "<@bot> " is put in front of it."""
        if mention_bot:
            content = f"<@{self.bot_user.id}> {content}"
        message = self.new_message(
            channel,
            user,
            content,
            mentions=[self.bot_user] if mention_bot else [],
            replied=reply_to,
            attachments=attachments,
        )
        await self.dispatch_message("MESSAGE_CREATE", message)
        return message

    def add_webhook(self, channel: Channel, name: str, *, creator: User) -> Webhook:
        """A webhook another app or person made in `channel` (a PluralKit proxy, another bot)."""
        webhook = Webhook(
            id=snowflake(),
            token=new_token(),
            channel_id=channel.id,
            guild_id=channel.guild_id,
            name=name,
            avatar=None,
            creator=creator,
        )
        self.webhooks[webhook.id] = webhook
        return webhook

    async def webhook_says(self, webhook: Webhook, content: str, *, username: str | None = None) -> dict[str, Any]:
        """A message posted through `webhook` under `username`, as its owner would execute it."""
        message = self.new_message(
            self.channels[webhook.channel_id], None, content, webhook=webhook, webhook_username=username
        )
        await self.dispatch_message("MESSAGE_CREATE", message)
        return message

    async def user_edits(self, message: dict[str, Any], content: str) -> dict[str, Any]:
        self.apply_edit(message, {"content": content})
        await self.dispatch_message("MESSAGE_UPDATE", message)
        return message

    async def user_deletes(self, message: dict[str, Any]) -> None:
        await self.delete_message(message)

    async def moderator_bulk_deletes(self, messages: list[dict[str, Any]]) -> None:
        """Several messages of one channel deleted at once (a purge): one MESSAGE_DELETE_BULK."""
        for message in messages:
            del self.messages[int(message["id"])]
        data: dict[str, Any] = {"ids": [m["id"] for m in messages], "channel_id": messages[0]["channel_id"]}
        if "guild_id" in messages[0]:
            data["guild_id"] = messages[0]["guild_id"]
        await self.dispatch("MESSAGE_DELETE_BULK", data)

    async def run_command(
        self,
        user: User,
        channel: Channel,
        name: str,
        options: list[dict[str, Any]] = (),  # type: ignore[assignment]
        *,
        locale: str = "en-US",
    ) -> Interaction:
        """A user runs a slash command (the command must have been synced, as in Discord)."""
        return await self._interact(user, channel, 2, self._command_data(channel, name, options), locale=locale)

    async def autocomplete(
        self, user: User, channel: Channel, name: str, options: list[dict[str, Any]], *, locale: str = "en-US"
    ) -> Interaction:
        """A user types in an option of /name: the option being typed has `"focused": True` and
        its text as value, whatever its type. The bot answers with choices (callback type 8)."""
        return await self._interact(user, channel, 4, self._command_data(channel, name, options), locale=locale)

    def _command_data(self, channel: Channel, name: str, options: list[dict[str, Any]]) -> dict[str, Any]:
        guild_id = channel.guild_id
        synced = self.commands.get(guild_id, []) + self.commands.get(None, [])
        found = [c for c in synced if c["name"] == name]
        if not found:
            raise LookupError(f"/{name} was never synced to this guild or globally; Discord would not show it")
        command = found[0]
        data: dict[str, Any] = {"id": command["id"], "name": name, "type": 1, "options": list(options)}
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        return data

    async def press_button(
        self, user: User, message: dict[str, Any], custom_id: str, *, locale: str = "en-US"
    ) -> Interaction:
        channel = self.channels[int(message["channel_id"])]
        return await self._interact(
            user, channel, 3, {"custom_id": custom_id, "component_type": 2}, message=message, locale=locale
        )

    async def choose(self, user: User, message: dict[str, Any], custom_id: str, values: list[str]) -> Interaction:
        """A user picks `values` in a string select menu of `message`."""
        channel = self.channels[int(message["channel_id"])]
        data = {"custom_id": custom_id, "component_type": 3, "values": list(values)}
        return await self._interact(user, channel, 3, data, message=message)

    async def submit_modal(
        self,
        user: User,
        channel: Channel,
        custom_id: str,
        values: dict[str, str],
        *,
        message: dict[str, Any] | None = None,
        locale: str = "en-US",
    ) -> Interaction:
        rows = [
            {"type": 1, "components": [{"type": 4, "custom_id": key, "value": value}]} for key, value in values.items()
        ]
        return await self._interact(
            user, channel, 5, {"custom_id": custom_id, "components": rows}, message=message, locale=locale
        )

    async def _interact(
        self,
        user: User,
        channel: Channel,
        kind: int,
        data: dict[str, Any],
        *,
        message: dict[str, Any] | None = None,
        locale: str = "en-US",
    ) -> Interaction:
        interaction_id = snowflake()
        payload: dict[str, Any] = {
            "id": str(interaction_id),
            "application_id": str(self.application_id),
            "type": kind,
            "data": data,
            "channel_id": str(channel.id),
            "channel": channel.payload(),
            "token": new_token(),
            "version": 1,
            "app_permissions": "2248473465835073",
            "locale": locale,
            "entitlements": [],
            "attachment_size_limit": 10 * 1024 * 1024,
            "authorizing_integration_owners": {"0": str(channel.guild_id)} if channel.guild_id else {"1": str(user.id)},
            "context": 0 if channel.guild_id else 1,
        }
        if channel.guild_id is not None:
            guild = self.guilds[channel.guild_id]
            payload["guild_id"] = str(guild.id)
            payload["guild"] = {"id": str(guild.id), "locale": "en-US", "features": []}
            payload["guild_locale"] = "en-US"
            payload["member"] = self.member_payload(guild, user.id, with_user=True) | {
                "permissions": "2248473465835073"
            }
        else:
            payload["user"] = user.payload()
        if message is not None:
            payload["message"] = self.public(message)
        interaction = Interaction(id=interaction_id, token=payload["token"], created=time.monotonic(), payload=payload)
        self.interactions[interaction_id] = interaction
        await self.dispatch("INTERACTION_CREATE", payload)
        return interaction

    def interaction_by_token(self, token: str, *, lifetime: float) -> Interaction:
        for interaction in self.interactions.values():
            if interaction.token == token:
                if time.monotonic() - interaction.created > lifetime:
                    raise DiscordError(401, 50027, "Invalid Webhook Token")
                return interaction
        raise unknown("Webhook", 10015)

    # --- assertions -----------------------------------------------------------------------

    def calls_to(self, method: str, path_prefix: str) -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.startswith(path_prefix)]

    async def wait_for_call(
        self,
        method: str,
        path_prefix: str,
        *,
        where: Callable[[Call], bool] = lambda call: True,
        count: int = 1,
        timeout: float = 30.0,
    ) -> list[Call]:
        """Wait until the bot made `count` matching REST calls; returns them all."""
        deadline = time.monotonic() + timeout
        while True:
            found = [c for c in self.calls_to(method, path_prefix) if where(c)]
            if len(found) >= count:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = "\n".join(f"  {c.method} {c.path} {c.status}" for c in self.calls[-20:])
                raise TimeoutError(f"no {count}× {method} {path_prefix} within {timeout} s; last calls:\n{seen}")
            self.call_arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.call_arrived.wait(), min(remaining, 0.2))

    async def wait_for_text(self, channel: Channel, expected: str, *, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until a message of the bot in `channel` shows `expected`, edits included: a
        streamed reply is posted with its first words and edited as the rest arrives, so its
        first POST may hold only part of the text. Returns that message."""
        deadline = time.monotonic() + timeout
        bot_id = str(self.bot_user.id)
        while True:
            for message in reversed(self.messages_in(channel)):
                if message["author"]["id"] == bot_id and expected in message.get("content", ""):
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                shown = [m.get("content", "") for m in self.messages_in(channel) if m["author"]["id"] == bot_id]
                raise TimeoutError(f"the bot never showed {expected!r} within {timeout} s; it shows {shown}")
            self.call_arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.call_arrived.wait(), min(remaining, 0.2))

    def messages_in(self, channel: Channel) -> list[dict[str, Any]]:
        return sorted(
            (m for m in self.messages.values() if int(m["channel_id"]) == channel.id),
            key=lambda m: int(m["id"]),
        )

    def channel_written(self, method: str, path: str) -> int | None:
        """The channel whose messages this request posts or edits (reactions have their own limit;
        interaction responses are not channel writes)."""
        if method not in ("POST", "PATCH", "DELETE"):
            return None
        parts = path.strip("/").split("/")
        if parts[0] == "channels" and len(parts) >= 3 and parts[2] == "messages" and "reactions" not in parts:
            return int(parts[1]) if parts[1].isdigit() else None
        if parts[0] == "webhooks" and len(parts) >= 3 and parts[1].isdigit():
            webhook = self.webhooks.get(int(parts[1]))
            return webhook.channel_id if webhook is not None else None
        return None

    def over_channel_write_limit(self, method: str, path: str) -> float | None:
        """Seconds to wait when this write is one too many for its channel (None: allowed)."""
        channel_id = self.channel_written(method, path) if self.enforce_channel_write_limit else None
        if channel_id is None:
            return None
        now = time.monotonic()
        window = [t for t in self._channel_writes.get(channel_id, []) if now - t < RATE_LIMIT_WINDOW]
        if len(window) >= RATE_LIMIT:
            self._channel_writes[channel_id] = window
            return RATE_LIMIT_WINDOW - (now - window[0])
        self._channel_writes[channel_id] = [*window, now]
        return None

    def rate_limit_bucket(self, method: str, path: str) -> dict[str, str]:
        """Discord's rate-limit headers for this route (per channel for message routes)."""
        parts = path.strip("/").split("/")
        major = (
            "/".join(parts[:2])
            if parts and parts[0] in ("channels", "guilds", "webhooks")
            else parts[0]
            if parts
            else ""
        )
        key = f"{method} {major}"
        now = time.monotonic()
        window = [t for t in self._buckets.get(key, []) if now - t < RATE_LIMIT_WINDOW]
        window.append(now)
        self._buckets[key] = window
        reset_after = RATE_LIMIT_WINDOW - (now - window[0])
        return {
            "X-RateLimit-Limit": str(RATE_LIMIT),
            # Never 0: the fake records the pace, it does not slow the bot down.
            "X-RateLimit-Remaining": str(max(RATE_LIMIT - len(window), 1)),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": hashlib.sha1(key.encode()).hexdigest()[:16],
            "X-RateLimit-Scope": "user",
        }
