"""The buttons and modals on the bot's messages: swipe and regenerate on a reply, the memory
receipt, Forget and Edit on a memory, the edit modal, and the views of the memory commands.

Every component and modal the bot makes carries, in its custom id, the memory owner key it acts
on, and is checked in one place before any callback: `OwnerGate`, first among the bases of each of
them, registers the custom ids its subclass makes (a pattern with a `user` group) and lets an
interaction through only when its own custom id (read from the interaction, never from state kept
by the bot) is one of them and names the person interacting. Every other component or modal
interaction, a forged or malformed id included, reaches no callback and is refused privately
(`refuse_foreign`); the callbacks act on that checked key; an id in it past a row's range is no row.

Buttons are `discord.ui.DynamicItem`s, so they still work after a restart (`add_dynamic_items`; no
view is kept in memory), and so does the edit form: `submit_edit` reads its custom id.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, ClassVar

import discord
from discord import app_commands

from bot.characters.cast import Cast
from bot.clients.values import row_id
from bot.engine import MAX_MEMORY_CHARS, Engine, Shown
from bot.engine.memory_commands import MemoryCommands
from bot.errors import LLMError, StorageError
from bot.i18n import set_locale, text
from bot.memory.model import Memory, OwnerKey
from bot.presenting import RECEIPT_ICON, answer, gone_memory, receipt_text
from cogs.utils.answering import DISCORD_LIMIT, person_of, split_message
from cogs.utils.voices import character_at

if TYPE_CHECKING:
    from cogs.bot import EchoBot

log = logging.getLogger(__name__)

# Forget and Edit for at most this many memories on one receipt (5 rows of 5 buttons).
RECEIPT_MAX_ACTIONS = 12
EDIT_FIELD = "text"  # the custom id of the edit form's one field
_NO_MENTIONS = discord.AllowedMentions.none()


async def say(interaction: discord.Interaction, shown: str, *, view: discord.ui.View | None = None) -> None:
    """An ephemeral answer; beyond 2,000 characters, the rest follows in ephemeral followups
    (a view goes with the first part)."""
    for n, chunk in enumerate(split_message(shown) or ["…"]):
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
    set_locale(interaction.locale)
    if isinstance(original, StorageError):
        # Logged once by the database; a traceback per command would bury that line.
        told = text("storage_failed")
    elif isinstance(original, UnknownCharacter):
        told = text("unknown_character", name=original.name, names=original.names)
    else:
        log.error("%s failed", what, exc_info=error)
        told = text("failed")
    try:
        await say(interaction, told)
    except discord.HTTPException as exc:
        log.debug("could not report the failure of %s: %s", what, exc)


def _engine(interaction: discord.Interaction) -> Engine:
    client: EchoBot = interaction.client  # type: ignore[assignment]
    return client.services.engine


# The owner part of a custom id: the memory owner key the component acts on, a Discord id or
# `<id>@<character key>` for a character with its own memory (bot.characters.cast).
OWNER = r"(?P<user>[0-9]{1,20}(?:@[^:]{1,64})?)"
# Discord's bound on a custom id: a longer one is not one the bot made.
CUSTOM_ID_MAX = 100
# An id past the rows' range (bot.clients.values.row_id) is no row: answered "not there".
NO_ROW = 0


class OwnerGate:
    """First base of every component and modal the bot makes (`custom_ids=` names the custom ids
    the subclass makes; `refusal_key` the catalogue text another person is told). Its
    `interaction_check` is the one owner check: `owner_key`."""

    registry: ClassVar[dict[re.Pattern[str], type[OwnerGate]]] = {}
    refusal_key: ClassVar[str] = "not_yours"

    def __init_subclass__(cls, *, custom_ids: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A dynamic item names its custom ids in discord.py's `template=`.
        pattern = (
            re.compile(custom_ids) if custom_ids is not None else getattr(cls, "__discord_ui_compiled_template__", None)
        )
        if pattern is not None and "user" in pattern.groupindex:
            OwnerGate.registry[pattern] = cls

    @classmethod
    def refusal(cls) -> str:
        return text(cls.refusal_key)

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        # The one gate of every component and form: what follows in this interaction speaks the
        # presser's language.
        set_locale(interaction.locale)
        return owner_key(interaction) is not None


def _registered(custom_id: object) -> tuple[type[OwnerGate], re.Match[str]] | None:
    """The class that makes `custom_id`, and its match (the owner key is its `user`)."""
    if not isinstance(custom_id, str) or len(custom_id) > CUSTOM_ID_MAX:
        return None
    for pattern, cls in OwnerGate.registry.items():
        match = pattern.fullmatch(custom_id)
        if match is not None:
            return cls, match
    return None


def owner_in(custom_id: object, person: int, cast: Cast) -> OwnerKey | None:
    """The memory owner key in `custom_id`, when it is an id the bot makes and that key is one of
    `person`'s own in this cast (theirs for the default character or for one with its own
    memory); None otherwise."""
    found = _registered(custom_id)
    if found is None:
        return None
    owner = OwnerKey(found[1]["user"])
    return owner if cast.memory_key(person_of(person), cast.character_of_key(owner)) == owner else None


def _data(interaction: discord.Interaction) -> dict[str, Any]:
    """What Discord sent with a component or a form, as untyped JSON: every field is checked."""
    return dict(interaction.data or {})


def owner_key(interaction: discord.Interaction) -> OwnerKey | None:
    """The memory owner key a component or modal interaction acts on, when it is the
    interacting person's own (`owner_in`); None otherwise."""
    return owner_in(_data(interaction).get("custom_id"), interaction.user.id, _engine(interaction).cast)


