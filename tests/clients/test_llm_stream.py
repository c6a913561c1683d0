"""Streamed answers from both APIs over real HTTP: text as it grows, usage, cuts, bounds."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from bot.clients.llm import LLMClient
from bot.clients.llm_wire import Image, TokenUsage
from bot.errors import LLMBadResponse, LLMStreamCut, LLMTimeout, ModelNotFound
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, Reply

APIS = ["ollama", "openai"]
CONVERSATION = [
    {"role": "system", "content": "Tu es Écho."},
    {"role": "user", "content": "Salut, je m'appelle Léa."},
]


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


class Seen:
    def __init__(self) -> None:
        self.texts: list[str] = []

    async def __call__(self, text: str) -> None:
        self.texts.append(text)


@pytest.mark.parametrize("api", APIS)
async def test_text_grows_word_by_word_and_usage_comes_from_the_last_event(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append(Reply("Bonjour Léa, comment vas-tu ?"))
    seen = Seen()
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    result = await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    assert result.text == "Bonjour Léa, comment vas-tu ?"
    assert seen.texts == ["Bonjour", "Bonjour Léa,", "Bonjour Léa, comment", "Bonjour Léa, comment vas-tu", "Bonjour Léa, comment vas-tu ?"]
    assert result.usage == TokenUsage(prompt_tokens=7, completion_tokens=5)
    assert result.stop_reason == "stop"
    body = llm_server.chats[0].body
    assert body is not None and body["stream"] is True
    if api == "openai":
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("api", APIS)
async def test_thinking_is_never_shown_while_streaming(api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    llm_server.replies.append(Reply("<think> elle a l'air triste </think> Ça va ?"))
    seen = Seen()
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    result = await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    assert result.text == "Ça va ?"
    assert seen.texts and all("triste" not in t and "think" not in t for t in seen.texts)


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_that_dies_midway_keeps_what_arrived(api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    llm_server.replies.append(Reply("un deux trois quatre cinq", die_after=3))
    seen = Seen()
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    with pytest.raises(LLMStreamCut) as cut:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    assert cut.value.partial == "un deux trois"
    assert isinstance(cut.value.cause, LLMBadResponse)
    assert seen.texts[-1] == "un deux trois"


@pytest.mark.parametrize("api", APIS)
async def test_an_error_event_midway_is_a_cut_with_the_servers_words(api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    llm_server.replies.append(Reply("un deux", stream_error="out of memory"))
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    with pytest.raises(LLMStreamCut) as cut:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    assert cut.value.partial == "un deux"
    assert "out of memory" in str(cut.value)


@pytest.mark.parametrize("api", APIS)
async def test_a_slow_stream_times_out_with_its_partial_text(api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    llm_server.replies.append(Reply("a b c d e f g h", pace=0.2))
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    with pytest.raises(LLMStreamCut) as cut:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen(), timeout=0.5)
    assert isinstance(cut.value.cause, LLMTimeout)
    assert cut.value.partial.startswith("a b")


@pytest.mark.parametrize("api", APIS)
async def test_failures_before_any_text_are_the_usual_errors(api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    with pytest.raises(ModelNotFound):
        await llm.stream(CONVERSATION, model="missing-model", on_text=Seen())
    llm_server.replies.append(Reply(status=500, error="boom"))
    with pytest.raises(LLMBadResponse) as failed:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    assert failed.value.status == 500 and "boom" in str(failed.value)
    llm_server.replies.append(Reply("x y", die_after=0))
    with pytest.raises(LLMBadResponse) as empty:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    assert not isinstance(empty.value, LLMStreamCut)


@pytest.mark.parametrize("api", APIS)
async def test_images_go_in_each_apis_shape(api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    messages = [*CONVERSATION[:1], {"role": "user", "content": "Regarde.", "images": [Image("chat.png", "image/png", png)]}]
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    await llm.chat(messages, model=FAKE_MODEL)
    sent = llm_server.chats[0].messages[-1]
    encoded = base64.b64encode(png).decode()
    if api == "ollama":
        assert sent == {"role": "user", "content": "Regarde.", "images": [encoded]}
    else:
        assert sent == {
            "role": "user",
            "content": [
                {"type": "text", "text": "Regarde."},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}},
            ],
        }
