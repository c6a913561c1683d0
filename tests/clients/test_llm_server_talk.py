"""What the chat client reads of the server (its kind, its context, a refusal of a prompt longer
than the context, the prompt-cache figures) and what it tells it (keep_alive, num_ctx,
cache_prompt, prompt_cache_key). The refusals' bodies are the real servers' own, captured from
llama-server (b1-0c1e570) and llama-cpp-python's server (0.3.36)."""

from __future__ import annotations

import json

import httpx
import pytest

from bot.clients.llm import LLMClient, ServerInfo
from bot.clients.llm_wire import TokenUsage
from bot.errors import LLMBadResponse, LLMContextExceeded
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, Reply

CONVERSATION = [{"role": "system", "content": "Tu es Écho."}, {"role": "user", "content": "Bonjour"}]

LLAMA_CPP_REFUSAL = (
    '{"error":{"code":400,"message":"request (2031 tokens) exceeds the available context size (1024 tokens), '
    'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2031,"n_ctx":1024}}'
)
LLAMA_CPP_PYTHON_REFUSAL = (
    '{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, you requested 3036 '
    "tokens (3031 in the messages, 5 in the completion). Please reduce the length of the messages or "
    'completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'
)


def client(http: httpx.AsyncClient, api: str, url: str, **kwargs: object) -> LLMClient:
    return LLMClient(http, api=api, base_url=url, **kwargs)  # type: ignore[arg-type]


# -- what the server says of itself ----------------------------------------------------------


async def test_llama_cpp_is_known_by_its_props_and_its_context_is_one_slots(http, llm_server: FakeLLMServer) -> None:
    llm_server.props_context = 1024
    llm = client(http, "openai", llm_server.url)
    assert await llm.describe(FAKE_MODEL) == ServerInfo("llama.cpp", 1024)
    assert llm.server == ServerInfo("llama.cpp", 1024)


async def test_vllm_is_known_by_max_model_len_and_another_server_says_nothing(http, llm_server: FakeLLMServer) -> None:
    llm_server.context_length = 4096  # the fake lists it as vLLM does, `max_model_len`
    assert await client(http, "openai", llm_server.url).describe(FAKE_MODEL) == ServerInfo("vllm", 4096)
    llm_server.context_length = None
    assert await client(http, "openai", llm_server.url).describe(FAKE_MODEL) == ServerInfo("openai-compatible", None)
    llm_server.models_endpoint = False
    assert await client(http, "openai", llm_server.url).describe(FAKE_MODEL) == ServerInfo("openai-compatible", None)


async def test_ollama_says_its_models_context_length(http, llm_server: FakeLLMServer) -> None:
    llm_server.context_length = 8192
    assert await client(http, "ollama", llm_server.url).describe(FAKE_MODEL) == ServerInfo("ollama", 8192)


# -- a prompt longer than the context ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "prompt", "context"), [(LLAMA_CPP_REFUSAL, 2031, 1024), (LLAMA_CPP_PYTHON_REFUSAL, 3036, 2048)]
)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_refusal_for_the_context_is_told_apart_from_an_outage_with_its_figures(
    http, llm_server: FakeLLMServer, body: str, prompt: int, context: int, stream: bool
) -> None:
    llm_server.replies.append(Reply(body=body, status=400))
    llm = client(http, "openai", llm_server.url)

    async def seen(text: str) -> None:
        raise AssertionError("no text arrives from a refusal")

    with pytest.raises(LLMContextExceeded) as refused:
        if stream:
            await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
        else:
            await llm.chat(CONVERSATION, model=FAKE_MODEL)
    assert (refused.value.prompt_tokens, refused.value.context_tokens) == (prompt, context)
    assert "A retry cannot work" in str(refused.value) and f"({prompt:,} tokens for {context:,})" in str(refused.value)


async def test_another_400_stays_a_bad_response(http, llm_server: FakeLLMServer) -> None:
    llm_server.replies.append(Reply(status=400, error="messages must alternate"))
    with pytest.raises(LLMBadResponse) as failed:
        await client(http, "openai", llm_server.url).chat(CONVERSATION, model=FAKE_MODEL)
    assert not isinstance(failed.value, LLMContextExceeded)