def _on_its_message(interaction: discord.Interaction, custom_id: object) -> bool:
    """Whether a pressed component is one of the message it was pressed on (Discord sends no other;
    discord.py dispatches no other)."""
    if interaction.type is not discord.InteractionType.component:
        return True
    rows = interaction.message.components if interaction.message is not None else []
    return any(
        getattr(item, "custom_id", None) == custom_id for row in rows for item in getattr(row, "children", [row])
    )


async def refuse_foreign(interaction: discord.Interaction) -> None:
    """Tell the person privately when a component or modal they used is not theirs, or not one the
    bot made, or a component that is not on its message (the gates of `OwnerGate` and discord.py's
    dispatch let nothing of it through)."""
    if interaction.type not in (discord.InteractionType.component, discord.InteractionType.modal_submit):
        return
    custom_id = _data(interaction).get("custom_id")
    if owner_key(interaction) is not None and _on_its_message(interaction, custom_id):
        return
    found = _registered(custom_id)
    log.debug(
        "refused a %s interaction of user %s, custom id %.100r", interaction.type.name, interaction.user.id, custom_id
    )
    set_locale(interaction.locale)
    try:
        await say(interaction, found[0].refusal() if found is not None else text("not_yours"))
    except discord.HTTPException as exc:
        log.debug("could not refuse an interaction: %s", exc)


