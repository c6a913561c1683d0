"""What each conversation's last reply prompt held, so that the next one extends it.

Per person and channel: where the prompt's window of the channel's lines started and the memory
notes it left in the conversation (bot/engine/prompting.py), and the messages sent with the
answers kept, which the reflection continues when the server holds one prompt at a time
(bot/engine/reflection_worker.py). In memory only: after a restart, or for a conversation
pushed out by MAX_CONVERSATIONS more recent ones, the next prompt starts afresh and the server
reads it whole once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.clients.llm_wire import ChatMessage
from bot.engine.prompting import ChannelLine, Note

# Conversations remembered, the least recently active forgotten first. A remembered one holds
# its notes (at most MAX_NOTED memories) and its last two prompts (10-30 KB each): about 60 MB at
# this bound.
MAX_CONVERSATIONS = 1000


@dataclass(slots=True)
class Sent:
    """A reply prompt as sent, and the answer kept (None until answered)."""

    messages: list[ChatMessage]
    reply: str | None = None


@dataclass(slots=True)
class PromptLog:
    start: ChannelLine | None
    notes: tuple[Note, ...]
    # The last SENT_KEPT reply prompts by exchange id, oldest first.
    sent: dict[int, Sent] = field(default_factory=dict)


# Reply prompts kept per conversation: the last exchange's, and the one before, whose
# reflection runs after the next reply when the person writes again before it settles (the
# buttons under a reply keep it open until then).
SENT_KEPT = 2


class PromptLogs:
    """The logs, by person and channel. They follow the memory cache (bot/memory/cache/
    memory_cache.py `Follower`): a person's go when their entry goes (an erase, the cache's
    budget) and count in that budget."""

    def __init__(self, max_conversations: int = MAX_CONVERSATIONS) -> None:
        self.max_conversations = max_conversations
        self._logs: OrderedDict[tuple[str, str], PromptLog] = OrderedDict()
        self._bytes: dict[tuple[str, str], int] = {}
        self._per_user: dict[str, int] = {}

    def get(self, user_id: str, story_id: str) -> PromptLog | None:
        return self._logs.get((user_id, story_id))

    def keep(
        self,
        user_id: str,
        story_id: str,
        start: ChannelLine | None,
        notes: tuple[Note, ...],
        exchange_id: int,
        messages: list[ChatMessage],
    ) -> None:
        """A reply prompt sent for `exchange_id`: the conversation's next prompt extends it."""
        previous = self._logs.get((user_id, story_id))
        sent = dict(previous.sent) if previous is not None else {}
        sent[exchange_id] = Sent(messages)
        while len(sent) > SENT_KEPT:
            del sent[min(sent)]
        key = (user_id, story_id)
        self._logs[key] = PromptLog(start, notes, sent)
        self._logs.move_to_end(key)
        self._count(key, sum(len(str(m.get("content", ""))) for s in sent.values() for m in s.messages)
                    + sum(len(m.text) for n in notes for m in n.memories))  # fmt: skip
        while len(self._logs) > self.max_conversations:
            oldest, _ = self._logs.popitem(last=False)
            self._count(oldest, 0)

    def _count(self, key: tuple[str, str], size: int) -> None:
        """The characters a conversation's log holds, and its person's sum (`nbytes`)."""
        self._per_user[key[0]] = self._per_user.get(key[0], 0) - self._bytes.pop(key, 0) + size
        if size:
            self._bytes[key] = size
        if not self._per_user[key[0]]:
            del self._per_user[key[0]]

    def answered(self, user_id: str, story_id: str, exchange_id: int, reply: str) -> None:
        """The answer kept for an exchange whose prompt is kept."""
        log = self._logs.get((user_id, story_id))
        if log is not None and exchange_id in log.sent:
            log.sent[exchange_id].reply = reply

    def sent(self, user_id: str, story_id: str, exchange_id: int) -> Sent | None:
        """The reply prompt of an exchange, once answered, if it is still kept."""
        log = self._logs.get((user_id, story_id))
        sent = log.sent.get(exchange_id) if log is not None else None
        return sent if sent is not None and sent.reply is not None else None

    def dropped(self, user_id: str) -> None:
        """Everything kept of the person's conversations (erased, or out of the cache)."""
        for key in [k for k in self._logs if k[0] == user_id]:
            del self._logs[key]
            self._count(key, 0)

    def caught_up(self, user_id: str, entry: object, changed: Sequence[int]) -> None:
        """Nothing to do: a turn checks its notes' memories against the entry itself."""

    def nbytes(self, user_id: str) -> int:
        return self._per_user.get(user_id, 0)

    def __len__(self) -> int:
        return len(self._logs)
