"""The one owner check of every component and modal (`cogs.utils.views.owner_in`), as a property:
over any text taken as a custom id, and over the ids every registered class really makes, an id
lets a person through only when the owner key in it is their own, for a character of the cast.
The refusal itself, through the real bot, is tested in tests/discord_e2e/test_owner_checks.py."""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime

import discord
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cogs.conversation
import cogs.memory
import cogs.message_events
from bot.characters.cast import Cast, load_cast
from bot.memory.model import Memory
from cogs.memory import EraseConfirm, MemoryPages, PageView
from cogs.utils import views
from cogs.utils.views import (
    CUSTOM_ID_MAX,
    EditButton,
    EditMemoryModal,
    ForgetButton,
    OwnerGate,
    ReceiptButton,
    SwipeButton,
    owner_in,
)
from tests.lanes import examples

PEOPLE = st.integers(min_value=0, max_value=2**64 - 1)


@pytest.fixture(scope="module")
def cast(tmp_path_factory: pytest.TempPathFactory) -> Cast:
    """Nora, the default, and Lina with her own memory: a person's keys are `<id>` and `<id>@lina`."""
    folder = tmp_path_factory.mktemp("cast")
    (folder / "lina.yaml").write_text("name: Lina\npersona: A sailor.\n", encoding="utf-8")
    (folder / "nora.yaml").write_text("name: Nora\npersona: A neighbour.\nmemory: shared\n", encoding="utf-8")
    (folder / "channels.yaml").write_text("default: nora\n", encoding="utf-8")
    return load_cast(folder, None)


def keys_of(cast: Cast, person: int) -> list[str]:
    """Every memory owner key of `person` in `cast`."""
    return sorted({cast.memory_key(str(person), c) for c in cast.characters.values()})


async def _custom_ids(owner: str) -> dict[type, list[str]]:
    """The custom ids each registered class makes for `owner`, built by the classes themselves
    (a view needs a running loop)."""
    memory = Memory(7, owner, "a memory", "fact", "global", False, 1.0, datetime.now(UTC), datetime.now(UTC))
    pages = MemoryPages(None, owner, ["page"], [[memory]])  # type: ignore[arg-type]
    erase = EraseConfirm(None, int(owner.partition("@")[0]))  # type: ignore[arg-type]
    made: dict[type, list[str]] = {
        SwipeButton: [SwipeButton(action, owner, 12).custom_id for action in ("prev", "next", "regen")],
        ReceiptButton: [ReceiptButton(owner, 12).custom_id],
        ForgetButton: [ForgetButton(owner, 7).custom_id],
        EditButton: [EditButton(owner, 7).custom_id],
        EditMemoryModal: [EditMemoryModal(memory, owner).custom_id],
        PageView: [i.custom_id for i in pages.children],
        EraseConfirm: [i.custom_id for i in erase.children],
    }
    return made


def custom_ids(owner: str) -> dict[type, list[str]]:
    return asyncio.run(_custom_ids(owner))


def test_every_component_and_modal_class_of_the_cogs_goes_through_the_gate(cast: Cast) -> None:
    """A new view, modal or dynamic item without the owner check fails here."""
    interactive = (discord.ui.View, discord.ui.Modal, discord.ui.DynamicItem)
    found = [
        cls
        for module in (cogs.conversation, cogs.memory, cogs.message_events, views)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__ and issubclass(cls, interactive)
    ]
    assert found and all(issubclass(cls, OwnerGate) for cls in found), found
    # By name: loading an extension again (as the bot's tests do) makes its classes anew.
    assert {c.__qualname__ for c in custom_ids(keys_of(cast, 1)[0])} == {
        c.__qualname__ for c in OwnerGate.registry.values()
    }


@settings(max_examples=examples(300), deadline=None)
@given(
    custom_id=st.text(max_size=120) | st.from_regex(r"echo:[a-z-]{1,12}:[0-9@a-z:]{0,40}", fullmatch=True),
    person=PEOPLE,
)
def test_any_text_lets_a_person_through_only_under_a_key_of_their_own(cast: Cast, custom_id: str, person: int) -> None:
    owner = owner_in(custom_id, person, cast)
    assert owner is None or (owner in keys_of(cast, person) and owner in custom_id and len(custom_id) <= CUSTOM_ID_MAX)


@pytest.fixture(scope="module")
def made(cast: Cast) -> dict[str, dict[type, list[str]]]:
    """Ids made for Alice's and Bob's keys, and for keys of theirs that are no key of this cast."""
    return {
        key: custom_ids(key)
        for person in (111, 222)
        for key in [*keys_of(cast, person), f"{person}@nora", f"{person}@ghost"]
    }


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data(), presser=PEOPLE)
def test_the_ids_every_class_makes_open_only_to_their_owner(
    cast: Cast, made: dict[str, dict[type, list[str]]], data: st.DataObject, presser: int
) -> None:
    owner = data.draw(st.sampled_from(sorted(made)))
    cls = data.draw(st.sampled_from(sorted(made[owner], key=lambda c: c.__name__)))
    custom_id = data.draw(st.sampled_from(made[owner][cls]))
    person = int(owner.partition("@")[0])
    key = str(person) if cls is EraseConfirm else owner  # an erase is the person's, every key of theirs
    mine = key if key in keys_of(cast, person) else None  # "@nora" shares the default's key; no "ghost"
    assert owner_in(custom_id, person, cast) == mine
    if presser != person:
        assert owner_in(custom_id, presser, cast) is None
    # Nothing added before or after it names another owner.
    extra = data.draw(st.text(min_size=1, max_size=5))
    assert owner_in(custom_id + extra, person, cast) in (None, mine)
    assert owner_in(extra + custom_id, person, cast) is None
