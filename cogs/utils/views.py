"""The buttons and modals on the bot's messages: swipe and regenerate on a reply, the memory
receipt, Forget and Edit on a memory, and the edit modal.

Every button is a `discord.ui.DynamicItem` whose custom_id carries the user it belongs to and the
exchange or memory it acts on, so a button still works after a restart (the bot registers these
classes with `add_dynamic_items`; no view has to be kept in memory). Only that user may press it:
anyone else gets an ephemeral refusal, and the engine, whose statements are all scoped by user,
would treat the id as unknown anyway.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands

from bot.engine import MAX_MEMORY_CHARS, Engine, Shown
from bot.engine.memory_commands import MemoryCommands
from bot.errors import LLMError, StorageError
from bot.i18n import DEFAULT_LANGUAGE, language
from bot.i18n import text as tr
from bot.memory.model import Memory
from bot.presenting import (
    RECEIPT_ICON,
    forget_result,
    gone_memory,
    receipt_text,
)
from cogs.utils.answering import DISCORD_LIMIT, split_message
from cogs.utils.voices import character_at

if TYPE_CHECKING:
    from cogs.bot import EchoBot

log = logging.getLogger(__name__)

NOT_YOURS = tr("en", "not_yours")
FAILED = tr("en", "failed")
# Forget and Edit for at most this many memories on one receipt (5 rows of 5 buttons).
RECEIPT_MAX_ACTIONS = 12
_NO_MENTIONS = discord.AllowedMentions.none()


async def say(interaction: discord.Interaction, text: str, *, view: discord.ui.View | None = None) -> None:
    """An ephemeral answer; beyond 2,000 characters, the rest follows in ephemeral followups
    (a view goes with the first part)."""
    for n, chunk in enumerate(split_message(text) or ["…"]):
        extra: dict[str, Any] = {"view": view} if (n == 0 and view is not None) else {}
        if n == 0 and not interaction.response.is_done():
            await interaction.response.send_message(chunk, ephemeral=True, allowed_mentions=_NO_MENTIONS, **extra)
        else:
            await interaction.followup.send(chunk, ephemeral=True, allowed_mentions=_NO_MENTIONS, **extra)


class UnknownCharacter(app_commands.AppCommandError):
    """A command's `character` option names no character of this bot."""

    def __init__(self, name: str, names: str) -> None:
        super().__init__(f"no character {name!r}")
        self.name = name
        self.names = names


async def report_failure(interaction: discord.Interaction, what: str, error: BaseException) -> None:
    """Log a failed command or button, and tell the person who used it (only them), in their language."""
    original = getattr(error, "original", error)
    lang = language(interaction.locale)
    if isinstance(original, StorageError):
        # Logged once by the database; a traceback per command would bury that line.
        text = tr(lang, "storage_failed")
    elif isinstance(original, UnknownCharacter):
        text = tr(lang, "unknown_character", name=original.name, names=original.names)
    else:
        log.error("%s failed", what, exc_info=error)
        text = tr(lang, "failed")
    try:
        await say(interaction, text)
    except discord.HTTPException as exc:
        log.debug("could not report the failure of %s: %s", what, exc)


def _engine(interaction: discord.Interaction) -> Engine:
    client: EchoBot = interaction.client  # type: ignore[assignment]
    return client.services.engine


# The owner part of a custom id: the memory owner key the button acts on, a Discord id or
# `<id>@<character key>` for a character with its own memory (bot.characters.cast).
_OWNER = r"(?P<user>[0-9]+(?:@[^:]+)?)"


def _person(owner: str) -> int:
    """The Discord id of the person an owner key belongs to."""
    return int(owner.partition("@")[0])


# DynamicItem wants a template on every subclass; this base is never registered, its own matches
# no custom id we make.
class _OwnedButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"echo:base:(?!)"):
    """A button only the person of `owner` may press; its failures are told to the presser and logged."""

    owner: str
    # The catalogue key of what anyone else pressing it is told, in their language.
    refusal = "not_yours"

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        if interaction.user.id == _person(self.owner):
            return True
        await interaction.response.send_message(tr(language(interaction.locale), self.refusal), ephemeral=True)
        return False

    async def callback(self, interaction: discord.Interaction) -> None:
        try:
            await self.pressed(interaction, _engine(interaction))
        except Exception as exc:
            await report_failure(interaction, f"the {type(self).__name__}", exc)

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        raise NotImplementedError


