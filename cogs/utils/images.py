"""The images of the messages one turn answers: a mark naming each ("[image: name]", saying why
when it is not shown), and with LLM_VISION the images themselves, within LLM_MAX_IMAGES and
LLM_MAX_IMAGE_BYTES. The marks stay with the message they came with, so a burst's exchange
keeps each message's own."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import discord

from bot.clients.llm_wire import Image
from bot.config import DiscordSettings

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SeenImages:
    # The marks of each message, by message id.
    marks: dict[int, list[str]] = field(default_factory=dict)
    images: list[Image] = field(default_factory=list)

    def mark(self, message: discord.Message, text: str) -> None:
        self.marks.setdefault(message.id, []).append(text)

    def marks_of(self, message: discord.Message) -> str:
        return " ".join(self.marks.get(message.id, []))


def image_attachments(message: discord.Message) -> list[discord.Attachment]:
    return [a for a in message.attachments if (a.content_type or "").startswith("image/")]


async def read_images(messages: Sequence[discord.Message], settings: DiscordSettings) -> SeenImages:
    seen = SeenImages()
    for message, attachment in ((m, a) for m in messages for a in image_attachments(m)):
        name = attachment.filename
        if not settings.llm_vision:
            seen.mark(message, f"[image: {name}]")
        elif len(seen.images) >= settings.llm_max_images:
            seen.mark(message, f"[image: {name} — not shown, too many images]")
        elif attachment.size > settings.llm_max_image_bytes:
            seen.mark(message, f"[image: {name} — too large]")
        else:
            try:
                data = await attachment.read()
            except discord.HTTPException as exc:
                log.warning("could not download image %s: %s", name, exc)
                seen.mark(message, f"[image: {name} — could not be downloaded]")
                continue
            if len(data) > settings.llm_max_image_bytes:
                seen.mark(message, f"[image: {name} — too large]")
                continue
            seen.mark(message, f"[image: {name}]")
            seen.images.append(Image(name, attachment.content_type or "image/png", data))
    return seen
