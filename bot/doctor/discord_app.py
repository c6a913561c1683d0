"""The checks of the Discord application: the token, the intents, the servers it is in, the
webhooks a folder of characters speaks through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx

from bot.characters.cast import Cast
from bot.config import Settings
from bot.doctor.finding import Finding, bad, good

DISCORD_SECONDS = 10.0


# Application flags (GET /applications/@me): the intent is enabled, for a verified or an
# unverified (under 100 servers) application.
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)


MANAGE_WEBHOOKS = 1 << 29


# A bounded number of channels.yaml places are asked about: each is one REST call.
MAX_PLACES_CHECKED = 25


PORTAL = "https://discord.com/developers/applications"


async def check_discord(settings: Settings, cast: Cast | None, http: httpx.AsyncClient) -> list[Finding]:
    token = settings.discord.discord_token.get_secret_value().strip() if settings.discord.discord_token else ""
    if not token:
        return [bad("Discord token", "DISCORD_TOKEN is not set", f"{PORTAL} → your app → Bot → Reset Token, into .env")]
    base = settings.discord.discord_api_url
    headers = {"Authorization": f"Bot {token}"}

    async def get(path: str) -> httpx.Response:
        return await http.get(base + path, headers=headers, timeout=DISCORD_SECONDS)

    try:
        me = await get("/users/@me")
    except httpx.HTTPError as exc:
        return [
            bad("Discord", f"{base} does not answer ({type(exc).__name__})", "check the network, or DISCORD_API_URL")
        ]
    if me.status_code == 401:
        return [bad("Discord token", "refused by Discord (401)", f"{PORTAL} → your app → Bot → Reset Token, into .env")]
    if me.status_code != 200:
        return [bad("Discord", f"GET /users/@me answered HTTP {me.status_code}", "check DISCORD_API_URL")]
    user = me.json()
    found = [good("Discord token", f"valid, bot {user.get('username')} ({user.get('id')})")]
    app = (await get("/applications/@me")).json()
    flags = int(app.get("flags") or 0)
    if not settings.discord.allowed_channel_ids:
        found.append(good("Discord intents", "no privileged intent needed (ALLOWED_CHANNEL_IDS is empty)"))
    elif flags & MESSAGE_CONTENT_FLAGS:
        found.append(good("Discord intents", "Message Content enabled, as ALLOWED_CHANNEL_IDS needs"))
    else:
        found.append(
            bad(
                "Discord intents",
                "ALLOWED_CHANNEL_IDS needs the Message Content intent, not enabled for this application",
                f"{PORTAL} → your app → Bot → Privileged Gateway Intents → Message Content Intent, save; "
                "or empty ALLOWED_CHANNEL_IDS",
            )
        )
    invite = (
        f"https://discord.com/oauth2/authorize?client_id={app.get('id')}&scope=bot+applications.commands"
        f"&permissions={MANAGE_WEBHOOKS | 0x4C00}"
    )
    if settings.discord.dev_guild_id is None:
        found.append(good("Discord server", "DEV_GUILD_ID not set: an owner syncs commands with @bot sync"))
    else:
        guilds = (await get("/users/@me/guilds")).json()
        ids = {str(g.get("id")) for g in guilds} if isinstance(guilds, list) else set()
        if str(settings.discord.dev_guild_id) in ids:
            found.append(good("Discord server", f"the bot is in DEV_GUILD_ID {settings.discord.dev_guild_id}"))
        else:
            found.append(
                bad(
                    "Discord server",
                    f"the bot is not in DEV_GUILD_ID {settings.discord.dev_guild_id}",
                    f"invite it: {invite}",
                )
            )
    if cast is not None and cast.from_folder:
        found += await _check_webhooks(cast, get)
    return found


async def _check_webhooks(cast: Cast, get: Callable[[str], Awaitable[httpx.Response]]) -> list[Finding]:
    places = [(f"/channels/{i}/webhooks", f"channel {i}") for i in cast.channels]
    places += [(f"/guilds/{i}/webhooks", f"server {i}") for i in cast.servers]
    missing: list[str] = []
    checked = places[:MAX_PLACES_CHECKED]
    for path, name in checked:
        if (await get(path)).status_code in (403, 404):
            missing.append(name)
    if cast.categories:
        # A category's channels inherit its permissions; each is asked where it is mapped.
        checked_note = f" (categories {', '.join(map(str, cast.categories))} are not checked: check a channel of each)"
    else:
        checked_note = ""
    if missing:
        return [
            bad(
                "Discord webhooks",
                f"no Manage Webhooks in {', '.join(missing)}: characters there answer as the bot itself",
                "Server Settings → Roles → the bot's role → Manage Webhooks (or the channel's permissions)",
            )
        ]
    return [good("Discord webhooks", f"Manage Webhooks in the {len(checked)} places channels.yaml maps{checked_note}")]
