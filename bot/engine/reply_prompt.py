"""One turn's reply prompt, from what the turn chose: the channel's lines in their window (where
the conversation's last prompt started it), the lore that fires (with each story's lore clock),
the notes of the last prompt whose memories are still true, the head, and the conversation's
log kept for the next turn (bot/engine/prompt_logs.py). The layout itself is
bot/engine/prompting.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from bot.characters.character import Character, fill_turn, render_character_prompt
from bot.characters.lore import LoreHit
from bot.characters.lore_timing import LoreClock
from bot.characters.macros import TurnValues
from bot.clients.llm_wire import ChatMessage, Image
from bot.clients.storage import from_db
from bot.engine.context import EngineContext
from bot.engine.prompting import (
    MAX_NOTED,
    ChannelLine,
    Note,
    ReplyPrompt,
    at_depths,
    build_reply_messages,
    cut_lines,
    history_window,
    noted_count,
    render_lore,
    reply_head,
    stepped_window,
)
from bot.errors import StorageError
from bot.memory.choice import TurnSelection
from bot.memory.model import Memory, OwnerKey, StoryId
from bot.memory.quoting import speaker_name
from bot.memory.stores.memories import MemoryRow
from bot.memory.stores.turn import last_turn
from bot.memory.story.plans import render_state_guide
from bot.memory.write.reflection_prompt import MEMORY_TASK_INTRO, memory_task

# Stories whose lore clock (timed lore entries) is held in memory; past it the oldest is read
# again from its last turn's record when it comes back.
LORE_CLOCKS_HELD = 10_000


@dataclass(frozen=True, slots=True)
class TurnMessage:
    """What the prompt needs of the turn's message (bot/engine/turn.py `Incoming`)."""

    user_id: OwnerKey
    user_name: str
    story_id: StoryId
    story_name: str
    text: str
    history: Sequence[ChannelLine] = ()
    images: Sequence[Image] = field(default_factory=tuple)


@dataclass(slots=True)
class Prepared:
    """A turn's prompt before it is fitted into the model's context: `build` makes the messages
    of the lines and memories that fit, and remembers what each prompt it made leaves for the
    next turn (`made`)."""

    make: Callable[[Sequence[ChannelLine], Sequence[Memory]], ReplyPrompt]
    history: list[ChannelLine]
    _made: dict[int, ReplyPrompt] = field(default_factory=dict)

    def build(self, lines: Sequence[ChannelLine], memories: Sequence[Memory]) -> list[ChatMessage]:
        prompt = self.make(lines, memories)
        self._made[id(prompt.messages)] = prompt
        return prompt.messages

    def made(self, messages: list[ChatMessage]) -> ReplyPrompt:
        """The prompt whose messages were sent."""
        return self._made[id(messages)]


