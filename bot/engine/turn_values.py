"""A turn's message in and its result out, the values every front end hands the engine and reads
back (bot/engine/turn.py runs the turn)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bot.clients.llm_wire import Image, TokenUsage
from bot.engine.prompting import ChannelLine
from bot.memory.choice import TurnSelection
from bot.memory.model import OwnerKey, StoryId
from bot.memory.stores.exchanges import MessagePart

# Why a turn has no reply: the model could not be reached, the model's context cannot hold even
# the smallest prompt (writing again cannot help), the storage failed (the message could not be
# kept, so it is not answered), or the person was erased as the turn began. The front ends say it
# in the person's language (bot/presenting/answers.py, `turn_text`).
Failure = Literal["model_down", "context_too_small", "storage_down", "erased"]


@dataclass(frozen=True, slots=True)
class Incoming:
    """One message addressed to the character, from any front end."""

    user_id: OwnerKey
    user_name: str
    text: str
    story_id: StoryId
    place: str
    message_id: str | None = None
    history: Sequence[ChannelLine] = ()
    # The front-end messages `text` joins (`join_parts`), oldest first, when there are several
    # (a burst): each is kept with the exchange, so an edit or a delete of any of them reaches
    # it. Without them, `message_id` (when given) is the one message, `text` its text.
    parts: Sequence[MessagePart] = ()
    # Shown to a vision model with this message only; `text` names them ("[image: name]"), and
    # only the text is saved and reflected.
    images: Sequence[Image] = ()
    # The reply may be regenerated and swiped: the exchange stays open, and is reflected on the
    # answer the user keeps once it settles (next message in the story, SETTLE_SECONDS, restart).
    swipes: bool = False
    # The key of the character who answers ("" for the default); `user_id` is then the
    # memory owner key the cast gives that character (bot.characters.cast).
    character: str = ""
    # How the owner's page names the story (a channel's "#name"): ids mean nothing to a person.
    story_name: str = ""


@dataclass(slots=True)
class TurnResult:
    reply: str | None
    error: str | None
    # None when the message could not even be saved (nothing was selected).
    selection: TurnSelection | None
    exchange_id: int | None
    # Why there is no reply (when there is none).
    failure: Failure = "model_down"
    # The streamed answer broke halfway: `reply` is the part that arrived, `error` why.
    cut: bool = False
    usage: TokenUsage | None = None
    needed: int = 0  # with "context_too_small": the smallest prompt and its answer, in tokens…
    context: int = 0  # …and the model's context

    @classmethod
    def answered(cls, reply: str, selection: TurnSelection, exchange_id: int, usage: TokenUsage) -> TurnResult:
        return cls(reply, None, selection, exchange_id, usage=usage)

    @classmethod
    def cut_off(cls, reply: str, why: str, selection: TurnSelection, exchange_id: int) -> TurnResult:
        """The stream broke halfway: `reply` is what arrived."""
        return cls(reply, why, selection, exchange_id, cut=True)

    @classmethod
    def unanswered(cls, why: str, selection: TurnSelection, exchange_id: int) -> TurnResult:
        """The model failed: the message is kept, unanswered."""
        return cls(None, why, selection, exchange_id)

    @classmethod
    def unsaved(cls, why: str) -> TurnResult:
        """The message could not be saved, so it is not answered."""
        return cls(None, why, None, None, failure="storage_down")

    @classmethod
    def erased(cls) -> TurnResult:
        """The person was erased while the turn began: nothing kept, nothing answered."""
        return cls(None, "erased", None, None, failure="erased")