# --- regenerate and swipe ----------------------------------------------------------------------

_SWIPE_LABELS = {"prev": "◀", "next": "▶", "regen": "🔄"}


class SwipeButton(
    _OwnedButton, template=r"echo:swipe:(?P<action>prev|next|regen):" + _OWNER + r":(?P<exchange>[0-9]+)"
):
    refusal = "not_your_reply"

    def __init__(self, action: str, owner: int | str, exchange_id: int, *, disabled: bool = False) -> None:
        super().__init__(
            discord.ui.Button(
                label=_SWIPE_LABELS[action],
                style=discord.ButtonStyle.secondary,
                custom_id=f"echo:swipe:{action}:{owner}:{exchange_id}",
                disabled=disabled,
            )
        )
        self.action, self.owner, self.exchange_id = action, str(owner), exchange_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: Any, /
    ) -> SwipeButton:
        return cls(match["action"], match["user"], int(match["exchange"]))

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        user = self.owner
        if self.action != "regen":
            shown = await engine.swipe(user, self.exchange_id, -1 if self.action == "prev" else 1)
            if shown is None:
                await _settled(interaction)
                return
            await interaction.response.edit_message(
                content=shown.text, view=swipe_view(self.owner, shown), allowed_mentions=_NO_MENTIONS
            )
            return
        if await engine.shown(user, self.exchange_id) is None:
            await _settled(interaction)
            return
        # The model may take longer than the 3 s an interaction allows for its first answer.
        await interaction.response.defer()
        try:
            shown = await engine.regenerate(user, self.exchange_id, max_chars=DISCORD_LIMIT)
        except LLMError as exc:
            log.info("a regenerate failed: %s", exc)
            await interaction.followup.send(tr(language(interaction.locale), "regenerate_failed"), ephemeral=True)
            return
        if shown is None:
            await _settled(interaction)
            return
        if interaction.message is not None:
            await interaction.message.edit(
                content=shown.text, view=swipe_view(self.owner, shown), allowed_mentions=_NO_MENTIONS
            )


async def _settled(interaction: discord.Interaction) -> None:
    """The buttons of a settled answer go; the presser is told why."""
    if not interaction.response.is_done():
        await interaction.response.edit_message(view=None)
    elif interaction.message is not None:
        await interaction.message.edit(view=None)
    await interaction.followup.send(tr(language(interaction.locale), "settled_already"), ephemeral=True)


def swipe_view(owner_id: int | str, shown: Shown) -> discord.ui.View:
    """◀ n/N ▶ 🔄 under a reply that is still open (`owner_id`: the exchange's memory owner key)."""
    view = discord.ui.View(timeout=None)
    view.add_item(SwipeButton("prev", owner_id, shown.exchange_id, disabled=shown.n <= 1))
    view.add_item(
        discord.ui.Button(
            label=f"{shown.n}/{shown.total}",
            style=discord.ButtonStyle.secondary,
            custom_id=f"echo:count:{shown.exchange_id}",
            disabled=True,
        )
    )
    view.add_item(SwipeButton("next", owner_id, shown.exchange_id, disabled=shown.n >= shown.total))
    view.add_item(SwipeButton("regen", owner_id, shown.exchange_id))
    return view


# --- the memory receipt ------------------------------------------------------------------------


class ReceiptButton(_OwnedButton, template=r"echo:receipt:" + _OWNER + r":(?P<exchange>[0-9]+)"):
    refusal = "not_your_reply"

    def __init__(self, owner: int | str, exchange_id: int, changes: int = 0) -> None:
        super().__init__(
            discord.ui.Button(
                label=f"{RECEIPT_ICON} {changes}" if changes else RECEIPT_ICON,
                style=discord.ButtonStyle.secondary,
                custom_id=f"echo:receipt:{owner}:{exchange_id}",
            )
        )
        self.owner, self.exchange_id = str(owner), exchange_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: Any, /
    ) -> ReceiptButton:
        return cls(match["user"], int(match["exchange"]))

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        lines = await engine.receipt(self.owner, self.exchange_id)
        live = [line.current for line in lines if line.current is not None]
        lang = language(interaction.locale)
        await say(interaction, receipt_text(lines, lang=lang), view=memory_actions(self.owner, live, lang) if live else None)


