"""The characters a deployment plays, and which one speaks where.

With CHARACTERS_DIR unset, the cast is the one character of CHARACTER_FILE, as it always was.
With it set, every .yaml/.yml/.json file of the folder is a character whose key is the file's
name without its extension, and `channels.yaml` in the same folder says who speaks where:

    default: echo              # everywhere nothing below names (and in DMs)
    servers:    {123456789012345678: echo}
    categories: {234567890123456789: lina}
    channels:   {345678901234567890: marc}

A thread takes its channel's character, a channel its category's, then its server's.

Memory owners. Every stored row is keyed by a `user_id` string; the cast decides that string,
so the stores and every `WHERE user_id = ?` isolate characters without knowing of them:
- the default character, and a character declaring `memory: shared`, use the Discord user id
  itself: they share one memory of each person;
- any other character uses `<user id>@<character key>`: its own memory of each person.
`/erase-me` and `/export` cover every key of a user (`bot.memory.stores.memories.owner_keys`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.characters.character import SUFFIXES, Character, load_character
from bot.characters.world_info import is_world_info
from bot.clients.outside_files import CHANNELS_FILE, LORE_FILE, read_document
from bot.errors import CharacterError, LoreError
from bot.memory.model import OwnerKey, PersonId

log = logging.getLogger(__name__)

MAPPING_FILE = "channels.yaml"
CHARACTER_SUFFIXES = SUFFIXES
KEY_SEPARATOR = "@"
_MAPPING_KEYS = ("default", "servers", "categories", "channels")


@dataclass(slots=True)
class Cast:
    characters: dict[str, Character]
    default_key: str
    servers: dict[int, str] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)
    channels: dict[int, str] = field(default_factory=dict)
    # True when read from a folder: characters then speak through webhooks in servers.
    from_folder: bool = False

    @classmethod
    def single(cls, character: Character) -> Cast:
        return cls({character.key: character}, character.key)

    @property
    def default(self) -> Character:
        return self.characters[self.default_key]

    def get(self, key: str | None) -> Character:
        """The character of that key; the default for None, "" or an unknown key."""
        return self.characters.get(key or "", self.default)

    def for_place(
        self,
        *,
        channel_id: int | None = None,
        parent_id: int | None = None,
        category_id: int | None = None,
        guild_id: int | None = None,
    ) -> Character:
        for table, place in (
            (self.channels, channel_id),
            (self.channels, parent_id),
            (self.categories, category_id),
            (self.servers, guild_id),
        ):
            if place is not None and place in table:
                return self.characters[table[place]]
        return self.default

    def memory_key(self, user_id: PersonId, character: Character) -> OwnerKey:
        """The owner key of what `character` remembers of `user_id` (see the module's doc)."""
        if character.key == self.default_key or character.shares_memory:
            return OwnerKey(user_id)
        return OwnerKey(f"{user_id}{KEY_SEPARATOR}{character.key}")

    def character_of_key(self, memory_key: OwnerKey) -> Character:
        """The character whose memory `memory_key` is (the default for a shared one)."""
        _, separator, key = memory_key.rpartition(KEY_SEPARATOR)
        found = self.characters.get(key) if separator else None
        return found if found is not None and not found.shares_memory else self.default

    def user_of_key(self, memory_key: OwnerKey) -> PersonId:
        """The person whose memories the key holds (a character's own key is its own person)."""
        user, separator, key = memory_key.rpartition(KEY_SEPARATOR)
        return PersonId(user if separator and key in self.characters else memory_key)

    def by_name_or_key(self, text: str) -> Character | None:
        wanted = text.strip().casefold()
        for character in self.characters.values():
            if wanted in (character.key.casefold(), character.name.casefold()):
                return character
        return None


def load_cast(characters_dir: Path | None, character_file: Path | None) -> Cast:
    """The folder's cast, or the single character of `character_file`."""
    if characters_dir is None:
        return Cast.single(load_character(character_file))
    folder = Path(characters_dir)
    if not folder.is_dir():
        raise CharacterError(f"{folder}: CHARACTERS_DIR is not a folder.")
    characters: dict[str, Character] = {}
    for file in sorted(folder.iterdir()):
        if file.suffix.lower() not in CHARACTER_SUFFIXES or file.name == MAPPING_FILE:
            continue
        if file.stem in characters:
            raise CharacterError(f"{file}: two files give the character key {file.stem!r}; rename one.")
        if KEY_SEPARATOR in file.stem:
            raise CharacterError(f"{file}: a character's file name cannot hold {KEY_SEPARATOR!r}.")
        if _is_lore_file(file):
            continue
        character = load_character(file)
        character.key = file.stem
        characters[file.stem] = character
    if not characters:
        raise CharacterError(f"{folder}: no character file (.yaml, .yml, .json or a .png card) in CHARACTERS_DIR.")
    names = [c.name for c in characters.values()]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        # The name is how a webhook message is traced back to its character.
        raise CharacterError(f"{folder}: two characters are named {duplicate!r}; each needs its own name.")
    mapping = _read_mapping(folder / MAPPING_FILE, characters)
    default = mapping.get("default") or next(iter(characters))
    cast = Cast(
        characters,
        default,
        servers=mapping.get("servers", {}),
        categories=mapping.get("categories", {}),
        channels=mapping.get("channels", {}),
        from_folder=True,
    )
    log.info(
        "%d characters (%s), default %s; %d channel(s), %d categor(y/ies), %d server(s) mapped",
        len(characters),
        ", ".join(characters),
        default,
        len(cast.channels),
        len(cast.categories),
        len(cast.servers),
    )
    return cast


def _is_lore_file(file: Path) -> bool:
    """A lore file kept beside the characters (named by their `lore:` key) is not one."""
    if file.suffix.lower() not in (".yaml", ".yml", ".json"):
        return False
    try:
        # Read as a lore file is (a SillyTavern World Info .json is lore as well): a FIFO, a
        # device or what its aliases expand to is refused here as there.
        document = read_document(file, LORE_FILE)
    except LoreError:
        return False  # load_character reports it
    if isinstance(document, Mapping) and is_world_info(document):
        return True
    return isinstance(document, list) or (
        isinstance(document, Mapping) and "entries" in document and "name" not in document
    )


def _read_mapping(file: Path, characters: Mapping[str, Character]) -> dict[str, Any]:
    if not file.exists() and not file.is_symlink():
        return {}
    document = read_document(file, CHANNELS_FILE) or {}
    if not isinstance(document, Mapping):
        raise CharacterError(f"{file}: expected a mapping of {', '.join(_MAPPING_KEYS)}.")
    unknown = [str(k) for k in document if k not in _MAPPING_KEYS]
    if unknown:
        raise CharacterError(f"{file}: unknown key {unknown[0]!r}; the keys are {', '.join(_MAPPING_KEYS)}.")
    known = ", ".join(characters)
    result: dict[str, Any] = {}
    default = document.get("default")
    if default is not None:
        if str(default) not in characters:
            raise CharacterError(f"{file}: default names {default!r}, which is none of the characters ({known}).")
        result["default"] = str(default)
    for table in ("servers", "categories", "channels"):
        raw = document.get(table) or {}
        if not isinstance(raw, Mapping):
            raise CharacterError(f"{file}: {table} must map ids to character keys.")
        places: dict[int, str] = {}
        for place, key in raw.items():
            if not str(place).isdigit():
                raise CharacterError(f"{file}: {table}: {place!r} is not a Discord id.")
            if str(key) not in characters:
                raise CharacterError(
                    f"{file}: {table}.{place} names {key!r}, which is none of the characters ({known})."
                )
            places[int(place)] = str(key)
        result[table] = places
    return result
