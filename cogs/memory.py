"""Slash commands on one's own memory, and the "Remember this" message menu.

Every answer is ephemeral: only the person who asked sees their memories. Every call passes
`str(interaction.user.id)` to the engine, whose statements are all scoped by user, so another
user's memory id behaves exactly like an id that does not exist. Texts come from
`bot.presenting` and use the wording of the terminal commands (`bot.terminal.commands`).
"""

from __future__ import annotations

import gzip
import io
import logging
from typing import ClassVar

import discord
from discord import app_commands
from discord.ext import commands

from bot.characters.character import Character
from bot.clients.values import row_id
from bot.engine import MAX_MEMORY_CHARS, Engine, export_json
from bot.engine.memory_commands import MemoryCommands as Commands
from bot.i18n import text
from bot.memory.model import USER_MEMORY_TYPES, Memory, OwnerKey, PersonId
from bot.presenting import answer, edit_option, memory_pages_with_spans
from cogs.bot import NO_MENTIONS, EchoBot
from cogs.utils.answering import (
    AnswerPolicy,
    history_choices,
    memory_choices,
    person_of,
    place_of,
    story_of,
    user_refusal,
)
from cogs.utils.views import NO_ROW, OWNER, OwnerGate, UnknownCharacter, open_editor, report_failure, say
from cogs.utils.voices import character_at

log = logging.getLogger(__name__)

PAGE_TIMEOUT = 300.0  # well under the 15 minutes an interaction token lives
CONFIRM_TIMEOUT = 60.0
# Discord's upload limit for bots is 10 MiB: a larger export is sent gzipped.
EXPORT_MAX_BYTES = 8 * 1024 * 1024


CHARACTER_OPTION = "Another character than this channel's (start typing to pick)"