async def test_the_fake_refuses_as_llama_cpp_does(http, llm_server: FakeLLMServer) -> None:
    llm_server.context_tokens = 3
    with pytest.raises(LLMContextExceeded) as refused:
        await client(http, "openai", llm_server.url).chat(CONVERSATION, model=FAKE_MODEL)
    assert (refused.value.prompt_tokens, refused.value.context_tokens) == (4, 3)


# -- the server's own cost figures -------------------------------------------------------------


@pytest.mark.parametrize("api", ["ollama", "openai"])
@pytest.mark.parametrize("stream", [False, True])
async def test_the_prompt_tokens_reused_and_the_reading_time_are_read_as_each_api_says_them(
    http, llm_server: FakeLLMServer, api: str, stream: bool
) -> None:
    llm_server.replies.append(Reply("Salut !", prompt_tokens=1800, cached_tokens=1750, prompt_ms=42.5))
    llm = client(http, api, llm_server.url)

    async def seen(text: str) -> None:
        pass

    if stream:
        reply = await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    else:
        reply = await llm.chat(CONVERSATION, model=FAKE_MODEL)
    assert reply.usage == TokenUsage(1800, 2, cached_tokens=1750, prompt_ms=42.5)


async def test_llama_cpps_timings_stand_in_for_openais_cached_tokens(http, llm_server: FakeLLMServer) -> None:
    body = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 216, "completion_tokens": 5},
        "timings": {"cache_n": 215, "prompt_n": 1, "prompt_ms": 9.073},
    }
    llm_server.replies.append(Reply(body=json.dumps(body)))
    reply = await client(http, "openai", llm_server.url).chat(CONVERSATION, model=FAKE_MODEL)
    assert reply.usage == TokenUsage(216, 5, cached_tokens=215, prompt_ms=9.073)


# -- what the server is told -------------------------------------------------------------------


@pytest.mark.parametrize(("keep_alive", "sent"), [("30m", "30m"), ("-1", -1), ("600", 600), ("2.5", 2.5)])
async def test_ollama_is_told_how_long_to_keep_the_model_and_always_the_same_context(
    http, llm_server: FakeLLMServer, keep_alive: str, sent: object
) -> None:
    """A number goes as a JSON number: Ollama reads a string as a duration and needs its unit."""
    llm = client(http, "ollama", llm_server.url, context_tokens=8192, keep_alive=keep_alive)

    async def seen(text: str) -> None:
        pass

    await llm.chat(CONVERSATION, model=FAKE_MODEL)
    await llm.chat(CONVERSATION, model=FAKE_MODEL, json_schema={"type": "object"})
    await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    bodies = [r.body for r in llm_server.chats]
    assert [b["keep_alive"] for b in bodies if b] == [sent] * 3
    assert [b["options"]["num_ctx"] for b in bodies if b] == [8192] * 3
    assert all("prompt_cache_key" not in b and "cache_prompt" not in b for b in bodies if b)


async def test_an_openai_compatible_server_gets_the_conversation_key_and_llama_cpp_cache_prompt(
    http, llm_server: FakeLLMServer
) -> None:
    llm = client(http, "openai", llm_server.url, keep_alive="30m")
    await llm.chat(CONVERSATION, model=FAKE_MODEL, cache_key="echo-abc")
    llm_server.props_context = 2048
    await llm.describe(FAKE_MODEL)
    await llm.chat(CONVERSATION, model=FAKE_MODEL, cache_key="echo-abc")
    await llm.chat(CONVERSATION, model=FAKE_MODEL)
    first, second, third = (r.body or {} for r in llm_server.chats)
    assert first["prompt_cache_key"] == "echo-abc" and "cache_prompt" not in first, "not llama.cpp: not told"
    # A router reads it from a header (LiteLLM's session affinity: x-<vendor>-session-id).
    assert [r.headers.get("x-echo-session-id") for r in llm_server.chats] == ["echo-abc", "echo-abc", None]
    assert second["prompt_cache_key"] == "echo-abc" and second["cache_prompt"] is True
    assert "prompt_cache_key" not in third
    assert all("keep_alive" not in b and "options" not in b for b in (first, second, third))
