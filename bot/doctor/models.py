"""The checks of the servers the character thinks with: the chat LLM (each model present, a reply,
streaming, the context size, the reflection's JSON) and the embedder."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from pydantic import ValidationError

from bot.clients.embeddings import make_embedder
from bot.clients.llm import LLMClient
from bot.clients.llm_wire import ChatMessage
from bot.config import Settings, secret
from bot.doctor.finding import Finding, bad, first_line, good
from bot.errors import EmbeddingError, LLMError, ModelNotFound
from bot.memory.read.recall import SEMANTIC_THRESHOLDS, threshold_for
from bot.memory.write.reflection import Reflection, reflection_json_schema

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


async def check_llm(settings: Settings, http: httpx.AsyncClient) -> list[Finding]:
    s, models = settings.llm, settings.engine
    llm = LLMClient(
        http, api=s.api, base_url=s.base_url, api_key=secret(s.api_key), timeout=LLM_SECONDS,
        context_tokens=s.asked_context_tokens,
    )  # fmt: skip
    found: list[Finding] = []
    usable: set[str] = set()
    for model in dict.fromkeys((models.llm_model, models.reflection_model)):
        try:
            await llm.check(model)
        except ModelNotFound as exc:
            # The setting that names it: the reflection's model is REFLECTION_MODEL's, not LLM_MODEL's.
            named = " and ".join(n for n, m in (("LLM_MODEL", models.llm_model), ("REFLECTION_MODEL", models.reflection_model)) if m == model)
            pull = f"`ollama pull {model}`, or " if s.api == "ollama" else ""
            found.append(bad("LLM model", f"{model!r} is not on the server ({first_line(exc)})", f"{pull}set {named} to a model the server has"))
            continue
        except LLMError as exc:
            return [bad("LLM", first_line(exc), f"start the server, or set LLM_BASE_URL / LLM_API (now {s.api})")]
        usable.add(model)
        found.append(good("LLM model", f"{model!r} present on {s.base_url}"))
    if models.llm_model in usable:
        started = time.monotonic()
        try:
            reply = await llm.chat([{"role": "user", "content": "Answer with one word: ready."}], model=models.llm_model)
            found.append(good("LLM reply", f"{reply.text[:40]!r} in {time.monotonic() - started:.1f} s"))
        except LLMError as exc:
            found.append(bad("LLM reply", first_line(exc), "see the server's log; LLM_TIMEOUT_SECONDS bounds a reply"))
        pieces: list[str] = []

        async def seen(text: str) -> None:
            pieces.append(text)

        try:
            await llm.stream([{"role": "user", "content": "Count from one to five."}], model=models.llm_model, on_text=seen)
            found.append(good("LLM streaming", f"{len(pieces)} pieces"))
        except LLMError as exc:
            found.append(
                bad("LLM streaming", first_line(exc), "use a server that streams, or STREAM_REPLIES=false")
            )
        found.append(await _check_context(llm, models.llm_model, s.asked_context_tokens))
    if models.reflection_model in usable:
        found.append(await _check_json(llm, models.reflection_model))
    return found


async def _check_json(llm: LLMClient, model: str) -> Finding:
    try:
        reply = await llm.chat(REFLECTION_PROBE, model=model, json_schema=reflection_json_schema())
    except LLMError as exc:
        return bad("LLM JSON", first_line(exc), "see the server's log")
    try:
        Reflection.model_validate(json.loads(reply.text))
    except (ValueError, ValidationError):
        return bad(
            "LLM JSON",
            f"asked for JSON following the reflection's schema, {model!r} answered {reply.text[:80]!r}",
            "the server ignores structured output: use Ollama 0.5 or later, or an OpenAI-compatible server "
            "with response_format json_schema (llama.cpp's server, vLLM), or set REFLECTION_MODEL to a model "
            "that follows it; without it no memory is written",
        )
    return good("LLM JSON", f"{model!r} answers the reflection's schema")


async def _check_context(llm: LLMClient, model: str, asked: int | None) -> Finding:
    try:
        size = await llm.context_size(model)
    except LLMError as exc:
        return bad("LLM context", first_line(exc), "see the server's log")
    if size is None:
        return good("LLM context", "the server does not report it" + (f"; {asked} tokens asked" if asked else ""))
    if asked is not None and asked > size:
        return bad(
            "LLM context",
            f"LLM_CONTEXT_TOKENS={asked}, but {model!r} handles {size} tokens",
            f"set LLM_CONTEXT_TOKENS={size} or less",
        )
    return good("LLM context", f"{size} tokens" + (f", {asked} asked" if asked else ""))


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
    found = [good("embedder", f"{embedder.model} answers in {time.monotonic() - started:.1f} s, {len(vector)} dimensions")]
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
