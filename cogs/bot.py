"""The Discord bot: intents, extensions, command-tree sync, start-up errors in plain words.

Built like discord.py's advanced start-up example: the services (database, HTTP client, engine)
are opened by the entry point (`python -m bot`, through `bot.app.open_services`) and handed in,
so the bot holds no resource of its own and can be built offline in tests. Cogs are thin
translators between Discord and the engine, their one door to memory.
"""

from __future__ import annotations

import logging
import math
from typing import Protocol

import discord
import yarl
from discord import app_commands
from discord.ext import commands

from bot.clients.health import Health
from bot.config import DEFAULT_DISCORD_API_URL, DiscordSettings, Settings
from bot.engine import Engine
from bot.errors import StartupError
from bot.i18n import COMMANDS, language, set_locale, text
from cogs.utils.answering import ChannelPacer, Languages

log = logging.getLogger(__name__)

EXTENSIONS = ("cogs.conversation", "cogs.memory", "cogs.message_events", "cogs.checkins")
# Nothing the bot writes may ping anyone: replies quote memories and users' own words.
NO_MENTIONS = discord.AllowedMentions.none()


def make_intents(allowed_channel_ids: list[int]) -> discord.Intents:
    """Only what the bot uses: servers and their channels and threads (`guilds`, which the
    message cache needs to know where a message was sent), messages in servers and in DMs
    (the one event listened to, `on_message`), and Message Content only when the bot answers
    whole channels. Slash commands, reactions it adds and the typing indicator it shows need
    no intent; it never listens to voice, presence, typing or reactions of others.

    Mentions of the bot, replies to it and DMs carry their content without the privileged
    intent, so a bot that answers only those needs nothing enabled in the developer portal.
    """
    return discord.Intents(
        guilds=True,
        guild_messages=True,
        dm_messages=True,
        message_content=bool(allowed_channel_ids),
    )


class Translator(app_commands.Translator):
    """Command names, descriptions and options in the user's Discord language (bot.i18n)."""

    async def translate(
        self, string: app_commands.locale_str, locale: discord.Locale, context: app_commands.TranslationContextTypes
    ) -> str | None:
        return COMMANDS.get(language(locale), {}).get(string.message)


class EchoTree(app_commands.CommandTree["EchoBot"]):
    """The application commands, each handled in the language of the person who used it: set
    here, once, before any command, autocomplete or error report of that interaction."""

    async def interaction_check(self, interaction: discord.Interaction[EchoBot], /) -> bool:
        set_locale(interaction.locale)
        self.client.languages.learn(interaction.user.id, interaction.locale)
        return True


class Services(Protocol):
    """What the Discord front end is handed: the engine, the settings (it reads the Discord
    section only), and the health report it tells whether Discord answers."""

    settings: Settings
    engine: Engine
    health: Health


class EchoBot(commands.Bot):
    def __init__(self, services: Services) -> None:
        # The one section of the settings the front end reads, taken when it is built.
        self.settings: DiscordSettings = services.settings.discord
        super().__init__(
            # Owner commands are written "@Écho sync": a mention needs no Message Content intent
            # (discord.py warns at start-up for any other prefix when the intent is off).
            command_prefix=commands.when_mentioned,
            intents=make_intents(self.settings.allowed_channel_ids),
            allowed_mentions=NO_MENTIONS,
            help_command=None,
            tree_cls=EchoTree,
            shard_count=self.settings.shard_count,
            # AutoShardedBot's option: ShardedEchoBot puts it after commands.Bot in its MRO.
            shard_ids=self.settings.shard_ids or None,  # type: ignore[call-arg]
        )
        self.services = services
        # The one pace of the bot's writes in each channel, whichever cog or view writes.
        self.pacer = ChannelPacer()
        # Each person's Discord language, from their interactions: a turn's notes are in it.
        self.languages = Languages()

    async def setup_hook(self) -> None:
        await self._use_gateway_of_api()
        await self.tree.set_translator(Translator())
        await self.add_cog(OwnerCommands(self))
        for extension in EXTENSIONS:
            await self.load_extension(extension)
        guild_id = self.settings.dev_guild_id
        if guild_id is not None:
            guild = discord.Object(id=guild_id)
            self.tree.copy_global_to(guild=guild)
            try:
                synced = await self.tree.sync(guild=guild)
            except discord.HTTPException as exc:
                # A wrong id or a missing scope must not stop the bot: it still talks, and the
                # commands can be synced later (@bot sync).
                log.warning(
                    "could not sync the application commands to DEV_GUILD_ID=%d (%s). Check that "
                    "DEV_GUILD_ID is the id of a server the bot is a member of, and that the bot was "
                    "invited to it with the `applications.commands` scope (developer portal → OAuth2 "
                    "→ URL Generator: bot + applications.commands, then open the URL and pick that "
                    "server). The bot keeps running; an owner can sync later by mentioning the bot with: sync",
                    guild_id,
                    exc,
                )
            else:
                log.info("synced %d application commands to DEV_GUILD_ID %d", len(synced), guild_id)
        else:
            # Global sync is rate-limited and slow to propagate: an owner asks for it (@bot sync).
            log.info("application commands not synced automatically; an owner can mention the bot with: sync")

    async def _use_gateway_of_api(self) -> None:
        """Another REST API than Discord's names its own gateway (a proxy names Discord's)."""
        if self.settings.discord_api_url == DEFAULT_DISCORD_API_URL:
            return
        _shards, url, _limits = await self.http.get_bot_gateway()
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        log.info("Discord API at %s, gateway at %s", self.settings.discord_api_url, url)

    async def is_owner(self, user: discord.abc.User, /) -> bool:
        """The application's owner (or team) known to Discord, plus OWNER_IDS."""
        if user.id in self.settings.owner_ids:
            return True
        return await super().is_owner(user)

    async def on_command_error(self, context: commands.Context[EchoBot], exception: commands.CommandError, /) -> None:
        if isinstance(exception, commands.CommandNotFound):
            return  # "@Écho hello" is a conversation (cogs.conversation), not an unknown command
        await super().on_command_error(context, exception)

    async def on_ready(self) -> None:
        log.info("connected to Discord as %s (id %s)", self.user, self.user.id if self.user else "?")