class OwnerOnlyView(OwnerGate, discord.ui.View):
    """A view only the person who ran the command may use (its items' custom ids name them:
    `echo:<kind>:<owner>:<action>`, checked by `OwnerGate`); it keeps that interaction to edit the
    (ephemeral) message when it times out."""

    kind: ClassVar[str]

    def __init__(self, owner: int | str, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self.owner = str(owner)
        self.origin: discord.Interaction | None = None

    def _custom_id(self, action: str) -> str:
        return f"echo:{self.kind}:{self.owner}:{action}"

    async def on_error(
        self, interaction: discord.Interaction, error: Exception, item: discord.ui.Item[OwnerOnlyView], /
    ) -> None:
        label = getattr(item, "label", None) or type(item).__name__
        await report_failure(interaction, f"{type(self).__name__} button {label!r}", error)

    async def _edit_origin(self, **changes: object) -> None:
        if self.origin is None:
            return
        try:
            await self.origin.edit_original_response(**changes)  # type: ignore[arg-type]
        except discord.HTTPException as exc:
            # Dismissed by the user, or the interaction token expired: nothing left to update.
            log.debug("could not update a timed-out view: %s", exc)


class PageView(OwnerOnlyView, custom_ids=r"echo:pages:" + OWNER + r":(?:prev|next|edit)"):
    kind = "pages"

    def __init__(self, owner: int | str, pages: list[str], *, timeout: float = PAGE_TIMEOUT) -> None:
        super().__init__(owner, timeout=timeout)
        self.pages = pages
        self.index = 0
        self.previous_page.custom_id = self._custom_id("prev")
        self.next_page.custom_id = self._custom_id("next")
        self.previous_page.label = text("previous")
        self.next_page.label = text("next")
        self._update_buttons()

    @property
    def page(self) -> str:
        return self.pages[self.index]

    def _update_buttons(self) -> None:
        self.previous_page.disabled = self.index == 0
        self.next_page.disabled = self.index >= len(self.pages) - 1

    async def _show(self, interaction: discord.Interaction, index: int) -> None:
        self.index = max(0, min(index, len(self.pages) - 1))
        self._update_buttons()
        await interaction.response.edit_message(content=self.page, view=self)

    # Labelled from the catalogue when the view is made.
    @discord.ui.button(label="◀", style=discord.ButtonStyle.secondary)
    async def previous_page(self, interaction: discord.Interaction, button: discord.ui.Button[PageView]) -> None:
        await self._show(interaction, self.index - 1)

    @discord.ui.button(label="▶", style=discord.ButtonStyle.secondary)
    async def next_page(self, interaction: discord.Interaction, button: discord.ui.Button[PageView]) -> None:
        await self._show(interaction, self.index + 1)

    async def on_timeout(self) -> None:
        self.previous_page.disabled = True
        self.next_page.disabled = True
        await self._edit_origin(view=self)


class MemoryPages(PageView):
    """/memories: the pages, and a menu to edit one of the memories of the page shown."""

    def __init__(
        self,
        engine: Engine,
        owner_key: str,
        pages: list[str],
        groups: list[list[Memory]],
        *,
        timeout: float = PAGE_TIMEOUT,
    ) -> None:
        self.engine = engine
        self.groups = groups
        # Under the memory owner key the pages are of (the person's, for the character asked about).
        self.edit_menu: discord.ui.Select[MemoryPages] = discord.ui.Select(
            placeholder=text("edit_placeholder"), row=1, custom_id=f"echo:{self.kind}:{owner_key}:edit"
        )
        self.edit_menu.callback = self._edit  # type: ignore[method-assign]
        super().__init__(owner_key, pages, timeout=timeout)
        self.add_item(self.edit_menu)

    def _update_buttons(self) -> None:
        super()._update_buttons()
        self.edit_menu.options = [
            discord.SelectOption(label=label, description=description, value=str(m.id))
            for m in self.groups[self.index][:25]
            for label, description in [edit_option(m)]
        ]

    async def _edit(self, interaction: discord.Interaction) -> None:
        await open_editor(interaction, self.engine, row_id(self.edit_menu.values[0]) or NO_ROW, OwnerKey(self.owner))

    async def on_timeout(self) -> None:
        self.edit_menu.disabled = True
        await super().on_timeout()


class EraseConfirm(OwnerOnlyView, custom_ids=r"echo:erase:" + OWNER + r":(?:confirm|cancel)"):
    kind = "erase"

    def __init__(self, engine: Engine, owner_id: int, *, timeout: float = CONFIRM_TIMEOUT) -> None:
        super().__init__(owner_id, timeout=timeout)
        self.engine = engine
        self.confirm.custom_id = self._custom_id("confirm")
        self.cancel.custom_id = self._custom_id("cancel")
        self.confirm.label = text("erase_button")
        self.cancel.label = text("cancel_button")
        # Said when it times out, in the task of no interaction: read in the language now set.
        self.timed_out = text("nothing_erased_timeout")

    # Labelled from the catalogue when the view is made.
    @discord.ui.button(label="…", style=discord.ButtonStyle.danger)
    async def confirm(self, interaction: discord.Interaction, button: discord.ui.Button[EraseConfirm]) -> None:
        self.stop()  # a second press is not dispatched to a stopped view
        await interaction.response.edit_message(content=text("erasing"), view=None)
        erased = await Commands(self.engine).erase(PersonId(self.owner))
        await interaction.edit_original_response(content=answer(erased))

    @discord.ui.button(label="…", style=discord.ButtonStyle.secondary)
    async def cancel(self, interaction: discord.Interaction, button: discord.ui.Button[EraseConfirm]) -> None:
        self.stop()
        await interaction.response.edit_message(content=text("nothing_erased"), view=None)

    async def on_timeout(self) -> None:
        await self._edit_origin(content=self.timed_out, view=None)


class MemoryCommands(commands.Cog):
    def __init__(self, bot: EchoBot, engine: Engine) -> None:
        self.bot = bot
        self.engine = engine
        self.run = Commands(engine)
        self.policy = AnswerPolicy.from_settings(bot.settings)
        # Context menus cannot be declared in a cog's body; added to the tree on load.
        self.remember_menu = app_commands.ContextMenu(name="Remember this", callback=self.remember_this)
        # Built from a bound method, the menu has no cog binding: cog_app_command_error never
        # sees its errors, so it gets its own handler.
        self.remember_menu.error(self._remember_menu_error)

    async def cog_load(self) -> None:
        self.bot.tree.add_command(self.remember_menu)

    async def cog_unload(self) -> None:
        self.bot.tree.remove_command(self.remember_menu.name, type=self.remember_menu.type)

    async def cog_app_command_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        await report_failure(interaction, f"/{interaction.command.name if interaction.command else '?'}", error)

    async def _remember_menu_error(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        await report_failure(interaction, f"the {self.remember_menu.name!r} menu", error)

    def _character(self, interaction: discord.Interaction, chosen: str | None) -> Character:
        """The character a command acts on: the one named, else the channel's."""
        if chosen:
            found = self.engine.cast.by_name_or_key(chosen)
            if found is None:
                raise UnknownCharacter(chosen, ", ".join(c.name for c in self.engine.cast.characters.values()))
            return found
        return character_at(self.engine.cast, interaction.channel, interaction.guild_id)

    def _owner(self, interaction: discord.Interaction, chosen: str | None = None) -> OwnerKey:
        """The memory owner key of the person for that character (bot.characters.cast)."""
        return self.engine.cast.memory_key(person_of(interaction.user.id), self._character(interaction, chosen))

    def _typed_owner(self, interaction: discord.Interaction) -> OwnerKey:
        """For autocomplete: the key of the character typed so far, if it names one."""
        typed = getattr(interaction.namespace, "character", None)
        known = isinstance(typed, str) and self.engine.cast.by_name_or_key(typed) is not None
        return self._owner(interaction, typed if known else None)

    def _may_add(self, interaction: discord.Interaction) -> bool:
        """New memories only from people the bot talks to (blocked users cannot fill the DB)."""
        roles = getattr(interaction.user, "roles", ())
        refusal = user_refusal(
            self.policy, interaction.user.id, is_dm=interaction.guild_id is None, role_ids=[r.id for r in roles]
        )
        return refusal is None

    # --- reading --------------------------------------------------------------------------

    @app_commands.command(name="memories", description="What I remember about you (only you see the answer)")
    @app_commands.rename(kind="type")
    @app_commands.describe(kind="Show only memories of this type", character=CHARACTER_OPTION)
    @app_commands.choices(kind=[app_commands.Choice(name=t, value=t) for t in USER_MEMORY_TYPES])
    async def memories(
        self,
        interaction: discord.Interaction,
        kind: app_commands.Choice[str] | None = None,
        character: str | None = None,
    ) -> None:
        owner = self._owner(interaction, character)
        # Discord sends one of the choices; anything else lists every type.
        wanted = [t for t in USER_MEMORY_TYPES if kind is not None and t == kind.value]
        found = await self.run.memories(owner, wanted)
        pages = memory_pages_with_spans(found, now=self.engine.clock())
        if not found:
            await say(interaction, pages[0][0])
            return
        view = MemoryPages(
            self.engine, owner, [page for page, _ in pages], [[found[i] for i in span] for _, span in pages]
        )
        await interaction.response.send_message(view.page, view=view, ephemeral=True, allowed_mentions=NO_MENTIONS)
        view.origin = interaction

    @app_commands.command(name="history", description="Archived versions of your memories, to bring back with /restore")
    @app_commands.describe(character=CHARACTER_OPTION)
    async def history(self, interaction: discord.Interaction, character: str | None = None) -> None:
        await say(interaction, answer(await self.run.history(self._owner(interaction, character))))

    @app_commands.command(name="why", description="The memories I used for your last message in this channel, and why")
    @app_commands.describe(character=CHARACTER_OPTION)
    async def why(self, interaction: discord.Interaction, character: str | None = None) -> None:
        await say(
            interaction,
            answer(await self.run.why(self._owner(interaction, character), story_of(interaction.channel_id))),
        )

    @app_commands.command(
        name="memory-stats", description="Statistics on your memories: never recalled, degraded turns"
    )
    @app_commands.describe(character=CHARACTER_OPTION)
    async def memory_stats(self, interaction: discord.Interaction, character: str | None = None) -> None:
        await say(interaction, answer(await self.run.stats(self._owner(interaction, character))))

    # --- writing --------------------------------------------------------------------------

    @app_commands.command(name="remember", description="Ask me to remember something about you")
    @app_commands.describe(text="One short sentence about you, as you want it remembered", character=CHARACTER_OPTION)
    async def remember(
        self,
        interaction: discord.Interaction,
        text: app_commands.Range[str, 1, MAX_MEMORY_CHARS],
        character: str | None = None,
    ) -> None:
        await say(interaction, await self._remember(interaction, text, source=None, character=character))

    async def remember_this(self, interaction: discord.Interaction, message: discord.Message) -> None:
        if message.author.id != interaction.user.id:
            await say(interaction, text("remember_not_yours"))
            return
        said = message.clean_content.strip()
        if not said:
            await say(interaction, text("remember_no_text"))
            return
        await say(interaction, await self._remember(interaction, said, source=message.jump_url))

    async def _remember(
        self, interaction: discord.Interaction, said: str, *, source: str | None, character: str | None = None
    ) -> str:
        if not self._may_add(interaction):
            return text("remember_refused")
        return answer(
            await self.run.remember(
                self._owner(interaction, character),
                said,
                story_id=story_of(interaction.channel_id),
                place=place_of(interaction.guild_id),
                source=source,
            )
        )

    @app_commands.command(name="pin", description="Always keep one of your memories in my context")
    @app_commands.rename(memory_id="id")
    @app_commands.describe(
        memory_id="The memory's number (#id); start typing to search yours", character=CHARACTER_OPTION
    )
    async def pin(self, interaction: discord.Interaction, memory_id: int, character: str | None = None) -> None:
        await say(interaction, answer(await self.run.pin(self._owner(interaction, character), memory_id, True)))

    @app_commands.command(name="unpin", description="Stop always keeping a memory in my context")
    @app_commands.rename(memory_id="id")
    @app_commands.describe(
        memory_id="The memory's number (#id); start typing to search yours", character=CHARACTER_OPTION
    )
    async def unpin(self, interaction: discord.Interaction, memory_id: int, character: str | None = None) -> None:
        await say(interaction, answer(await self.run.pin(self._owner(interaction, character), memory_id, False)))

    @app_commands.command(name="forget", description="Forget one of your memories (archived: /restore brings it back)")
    @app_commands.rename(memory_id="id")
    @app_commands.describe(
        memory_id="The memory's number (#id); start typing to search yours", character=CHARACTER_OPTION
    )
    async def forget(self, interaction: discord.Interaction, memory_id: int, character: str | None = None) -> None:
        await say(interaction, answer(await self.run.forget(self._owner(interaction, character), memory_id)))

    @app_commands.command(name="restore", description="Bring back an archived version of one of your memories")
    @app_commands.describe(
        history_id="The archived version's number (h…, see /history); start typing to search",
        character=CHARACTER_OPTION,
    )
    async def restore(self, interaction: discord.Interaction, history_id: int, character: str | None = None) -> None:
        await say(interaction, answer(await self.run.restore(self._owner(interaction, character), history_id)))

    @pin.autocomplete("memory_id")
    @unpin.autocomplete("memory_id")
    @forget.autocomplete("memory_id")
    async def memory_id_autocomplete(
        self, interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[int]]:
        memories = await self.engine.memories.list(self._typed_owner(interaction))
        return [app_commands.Choice(name=name, value=value) for name, value in memory_choices(memories, current)]

    @restore.autocomplete("history_id")
    async def history_id_autocomplete(
        self, interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[int]]:
        entries, _ = await self.engine.memories.history(self._typed_owner(interaction))
        return [app_commands.Choice(name=name, value=value) for name, value in history_choices(entries, current)]

    @memories.autocomplete("character")
    @history.autocomplete("character")
    @why.autocomplete("character")
    @memory_stats.autocomplete("character")
    @remember.autocomplete("character")
    @pin.autocomplete("character")
    @unpin.autocomplete("character")
    @forget.autocomplete("character")
    @restore.autocomplete("character")
    async def character_autocomplete(
        self, interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        wanted = current.casefold()
        return [
            app_commands.Choice(name=c.name, value=c.key)
            for c in self.engine.cast.characters.values()
            if wanted in c.name.casefold() or wanted in c.key.casefold()
        ][:25]

    # --- privacy --------------------------------------------------------------------------

    @app_commands.command(
        name="share", description="Use your memories from DMs and other servers here too (on) or not (off)"
    )
    @app_commands.describe(state="on: memories cross places; off (default): each place keeps its own")
    @app_commands.choices(
        state=[app_commands.Choice(name="on", value="on"), app_commands.Choice(name="off", value="off")]
    )
    async def share(self, interaction: discord.Interaction, state: app_commands.Choice[str] | None = None) -> None:
        on = None if state is None else state.value == "on"
        await say(interaction, answer(await self.run.share(self._owner(interaction), on)))

    @app_commands.command(
        name="followups", description="Let me ask how your dated events went, in a direct message (on) or not (off)"
    )
    @app_commands.describe(
        state="on: I may write first after an event you told me about; off (default): never",
        timezone="Your time zone, such as Europe/Paris: I write first only in your daytime",
    )
    @app_commands.choices(
        state=[app_commands.Choice(name="on", value="on"), app_commands.Choice(name="off", value="off")]
    )
    async def followups(
        self,
        interaction: discord.Interaction,
        state: app_commands.Choice[str] | None = None,
        timezone: str | None = None,
    ) -> None:
        # The person's own id, whichever character's channel: check-ins are theirs.
        on = None if state is None else state.value == "on"
        await say(interaction, answer(await self.run.followups(person_of(interaction.user.id), on, timezone)))

    @app_commands.command(name="export", description="Download everything I store about you, as a JSON file")
    async def export(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        user = person_of(interaction.user.id)
        exported = await self.run.export(user)
        raw = export_json(exported.data).encode("utf-8")
        filename = f"echo-export-{user}.json"
        if len(raw) > EXPORT_MAX_BYTES:
            raw, filename = gzip.compress(raw), filename + ".gz"
        await interaction.followup.send(
            answer(exported), file=discord.File(io.BytesIO(raw), filename=filename), ephemeral=True
        )

    @app_commands.command(
        name="erase-me", description="Delete everything I store about you, for real (asks to confirm)"
    )
    async def erase_me(self, interaction: discord.Interaction) -> None:
        view = EraseConfirm(self.engine, interaction.user.id)
        await interaction.response.send_message(text("erase_confirm"), view=view, ephemeral=True)
        view.origin = interaction


async def setup(bot: EchoBot) -> None:
    await bot.add_cog(MemoryCommands(bot, bot.services.engine))