# DynamicItem wants a template on every subclass; this base is never registered, its own matches
# no custom id we make.
class _OwnedButton(OwnerGate, discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"echo:base:(?!)"):
    """A button acting on what `owner` (its custom id's owner key) remembers; its failures are
    told to the presser and logged."""

    owner: OwnerKey

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
    _OwnedButton, template=r"echo:swipe:(?P<action>prev|next|regen):" + OWNER + r":(?P<exchange>[0-9]{1,20})"
):
    refusal_key = "not_your_reply"

    def __init__(self, action: str, owner: int | str, exchange_id: int, *, disabled: bool = False) -> None:
        super().__init__(
            discord.ui.Button(
                label=_SWIPE_LABELS[action],
                style=discord.ButtonStyle.secondary,
                custom_id=f"echo:swipe:{action}:{owner}:{exchange_id}",
                disabled=disabled,
            )
        )
        self.action, self.owner, self.exchange_id = action, OwnerKey(str(owner)), exchange_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: Any, /
    ) -> SwipeButton:
        return cls(match["action"], match["user"], row_id(match["exchange"]) or NO_ROW)

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        user = self.owner
        if self.action != "regen":
            shown = await engine.conversation.swipe(user, self.exchange_id, -1 if self.action == "prev" else 1)
            if shown is None:
                await _settled(interaction)
                return
            await interaction.response.edit_message(
                content=shown.text, view=swipe_view(self.owner, shown), allowed_mentions=_NO_MENTIONS
            )
            return
        if await engine.conversation.shown(user, self.exchange_id) is None:
            await _settled(interaction)
            return
        # The model may take longer than the 3 s an interaction allows for its first answer.
        await interaction.response.defer()
        try:
            shown = await engine.conversation.regenerate(user, self.exchange_id, max_chars=DISCORD_LIMIT)
        except LLMError as exc:
            log.info("a regenerate failed: %s", exc)
            await interaction.followup.send(text("regenerate_failed"), ephemeral=True)
            return
        if shown is None:
            await _settled(interaction)
            return
        # Through the interaction, which edits the message its button is on: a character's reply
        # is its webhook's message, which the bot may not edit as its own.
        await interaction.edit_original_response(
            content=shown.text, view=swipe_view(self.owner, shown), allowed_mentions=_NO_MENTIONS
        )


async def _settled(interaction: discord.Interaction) -> None:
    """The buttons of a settled answer go; the presser is told why."""
    if not interaction.response.is_done():
        await interaction.response.edit_message(view=None)
    else:
        await interaction.edit_original_response(view=None)
    await interaction.followup.send(text("settled_already"), ephemeral=True)


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


class ReceiptButton(_OwnedButton, template=r"echo:receipt:" + OWNER + r":(?P<exchange>[0-9]{1,20})"):
    refusal_key = "not_your_reply"

    def __init__(self, owner: int | str, exchange_id: int, changes: int = 0) -> None:
        super().__init__(
            discord.ui.Button(
                label=f"{RECEIPT_ICON} {changes}" if changes else RECEIPT_ICON,
                style=discord.ButtonStyle.secondary,
                custom_id=f"echo:receipt:{owner}:{exchange_id}",
            )
        )
        self.owner, self.exchange_id = OwnerKey(str(owner)), exchange_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: Any, /
    ) -> ReceiptButton:
        return cls(match["user"], row_id(match["exchange"]) or NO_ROW)

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        lines = await engine.conversation.receipt(self.owner, self.exchange_id)
        live = [line.current for line in lines if line.current is not None]
        await say(interaction, receipt_text(lines), view=memory_actions(self.owner, live) if live else None)


def receipt_view(owner_id: int | str, exchange_id: int, changes: int) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(ReceiptButton(owner_id, exchange_id, changes))
    return view


def memory_actions(owner_id: int | str, memories: list[Memory]) -> discord.ui.View:
    """Forget and Edit for each memory (the first RECEIPT_MAX_ACTIONS of them)."""
    view = discord.ui.View(timeout=None)
    for memory in memories[:RECEIPT_MAX_ACTIONS]:
        view.add_item(ForgetButton(owner_id, memory.id))
        view.add_item(EditButton(owner_id, memory.id))
    return view


class _MemoryButton(_OwnedButton, template=r"echo:memory-base:(?!)"):
    """A button acting on one memory of its owner: custom_id `echo:<action>:<owner>:<memory>`."""

    action: str
    label: str  # its catalogue key
    style: discord.ButtonStyle

    def __init__(self, owner_id: int | str, memory_id: int) -> None:
        super().__init__(
            discord.ui.Button(
                label=text(self.label, id=memory_id),
                style=self.style,
                custom_id=f"echo:{self.action}:{owner_id}:{memory_id}",
            )
        )
        self.owner, self.memory_id = OwnerKey(str(owner_id)), memory_id

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Button[Any], match: Any, /
    ) -> _MemoryButton:
        return cls(match["user"], row_id(match["memory"]) or NO_ROW)


