"""Streamed answers from both APIs over real HTTP: text as it grows, usage, cuts, bounds."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import tracemalloc
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from bot.clients.llm import MAX_THINKING_CHARS, LLMClient
from bot.clients.llm_server import MAX_RESPONSE_BYTES
from bot.clients.llm_wire import Image, TokenUsage
from bot.errors import LLMBadResponse, LLMStreamCut, LLMTimeout, LLMTooLarge, ModelNotFound
from tests.builders import http_client
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, Reply

APIS = ["ollama", "openai"]
CONVERSATION = [
    {"role": "system", "content": "Tu es Écho."},
    {"role": "user", "content": "Salut, je m'appelle Léa."},
]


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with http_client() as client:
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
    assert seen.texts == [
        "Bonjour",
        "Bonjour Léa,",
        "Bonjour Léa, comment",
        "Bonjour Léa, comment vas-tu",
        "Bonjour Léa, comment vas-tu ?",
    ]
    assert result.usage == TokenUsage(prompt_tokens=7, completion_tokens=5)
    assert result.stop_reason == "stop"
    body = llm_server.chats[0].body
    assert body is not None and body["stream"] is True
    if api == "openai":
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("api", APIS)
async def test_thinking_is_never_shown_while_streaming(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append(Reply("<think> elle a l'air triste </think> Ça va ?"))
    seen = Seen()
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    result = await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    assert result.text == "Ça va ?"
    assert seen.texts and all("triste" not in t and "think" not in t for t in seen.texts)


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_that_dies_midway_keeps_what_arrived(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append(Reply("un deux trois quatre cinq", die_after=3))
    seen = Seen()
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    with pytest.raises(LLMStreamCut) as cut:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    assert cut.value.partial == "un deux trois"
    assert isinstance(cut.value.cause, LLMBadResponse)
    assert seen.texts[-1] == "un deux trois"


@pytest.mark.parametrize("api", APIS)
async def test_an_error_event_midway_is_a_cut_with_the_servers_words(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append(Reply("un deux", stream_error="out of memory"))
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    with pytest.raises(LLMStreamCut) as cut:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    assert cut.value.partial == "un deux"
    assert "out of memory" in str(cut.value)


@pytest.mark.parametrize("api", APIS)
async def test_a_slow_stream_times_out_with_its_partial_text(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append(Reply("a b c d e f g h", pace=0.2))
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    with pytest.raises(LLMStreamCut) as cut:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen(), timeout=0.5)
    assert isinstance(cut.value.cause, LLMTimeout)
    assert cut.value.partial.startswith("a b")


@pytest.mark.parametrize("api", APIS)
async def test_failures_before_any_text_are_the_usual_errors(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
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
    messages = [
        *CONVERSATION[:1],
        {"role": "user", "content": "Regarde.", "images": [Image("chat.png", "image/png", png)]},
    ]
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


# -- what the protocol says, not a general line splitter (issue 22, items 7, 8, 10) ----------


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085", "\x1c", "\x0b"])
async def test_a_unicode_line_separator_in_the_answer_is_text_not_the_end_of_an_event(
    api: str, separator: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    # Sent unescaped (legal in JSON for the first three; the last two arrive escaped, as JSON
    # requires, and must be read alike).
    answer = f"Première ligne.{separator}Seconde ligne,{separator}et la fin."
    llm_server.replies.append(Reply(answer))
    seen = Seen()
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    result = await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=seen)
    assert result.text == answer and result.stop_reason == "stop"
    assert seen.texts[-1] == answer


@pytest.mark.parametrize("api", APIS)
async def test_an_endless_line_fails_once_past_the_bound_holding_no_more_than_it(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    endless = 40 * MAX_RESPONSE_BYTES
    llm_server.replies.append(Reply(endless_line=endless))
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        with pytest.raises(LLMTooLarge, match="more than 2 MB for one answer"):
            await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen(), timeout=30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What the bot held: the bound and a read's worth, not what the sender kept sending.
    assert peak < 2 * MAX_RESPONSE_BYTES, f"{peak:,} bytes held for a line of {endless:,}"
    await asyncio.sleep(0.2)
    assert llm_server.endless_sent < endless / 4, "the bot kept reading past the bound"


@pytest.mark.parametrize("api", APIS)
async def test_a_runaway_reasoning_is_cut_at_its_own_bound_with_the_usual_errors(
    api: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    word = "x" * 200
    over = MAX_THINKING_CHARS // 200 + 50
    assert over * 300 < MAX_RESPONSE_BYTES  # this stream stays under the byte cap
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    # Nothing shown yet: the call fails like any oversized answer.
    llm_server.replies.append(Reply("<think>" + f" {word}" * over))
    with pytest.raises(LLMTooLarge, match="reasoned for more than"):
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    # After some answer: a cut that keeps it, as for any stream broken halfway.
    llm_server.replies.append(Reply("Je commence à répondre <think>" + f" {word}" * over))
    with pytest.raises(LLMStreamCut) as cut:
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    assert cut.value.partial == "Je commence à répondre"
    assert isinstance(cut.value.cause, LLMTooLarge)
    # Reasoning in a field of its own counts the same.
    llm_server.replies.append(Reply("Réponse.", thinking=f" {word}" * over))
    with pytest.raises(LLMTooLarge, match="reasoned for more than"):
        await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    llm_server.replies.append(Reply("Réponse.", thinking=f" {word}" * 100))
    assert (await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())).text == "Réponse."
    # A long reasoning under the bound is read to its end.
    llm_server.replies.append(Reply("<think>" + f" {word}" * 100 + "</think> Voilà."))
    assert (await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())).text == "Voilà."


async def test_the_work_per_piece_of_a_hidden_stream_does_not_grow_with_the_stream(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    """Four times the pieces cost about four times the time, not sixteen: each piece is read
    once, not the whole stream again at every piece."""
    llm = LLMClient(http, api="ollama", base_url=llm_server.url)
    word = "y" * 50  # 4,000 pieces stay under MAX_THINKING_CHARS

    async def seconds(pieces: int) -> float:
        llm_server.replies.append(Reply("<think>" + f" {word}" * pieces + "</think> Fin."))
        started = time.process_time()
        assert (await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())).text == "Fin."
        return time.process_time() - started

    await seconds(200)  # warm-up
    small = min([await seconds(1_000) for _ in range(2)])
    large = min([await seconds(4_000) for _ in range(2)])
    assert large / small < 7, f"1,000 pieces: {small:.3f} s, 4,000 pieces: {large:.3f} s"


# NDJSON (Ollama) ends a line with LF, and a server may send CRLF; SSE (OpenAI) allows CR alone too.
@pytest.mark.parametrize(
    ("api", "ending"), [("ollama", "\n"), ("ollama", "\r\n"), ("openai", "\n"), ("openai", "\r\n"), ("openai", "\r")]
)
async def test_lines_end_as_the_protocol_says_wherever_the_reads_cut_them(
    api: str, ending: str, http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    words = ["Voilà", " l’été", "\u2028à", " Zürich", "\u0085—", " fin."]
    if api == "ollama":
        events = [json.dumps({"message": {"content": w}, "done": False}, ensure_ascii=False) for w in words]
        events.append(json.dumps({"message": {"content": ""}, "done": True, "done_reason": "stop"}))
        body = "".join(e + ending for e in events)
    else:
        events = [
            json.dumps({"choices": [{"delta": {"content": w}, "finish_reason": None}]}, ensure_ascii=False)
            for w in words
        ]
        events.append(json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]}))
        body = (
            "".join(f": keep-alive{ending}data: {e}{ending}{ending}" for e in events) + f"data: [DONE]{ending}{ending}"
        )
    # Sent in ten reads of equal bytes: lines, CRLF pairs and UTF-8 characters cut anywhere.
    llm_server.replies.append(Reply(body=body.encode(), content_type="text/event-stream", trickle=0.01))
    llm = LLMClient(http, api=api, base_url=llm_server.url)  # type: ignore[arg-type]
    result = await llm.stream(CONVERSATION, model=FAKE_MODEL, on_text=Seen())
    assert result.text == "".join(words) and result.stop_reason == "stop"