def receipt_view(owner_id: int | str, exchange_id: int, changes: int) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(ReceiptButton(owner_id, exchange_id, changes))
    return view


def memory_actions(owner_id: int | str, memories: list[Memory], lang: str = DEFAULT_LANGUAGE) -> discord.ui.View:
    """Forget and Edit for each memory (the first RECEIPT_MAX_ACTIONS of them), labelled in `lang`."""
    view = discord.ui.View(timeout=None)
    for memory in memories[:RECEIPT_MAX_ACTIONS]:
        view.add_item(ForgetButton(owner_id, memory.id, lang))
        view.add_item(EditButton(owner_id, memory.id, lang))
    return view


class _MemoryButton(_OwnedButton, template=r"echo:memory-base:(?!)"):
    """A button acting on one memory of its owner: custom_id `echo:<action>:<owner>:<memory>`."""

    action: str
    label: str  # its catalogue key
    style: discord.ButtonStyle

    def __init__(self, owner_id: int | str, memory_id: int, lang: str = DEFAULT_LANGUAGE) -> None:
        super().__init__(
            discord.ui.Button(
                label=tr(lang, self.label, id=memory_id),
                style=self.style,
                custom_id=f"echo:{self.action}:{owner_id}:{memory_id}",
            )
        )
        self.owner, self.memory_id = str(owner_id), memory_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: Any, /
    ) -> _MemoryButton:
        return cls(match["user"], int(match["memory"]))


class ForgetButton(_MemoryButton, template=r"echo:forget:" + _OWNER + r":(?P<memory>[0-9]+)"):
    action, label, style = "forget", "forget_button", discord.ButtonStyle.danger

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        done = await engine.forget(self.owner, self.memory_id)
        lang = language(interaction.locale)
        await say(interaction, forget_result(self.memory_id, True, lang=lang) if done else gone_memory(self.memory_id, lang=lang))


class EditButton(_MemoryButton, template=r"echo:edit:" + _OWNER + r":(?P<memory>[0-9]+)"):
    action, label, style = "edit", "edit_button", discord.ButtonStyle.primary

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        await open_editor(interaction, engine, self.memory_id, self.owner)


async def open_editor(
    interaction: discord.Interaction, engine: Engine, memory_id: int, owner: str | None = None
) -> None:
    """The edit modal for one of the presser's memories (under `owner`, the memory owner key;
    by default the presser's for this channel's character), or why there is none."""
    if owner is None:
        character = character_at(engine.cast, interaction.channel, interaction.guild_id)
        owner = engine.cast.memory_key(str(interaction.user.id), character)
    memory = await engine.memory(owner, memory_id)
    lang = language(interaction.locale)
    if memory is None:
        await say(interaction, gone_memory(memory_id, lang=lang))
        return
    await interaction.response.send_modal(EditMemoryModal(engine, memory, owner, lang))


class EditMemoryModal(discord.ui.Modal):
    """The memory's text, to rewrite; the previous version is archived (restorable)."""

    def __init__(self, engine: Engine, memory: Memory, owner: str, lang: str = DEFAULT_LANGUAGE) -> None:
        super().__init__(title=tr(lang, "edit_title", id=memory.id), custom_id=f"echo:edit-memory:{memory.id}", timeout=900)
        self.engine = engine
        self.owner = owner
        self.lang = lang
        self.memory_id = memory.id
        self.text: discord.ui.TextInput[EditMemoryModal] = discord.ui.TextInput(
            label=tr(lang, "edit_label"),
            style=discord.TextStyle.paragraph,
            default=memory.text,
            max_length=MAX_MEMORY_CHARS,
            custom_id="text",
        )
        self.add_item(self.text)

    async def on_submit(self, interaction: discord.Interaction, /) -> None:
        await say(interaction, await MemoryCommands(self.engine).edit(self.owner, self.memory_id, self.text.value, lang=self.lang))

    async def on_error(self, interaction: discord.Interaction, error: Exception, /) -> None:
        await report_failure(interaction, "the memory edit", error)


DYNAMIC_ITEMS = (SwipeButton, ReceiptButton, ForgetButton, EditButton)