class ForgetButton(_MemoryButton, template=r"echo:forget:" + OWNER + r":(?P<memory>[0-9]{1,20})"):
    action, label, style = "forget", "forget_button", discord.ButtonStyle.danger

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        forgotten = await MemoryCommands(engine).forget(self.owner, self.memory_id)
        await say(interaction, answer(forgotten) if forgotten.done else gone_memory(self.memory_id))


class EditButton(_MemoryButton, template=r"echo:edit:" + OWNER + r":(?P<memory>[0-9]{1,20})"):
    action, label, style = "edit", "edit_button", discord.ButtonStyle.primary

    async def pressed(self, interaction: discord.Interaction, engine: Engine) -> None:
        await open_editor(interaction, engine, self.memory_id, self.owner)


async def open_editor(
    interaction: discord.Interaction, engine: Engine, memory_id: int, owner: OwnerKey | None = None
) -> None:
    """The edit modal for one of the presser's memories (under `owner`, the memory owner key;
    by default the presser's for this channel's character), or why there is none."""
    if owner is None:
        character = character_at(engine.cast, interaction.channel, interaction.guild_id)
        owner = engine.cast.memory_key(person_of(interaction.user.id), character)
    memory = await engine.memories.get(owner, memory_id)
    if memory is None:
        await say(interaction, gone_memory(memory_id))
        return
    modal = EditMemoryModal(memory, owner)
    # Not kept by discord.py: its submission is read from its custom id (`submit_edit`), so a
    # form open across a restart is not lost.
    modal.stop()
    await interaction.response.send_modal(modal)


class EditMemoryModal(
    OwnerGate, discord.ui.Modal, custom_ids=r"echo:edit-memory:" + OWNER + r":(?P<memory>[0-9]{1,20})"
):
    """The memory's text, to rewrite; the previous version is archived (restorable)."""

    def __init__(self, memory: Memory, owner: OwnerKey) -> None:
        super().__init__(title=text("edit_title", id=memory.id), custom_id=f"echo:edit-memory:{owner}:{memory.id}")
        self.add_item(
            discord.ui.TextInput(
                label=text("edit_label"),
                style=discord.TextStyle.paragraph,
                default=memory.text,
                max_length=MAX_MEMORY_CHARS,
                custom_id=EDIT_FIELD,
            )
        )


def _field(components: object, custom_id: str) -> str | None:
    """The value of a form's field, wherever Discord nests it (action rows, labels)."""
    for component in components if isinstance(components, list) else []:
        if not isinstance(component, dict):
            continue
        value = component.get("value")
        if component.get("custom_id") == custom_id and isinstance(value, str):
            return value
        nested = component.get("components") or ([component["component"]] if "component" in component else [])
        found = _field(nested, custom_id)
        if found is not None:
            return found
    return None


async def submit_edit(interaction: discord.Interaction) -> None:
    """An edit form's submission, from its custom id and its field (nothing of the form is kept),
    when it is the submitter's own (`owner_key`)."""
    if interaction.type is not discord.InteractionType.modal_submit:
        return
    set_locale(interaction.locale)
    data = _data(interaction)
    found = _registered(data.get("custom_id"))
    owner = owner_key(interaction)
    written = _field(data.get("components"), EDIT_FIELD)
    if found is None or found[0] is not EditMemoryModal or owner is None:
        return
    try:
        # A form without its field (forged) is an empty text: refused as such, nothing written.
        edited = await MemoryCommands(_engine(interaction)).edit(
            owner, row_id(found[1]["memory"]) or NO_ROW, written or ""
        )
        await say(interaction, answer(edited))
    except Exception as exc:
        await report_failure(interaction, "the memory edit", exc)


DYNAMIC_ITEMS = (SwipeButton, ReceiptButton, ForgetButton, EditButton)
