"""Check-ins: the character writes first, in a direct message, to ask how a dated event went.

The engine decides who is due and when (bot/engine/followups.py: opt-in, daytime, at most one
a day and three a week, from the database) and claims each one, so that of several bot
processes sharing the database one sends it. This cog only delivers: it checks the person is
still in the server where they last wrote, opens the DM, has the engine write and store the
message, sends it, and tells the engine how it went. Discord's 50007 ("Cannot send messages to
this user": DMs closed, or no server in common) turns the person's check-ins off; their next
turn says so. An erase (`Engine.listen(erasing=…)`) stops a check-in under way for that person.
"""

from __future__ import annotations

import asyncio
import logging

import discord
from discord.ext import commands, tasks

from bot.engine import Engine
from bot.engine.followups import Checkin
from bot.i18n import set_locale
from bot.memory.model import DM_PLACE, StoryId
from cogs.bot import EchoBot
from cogs.utils.answering import place_of, split_message

log = logging.getLogger(__name__)

# Discord's error code for a DM the user does not accept.
CANNOT_SEND = 50007


class Checkins(commands.Cog):
    def __init__(self, bot: EchoBot, engine: Engine) -> None:
        self.bot = bot
        self.engine = engine
        settings = bot.settings
        self.off_places = frozenset(place_of(g) for g in settings.checkins_off_guild_ids)
        self.look.change_interval(seconds=settings.checkin_interval_seconds)
        # The check-in under way for each person: an erase cancels it.
        self._sending: dict[str, asyncio.Task[None]] = {}

    async def cog_load(self) -> None:
        self.engine.listen(erasing=self._erasing)

    @commands.Cog.listener()
    async def on_ready(self) -> None:
        # Started once the client is connected (a bot loaded but never logged in, as the
        # command tree's check builds it, has no loop to run); on_ready comes again on resumes.
        if not self.look.is_running():
            self.look.start()

    async def cog_unload(self) -> None:
        self.look.cancel()
        self.engine.unlisten(erasing=self._erasing)

    def _erasing(self, person: str) -> None:
        task = self._sending.get(person)
        if task is not None:
            task.cancel()

    @tasks.loop(seconds=600)
    async def look(self) -> None:
        for checkin in await self.engine.conversation.due_checkins(self.off_places):
            if not checkin.person.isdigit():
                continue  # a terminal chat's name: no one to write to
            task = asyncio.create_task(self.deliver(checkin), name=f"checkin:{checkin.person}")
            self._sending[checkin.person] = task
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # the loop itself is stopping
                log.info("a check-in was stopped: its person erased their data")
            except Exception:
                log.exception("a check-in could not be delivered")
            finally:
                self._sending.pop(checkin.person, None)

    async def deliver(self, checkin: Checkin) -> None:
        port = self.engine.conversation
        if not await port.claim_checkin(checkin):
            return
        exchange_id: int | None = None
        try:
            if not await self._still_there(checkin):
                log.info("a check-in is not sent: its person left the server where they last wrote")
                await port.checkin_left(checkin)
                return
            user = await self.bot.fetch_user(int(checkin.person))
            dm = await user.create_dm()
            set_locale(self.bot.languages.for_turn(user.id, self.engine.cast.default.language, None))
            written = await port.write_checkin(checkin, story_id=StoryId(str(dm.id)), user_name=user.display_name)
            if written is None:
                return
            exchange_id, reply = written
            if not await port.checkin_still_claimed(checkin):
                return
            sent = [await dm.send(chunk) for chunk in split_message(reply)]
        except discord.Forbidden as exc:
            blocked = exc.code == CANNOT_SEND
            log.info("a check-in was refused by Discord (%s)%s", exc.code, ": check-ins turned off" if blocked else "")
            await port.checkin_unsent(checkin, exchange_id, blocked=blocked)
            return
        except (discord.HTTPException, ValueError) as exc:
            log.warning("a check-in could not be sent, tried again later: %s", exc)
            await port.checkin_unsent(checkin, exchange_id, blocked=False)
            return
        except asyncio.CancelledError:
            await asyncio.shield(port.checkin_unsent(checkin, exchange_id, blocked=False))
            raise
        await port.checkin_sent(
            checkin, story_id=StoryId(str(dm.id)), exchange_id=exchange_id, message_id=str(sent[-1].id)
        )

    async def _still_there(self, checkin: Checkin) -> bool:
        """Whether the person is still a member of the server where they last wrote (a DM:
        Discord itself refuses the message to someone who shares no server with the bot)."""
        if checkin.place == DM_PLACE:
            return True
        guild = self.bot.get_guild(int(checkin.place)) if checkin.place.isdigit() else None
        if guild is None:
            return False
        try:
            await guild.fetch_member(int(checkin.person))
        except discord.NotFound:
            return False
        return True


async def setup(bot: EchoBot) -> None:
    await bot.add_cog(Checkins(bot, bot.services.engine))
