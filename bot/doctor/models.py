"""The checks of the servers the character thinks with: the chat LLM (each model present, a reply,
streaming, the context a full prompt needs, the reflection's JSON, what the bot tells the server)
and the embedder."""

from __future__ import annotations

import asyncio
import time

import httpx

from bot.characters.cast import Cast, load_cast
from bot.characters.character import render_character_prompt
from bot.characters.macros import TurnValues
from bot.clients.embeddings import make_embedder
from bot.clients.llm import LLMClient
from bot.clients.llm_wire import ChatMessage
from bot.config import Settings, secret
from bot.doctor.finding import Finding, bad, first_line, good
from bot.engine.context import CONTINUE_MIN_CONTEXT
from bot.engine.fitting import TokenRate, answer_room
from bot.engine.prompting import ChannelLine, build_reply_messages, reply_head
from bot.errors import EmbeddingError, LLMError, ModelNotFound, ReflectionParseError
from bot.memory.choice import DEFAULT_LIMIT
from bot.memory.model import Memory, OwnerKey, utcnow
from bot.memory.read.conversation import SEMANTIC_THRESHOLDS, threshold_for
from bot.memory.story.plans import render_state_guide, render_story_context
from bot.memory.story.state import parse_state_specs, state_values
from bot.memory.write.reflection import parse_reflection, reflection_json_schema
from bot.memory.write.reflection_prompt import MEMORY_TASK_INTRO, memory_task

# Bounds of one check: a model loading from disk takes tens of seconds on its first call.
LLM_SECONDS = 120.0


EMBEDDER_SECONDS = 60.0


REFLECTION_PROBE: list[ChatMessage] = [
    {
        "role": "system",
        "content": "Extract what the user says about themselves as memories, as JSON following the schema.",
    },
    {"role": "user", "content": "The exchange:\nuser: I have two cats, Miso and Tofu.\nassistant: Lovely names!"},
]


# A typical prompt's parts, to size the context a full one needs: a memory as the reflection
# writes them, and the channel's lines, a person's and the character's in turn.
SAMPLE_MEMORY = "The user has two cats, Miso and Tofu, and feeds them before leaving for work."


SAMPLE_LINES = (
    "I finally finished the shelves in the living room, it took all weekend!",
    (
        "All weekend? Then they deserve a place of honour. What goes on them first, books or the "
        "plants you keep promising to repot? I want a picture once they are filled."
    ),
)


async def check_llm(settings: Settings, http: httpx.AsyncClient, cast: Cast | None = None) -> list[Finding]:
    s, models = settings.llm, settings.engine
    llm = LLMClient(
        http,
        api=s.api,
        base_url=s.base_url,
        api_key=secret(s.api_key),
        timeout=LLM_SECONDS,
        context_tokens=s.told_context(models.llm_context_tokens),
        keep_alive=s.told_keep_alive,
    )
    found: list[Finding] = []
    usable: set[str] = set()
    for model in dict.fromkeys((models.llm_model, models.reflection_model)):
        try:
            await llm.check(model)
        except ModelNotFound as exc:
            # The setting that names it: the reflection's model is REFLECTION_MODEL's, not LLM_MODEL's.
            named = " and ".join(
                n
                for n, m in (("LLM_MODEL", models.llm_model), ("REFLECTION_MODEL", models.reflection_model))
                if m == model
            )
            pull = f"`ollama pull {model}`, or " if s.api == "ollama" else ""
            found.append(
                bad(
                    "LLM model",
                    f"{model!r} is not on the server ({first_line(exc)})",
                    f"{pull}set {named} to a model the server has",
                )
            )
            continue
        except LLMError as exc:
            return [bad("LLM", first_line(exc), f"start the server, or set LLM_BASE_URL / LLM_API (now {s.api})")]
        usable.add(model)
        found.append(good("LLM model", f"{model!r} present on {s.base_url}"))
    if models.llm_model in usable:
        started = time.monotonic()
        try:
            reply = await llm.chat(
                [{"role": "user", "content": "Answer with one word: ready."}], model=models.llm_model
            )
            found.append(good("LLM reply", f"{reply.text[:40]!r} in {time.monotonic() - started:.1f} s"))
        except LLMError as exc:
            found.append(bad("LLM reply", first_line(exc), "see the server's log; LLM_TIMEOUT_SECONDS bounds a reply"))
        pieces: list[str] = []

        async def seen(text: str) -> None:
            pieces.append(text)

        try:
            await llm.stream(
                [{"role": "user", "content": "Count from one to five."}], model=models.llm_model, on_text=seen
            )
            found.append(good("LLM streaming", f"{len(pieces)} pieces"))
        except LLMError as exc:
            found.append(bad("LLM streaming", first_line(exc), "use a server that streams, or STREAM_REPLIES=false"))
        found.append(await _check_context(llm, settings, cast or load_cast(None, None)))
    if models.reflection_model in usable:
        found.append(await _check_json(llm, models.reflection_model))
    if usable:
        found.append(_server_settings(llm))
    return found