class ReplyPrompts:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self._lore_clocks: dict[tuple[str, str], LoreClock] = {}

    async def lore_clock(self, msg: TurnMessage, character: Character) -> LoreClock | None:
        """The story's clock when the character's lorebook has timed entries: held since its
        last turn, or read back from that turn's record (after a restart)."""
        if character.lore is None or not character.lore.timed:
            return None
        held = self._lore_clocks.get((msg.user_id, msg.story_id))
        if held is not None:
            return held
        with contextlib.suppress(StorageError):  # a fresh clock: effects start again
            last = await last_turn(self.ctx.db, msg.user_id, msg.story_id)
            if last is not None:
                return LoreClock.from_record(last.lore_clock)
        return LoreClock()

    async def prepare(
        self,
        msg: TurnMessage,
        rules: Sequence[Memory],
        character: Character,
        selection: TurnSelection,
        story_block: str,
        clock: LoreClock | None,
        followup: str = "",
    ) -> Prepared:
        """What builds the messages the model is sent (bot/engine/prompting.py) from the lines
        and memories that fit the model's context (bot/engine/fitting.py): the head, the recent
        lines of the channel in their window with the notes the conversation's last prompt left
        (those still true), the turn's memories, story and lore, and the message. Notes who else
        spoke and which lore fired. `followup`: the turn's follow-up note (bot/engine/followups.py)."""
        ctx, settings, text = self.ctx, self.ctx.settings, msg.text
        bounds = {"max_messages": settings.history_messages, "max_chars": settings.history_chars}
        lines = cut_lines(list(msg.history), **bounds)
        logged = ctx.prompts.get(msg.user_id, msg.story_id)
        history = history_window(lines, start=logged.start if logged else None, **bounds)
        self._note_scene(msg, history)
        values = TurnValues(
            user=speaker_name(msg.user_name),
            now=ctx.clock(),
            seed=f"{msg.story_id}\x00{clock.turn if clock else 0}\x00{text}",
            story=f"{msg.user_id}\x00{msg.story_id}",
        )
        lore = self._lore(msg, character, history, selection, clock, values)
        selection.user_name, selection.story_name = msg.user_name, msg.story_name
        specs = ctx.specs(character.key)
        task = memory_task(character=character.name, user=msg.user_name, story=True, state_keys=list(specs))
        head = reply_head(
            character_prompt=render_character_prompt(character, values, lore_before=render_lore(lore, "before")),
            character_name=character.name,
            rules=[r.text for r in rules],
            state_guide=render_state_guide(specs),
            memory_task=f"{MEMORY_TASK_INTRO}\n\n{task}" if ctx.reflection_continues() else "",
        )
        (message,) = cut_lines([ChannelLine(msg.user_name, text)], **bounds)
        post_history = fill_turn(character.post_history_instructions, values)
        depths = at_depths(lore, fill_turn(character.depth_prompt, values), character.depth_prompt_depth)
        notes = await self._true_notes(msg.user_id, logged.notes if logged else (), selection)

        def make(window: Sequence[ChannelLine], memories: Sequence[Memory], earlier: Sequence[Note]) -> ReplyPrompt:
            return build_reply_messages(
                head=head,
                user_name=msg.user_name,
                memories=memories,
                story_context=story_block,
                history=window,
                message=text,
                message_line=message.text,
                notes=earlier,
                post_history=post_history,
                images=msg.images,
                lore=lore,
                depths=depths,
                followup=followup,
            )

        whole = make(history, selection.memories, notes)
        if noted_count(whole.notes) > MAX_NOTED:
            # The notes outgrew their bound: the window steps, and the turn's note holds the
            # whole selection.
            stepped = stepped_window(lines, **bounds)
            return Prepared(lambda window, memories: make(window, memories, []), stepped)

        def build(window: Sequence[ChannelLine], memories: Sequence[Memory]) -> ReplyPrompt:
            # Fitting asks first for everything, which is the prompt made above.
            if window is history and memories is selection.memories:
                return whole
            return make(window, memories, notes)

        return Prepared(build, history)

    def _lore(
        self,
        msg: TurnMessage,
        character: Character,
        history: Sequence[ChannelLine],
        selection: TurnSelection,
        clock: LoreClock | None,
        values: TurnValues,
    ) -> list[LoreHit]:
        """The lore that fires on the lines and the message, recorded in the selection; the
        story's clock moves on."""
        selection.lore = []
        if character.lore is None:
            return []
        disabled = len(character.lore.disabled())
        turn = character.lore.match(
            [line.text for line in history] + [msg.text],
            budget_chars=self.ctx.settings.lore_budget_chars,
            scan_depth=self.ctx.settings.lore_scan_depth,
            clock=clock,
            seed=values.seed,
        )
        self.ctx.metrics.lore_keys_disabled.inc(len(character.lore.disabled()) - disabled)
        selection.lore = turn.records()
        if clock is not None:
            key = (msg.user_id, msg.story_id)
            self._lore_clocks.pop(key, None)
            self._lore_clocks[key] = turn.clock
            while len(self._lore_clocks) > LORE_CLOCKS_HELD:
                self._lore_clocks.pop(next(iter(self._lore_clocks)))
            selection.lore_clock = turn.clock.to_record()
        return [replace(h, content=fill_turn(h.content, values)) for h in turn.hits]

    async def _true_notes(self, user_id: OwnerKey, notes: Sequence[Note], selection: TurnSelection) -> list[Note]:
        """The notes of the conversation's last prompt with only the memories still true as
        shown: forgotten, edited, expired or out of this turn's reach (another place, a story's
        memory elsewhere), a memory leaves its note."""
        noted = {m.id for n in notes for m in n.memories}
        if not noted:
            return []
        # Checked at the noted memories only: a test of membership among every candidate sorted
        # them (16 ms a turn at 100,000 whose ids are spread among other people's).
        current = await self.ctx.cache.rows_in_reach(
            user_id,
            noted,
            selection.created_at,
            story_id=selection.story_id,
            place=selection.place,
            share=selection.share,
        )
        kept = []
        for note in notes:
            memories = tuple(m for m in note.memories if _same_shown(current.get(m.id), m))
            if len(memories) == len(note.memories):
                kept.append(note)
            elif memories:
                kept.append(replace(note, memories=memories))
        return kept

    def _note_scene(self, msg: TurnMessage, history: Sequence[ChannelLine]) -> None:
        """The people other than the author who spoke in the recent lines of the channel."""
        self.ctx.scenes.note(
            msg.story_id,
            (
                line.author
                for line in history
                if not line.from_bot and not line.from_cast and line.author != msg.user_name
            ),
        )


def _same_shown(current: MemoryRow | None, shown: Memory) -> bool:
    if current is None or (current.text, current.type) != (shown.text, shown.type):
        return False
    return (current.expires_at is None and shown.expires_at is None) or from_db(current.expires_at) == shown.expires_at