class ShardedEchoBot(EchoBot, commands.AutoShardedBot):
    """SHARD_COUNT set: those shards (SHARD_IDS of them, or all) in this process; processes
    running the other shards share its database (DATABASE_URL)."""


class OwnerCommands(commands.Cog):
    """Text commands for the bot's owners: `@Écho sync` (or `!sync` in a DM)."""

    def __init__(self, bot: EchoBot) -> None:
        self.bot = bot

    async def cog_before_invoke(self, ctx: commands.Context[EchoBot]) -> None:
        # A text command carries no person's language: the server's, else the owner's English.
        set_locale(ctx.guild.preferred_locale if ctx.guild is not None else None)

    @commands.command(name="sync")
    @commands.is_owner()
    async def sync(self, ctx: commands.Context[EchoBot], where: str = "global") -> None:
        """Sync the slash commands: `sync` for everywhere (up to an hour), `sync guild` for here."""
        if where == "guild":
            if ctx.guild is None:
                await self._say(ctx, text("sync_guild_in_dm"))
                return
            self.bot.tree.copy_global_to(guild=ctx.guild)
            synced = await self.bot.tree.sync(guild=ctx.guild)
            await self._say(ctx, text("synced_here", n=len(synced)))
        elif where == "global":
            synced = await self.bot.tree.sync()
            await self._say(ctx, text("synced_everywhere", n=len(synced)))
        else:
            await self._say(ctx, text("sync_usage"))

    async def cog_command_error(self, ctx: commands.Context[EchoBot], error: commands.CommandError) -> None:
        if isinstance(error, commands.NotOwner):
            log.info("%s (id %d) tried an owner command", ctx.author, ctx.author.id)
            return
        log.error("owner command %s failed", ctx.command, exc_info=error)
        await self._say(ctx, text("failed"))

    async def _say(self, ctx: commands.Context[EchoBot], text: str) -> None:
        async with self.bot.pacer.slot(ctx.channel.id):
            await ctx.send(text)


async def run_discord(services: Services, token: str) -> None:
    """Connect and run until the process is stopped; start-up problems become StartupError.

    Leaving closes the gateway only: the services, the engine among them (in-flight reflections
    finish or stay pending), are closed by whoever opened them."""
    # discord.py has one REST base for the process, webhooks and interactions included.
    discord.http.Route.BASE = services.settings.discord.discord_api_url
    bot = ShardedEchoBot(services) if services.settings.discord.shard_count else EchoBot(services)
    # No heartbeat answered yet (or any more): latency is not a finite number.
    services.health.discord = lambda: bot.is_ready() and not bot.is_closed() and math.isfinite(bot.latency)
    try:
        async with bot:
            await bot.start(token)
    except discord.LoginFailure as exc:
        raise StartupError(
            "Discord refused the bot token (DISCORD_TOKEN). It may have been copied incompletely "
            "or reset since: in the Discord developer portal (https://discord.com/developers/"
            "applications → your app → Bot), press Reset Token, put the new token in .env as "
            "DISCORD_TOKEN=<token> and start again."
        ) from exc
    except discord.PrivilegedIntentsRequired as exc:
        raise StartupError(
            "Discord refused the connection because the bot asks for the Message Content intent, "
            "which ALLOWED_CHANNEL_IDS needs (to read every message of those channels), and it is "
            "not enabled for this application. Enable it in the Discord developer portal "
            "(https://discord.com/developers/applications → your app) → Bot → Privileged Gateway "
            "Intents → Message Content Intent, save, and start again; or unset ALLOWED_CHANNEL_IDS "
            "so the bot answers only mentions, replies and DMs, which need no privileged intent."
        ) from exc