async def _check_json(llm: LLMClient, model: str) -> Finding:
    """The reflection's call, read as the bot reads it: a server that ignores structured output
    answers prose, which nothing can be read from; an item the model filled wrongly (a number
    out of its range) is dropped alone, as the bot would drop it."""
    try:
        reply = await llm.chat(REFLECTION_PROBE, model=model, json_schema=reflection_json_schema())
    except LLMError as exc:
        return bad("LLM JSON", first_line(exc), "see the server's log")
    try:
        parsed = parse_reflection(reply.text)
    except ReflectionParseError:
        return bad(
            "LLM JSON",
            f"asked for JSON following the reflection's schema, {model!r} answered {reply.text[:80]!r}",
            "the server ignores structured output: use Ollama 0.5 or later, or an OpenAI-compatible server "
            "with response_format json_schema (llama.cpp's server, vLLM), or set REFLECTION_MODEL to a model "
            "that follows it; without it no memory is written",
        )
    dropped = f"; {len(parsed.problems)} item(s) the model filled wrongly would be dropped" if parsed.problems else ""
    return good("LLM JSON", f"{model!r} answers the reflection's schema{dropped}")


async def _check_context(llm: LLMClient, settings: Settings, cast: Cast) -> Finding:
    """The context the server gives one request, read where it says it (llama.cpp /props, Ollama
    /api/show, vLLM /v1/models; otherwise LLM_CONTEXT_TOKENS), against what the bot's prompts
    take: the smallest (the character and a message) and a full one (the 24 memories, the
    recent lines), each with room for the answer."""
    model, asked = settings.engine.llm_model, settings.engine.llm_context_tokens
    try:
        server = await llm.describe(model)
    except LLMError as exc:
        return bad("LLM context", first_line(exc), "see the server's log")
    said = server.context_tokens
    if llm.api == "ollama":
        if said is not None and asked > said:
            return bad(
                "LLM context",
                f"LLM_CONTEXT_TOKENS={asked}, but {model!r} handles {said} tokens",
                f"set LLM_CONTEXT_TOKENS={said} or less",
            )
        context, source = asked, "asked of Ollama (LLM_CONTEXT_TOKENS)"
    elif said is not None:
        context, source = said, f"said by {server.kind}" + (", per slot" if server.kind == "llama.cpp" else "")
    else:
        context, source = asked, "the server does not report it: LLM_CONTEXT_TOKENS assumed"
    smallest, full, counted = await _prompt_sizes(llm, settings, cast)
    about = "" if counted else "about "
    room = answer_room(context)
    raise_it = (
        "start the server with a larger context (llama.cpp -c {n} with -np 1, vLLM --max-model-len {n})"
        if llm.api == "openai"
        else "set LLM_CONTEXT_TOKENS={n} (a model that handles it)"
    )
    if smallest + room > context:
        return bad(
            "LLM context",
            f"{context:,} tokens ({source}): too small for even the smallest prompt, the character and a "
            f"message ({about}{smallest:,} tokens, and {room:,} to answer): no message will be answered",
            raise_it.format(n=_round_up(full + answer_room(full * 2))),
        )
    if full + room > context:
        return bad(
            "LLM context",
            f"{context:,} tokens ({source}): a full prompt ({DEFAULT_LIMIT} memories, {settings.engine.history_messages} "
            f"recent lines) takes {about}{full:,} tokens and {room:,} to answer: older lines and the weakest "
            "memories will be left out of each prompt",
            raise_it.format(n=_round_up(full + answer_room(full * 2))),
        )
    return good("LLM context", f"{context:,} tokens ({source}); a full prompt takes {about}{full:,}")


def _round_up(tokens: int) -> int:
    return -(-tokens // 1024) * 1024


async def _prompt_sizes(llm: LLMClient, settings: Settings, cast: Cast) -> tuple[int, int, bool]:
    """Tokens of the largest character's smallest and full prompts, and whether the server
    counted them (llama.cpp), rather than estimated at the bot's default rate."""
    now = utcnow()
    memories = [
        Memory(
            id=i,
            user_id=OwnerKey("doctor"),
            text=SAMPLE_MEMORY,
            type="fact",
            scope="global",
            pinned=False,
            confidence=1.0,
            created_at=now,
            updated_at=now,
        )
        for i in range(DEFAULT_LIMIT)
    ]
    lines = [
        ChannelLine("Alice", SAMPLE_LINES[i % 2], from_bot=bool(i % 2)) for i in range(settings.engine.history_messages)
    ]
    engine = settings.engine
    # The reply's head carries the reflection's task when the reflection continues it.
    continues = (
        engine.concurrency(settings.llm.api) == 1
        and engine.reflection_model == engine.llm_model
        and engine.llm_context_tokens >= CONTINUE_MIN_CONTEXT
    )
    sizes: list[tuple[int, int, bool]] = []
    for character in cast.characters.values():
        specs = parse_state_specs(character.state)
        story = render_story_context([], None, [], state_values(specs, {}), specs, describe_state=False)
        task = memory_task(character=character.name, user="Alice", story=True, state_keys=list(specs))
        head = reply_head(
            character_prompt=render_character_prompt(character, TurnValues(user="Alice", now=now)),
            character_name=character.name,
            rules=character.rules,
            state_guide=render_state_guide(specs),
            memory_task=f"{MEMORY_TASK_INTRO}\n\n{task}" if continues else "",
        )
        prompts = [
            build_reply_messages(
                head=head,
                user_name="Alice",
                memories=chosen,
                story_context=story,
                history=history,
                message=SAMPLE_LINES[0],
            ).messages
            for history, chosen in (((), ()), (lines, memories))
        ]
        counted = [await llm.count_tokens(p) for p in prompts]
        if all(c is not None for c in counted):
            sizes.append((counted[0] or 0, counted[1] or 0, True))
        else:
            sizes.append((TokenRate().tokens(prompts[0]), TokenRate().tokens(prompts[1]), False))
    return max(sizes)


def _server_settings(llm: LLMClient) -> Finding:
    """What the bot tells the server with every call (docs/llm-servers.md)."""
    if llm.api == "ollama":
        told = f"keep_alive {llm.keep_alive} (LLM_KEEP_ALIVE), num_ctx {llm.context_tokens} on every call"
    else:
        kind = llm.server.kind if llm.server is not None else "OpenAI-compatible"
        told = f"{kind}: a prompt_cache_key per conversation (salted hash)"
        if kind == "llama.cpp":
            told += ", cache_prompt"
    return good("LLM server settings", told)


async def check_embedder(settings: Settings, http: httpx.AsyncClient) -> list[Finding]:
    e = settings.embedding
    started = time.monotonic()
    try:
        embedder = make_embedder(e.kind, model=e.model, base_url=e.base_url, api_key=secret(e.api_key), http=http)
        vector = await asyncio.wait_for(embedder.embed_query("doctor"), EMBEDDER_SECONDS)
    except (EmbeddingError, TimeoutError, OSError) as exc:
        return [
            bad(
                "embedder",
                f"EMBEDDINGS={e.kind} does not answer: {first_line(exc) if str(exc) else 'no answer in time'}",
                "start the embedding server or correct EMBEDDINGS_BASE_URL / EMBEDDINGS_MODEL, or EMBEDDINGS=local",
            )
        ]
    found = [
        good("embedder", f"{embedder.model} answers in {time.monotonic() - started:.1f} s, {len(vector)} dimensions")
    ]
    override = settings.engine.semantic_threshold
    if override is not None:
        found.append(good("embedder threshold", f"{override:.2f}, from SEMANTIC_THRESHOLD"))
    elif embedder.model in SEMANTIC_THRESHOLDS:
        found.append(good("embedder threshold", f"{threshold_for(embedder.model):.2f}, measured for {embedder.model}"))
    else:
        found.append(
            bad(
                "embedder threshold",
                f"none measured for {embedder.model}: recall uses {threshold_for(embedder.model):.2f}, measured for "
                "another model on the same scale",
                f"measure it: python bench/recall_public.py --embeddings {e.kind} --embeddings-model "
                f"{embedder.model.removeprefix(e.kind + ':')} "
                "prints the SEMANTIC_THRESHOLD to set; or EMBEDDINGS=local",
            )
        )
    return found
