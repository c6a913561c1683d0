"""The chat client against the scripted server, over real HTTP on 127.0.0.1, for both APIs."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.clients.llm import LLMClient
from bot.clients.llm_server import MAX_RESPONSE_BYTES
from bot.clients.llm_wire import SCHEMA_NAME, Thinking, strip_thinking
from bot.errors import LLMBadResponse, LLMTimeout, LLMTooLarge, LLMUnavailable, ModelNotFound
from tests.builders import http_client
from tests.fakes.llm_server import FAKE_MODEL, FakeLLMServer, LLMRequest, Reply
from tests.lanes import examples

APIS = ["ollama", "openai"]
CHAT_PATH = {"ollama": "/api/chat", "openai": "/v1/chat/completions"}
SCHEMA = {
    "type": "object",
    "properties": {"memories": {"type": "array", "items": {"type": "string"}}},
    "required": ["memories"],
}
CONVERSATION = [
    {"role": "system", "content": "Tu es Écho."},
    {"role": "user", "content": "Salut, je m'appelle Léa."},
]


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # trust_env=False: a proxy from the environment must not capture 127.0.0.1 traffic.
    async with http_client() as client:
        yield client


def client(http: httpx.AsyncClient, api: str, url: str, **kwargs: object) -> LLMClient:
    return LLMClient(http, api=api, base_url=url, **kwargs)  # type: ignore[arg-type]


async def ask(llm: LLMClient, **kwargs: object) -> str:
    return (await llm.chat(CONVERSATION, model=FAKE_MODEL, **kwargs)).text  # type: ignore[arg-type]


# -- successful calls ----------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_prose_reply_is_returned_and_request_is_in_the_api_format(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append("Enchanté, Léa !")

    text = await ask(client(http, api, llm_server.url))

    assert text == "Enchanté, Léa !"
    [request] = llm_server.requests
    assert (request.method, request.path, request.model) == ("POST", CHAT_PATH[api], FAKE_MODEL)
    assert request.messages == CONVERSATION
    assert request.body is not None and request.body["stream"] is False
    assert request.json_schema is None
    assert "format" not in request.body and "response_format" not in request.body


@pytest.mark.parametrize("api", APIS)
async def test_a_gzip_compressed_answer_is_read(http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str) -> None:
    # A proxy in front of the server may compress; the size-bounded read must decode it once.
    llm_server.replies.append(Reply("Enchanté, Léa ! " * 200, gzip=True))
    assert await ask(client(http, api, llm_server.url)) == ("Enchanté, Léa ! " * 200).strip()


@pytest.mark.parametrize("api", APIS)
async def test_an_answer_past_the_size_cap_is_dropped_while_it_streams(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply("x" * (MAX_RESPONSE_BYTES + 1)))
    with pytest.raises(LLMTooLarge, match=f"more than {MAX_RESPONSE_BYTES // 1_000_000} MB"):
        await ask(client(http, api, llm_server.url))


async def test_ollama_structured_request_carries_the_schema_in_format(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append('{"memories": ["Léa"]}')

    reply = await client(http, "ollama", llm_server.url).chat(CONVERSATION, model=FAKE_MODEL, json_schema=SCHEMA)

    assert json.loads(reply.text) == {"memories": ["Léa"]}
    body = llm_server.requests[0].body
    assert body is not None and body["format"] == SCHEMA
    assert "response_format" not in body


async def test_openai_structured_request_carries_the_schema_in_response_format(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append('{"memories": ["Léa"]}')

    reply = await client(http, "openai", llm_server.url).chat(CONVERSATION, model=FAKE_MODEL, json_schema=SCHEMA)

    assert json.loads(reply.text) == {"memories": ["Léa"]}
    body = llm_server.requests[0].body
    assert body is not None and body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "schema": SCHEMA, "strict": False},
    }
    assert "format" not in body


@pytest.mark.parametrize("api", APIS)
async def test_handler_answers_chat_with_prose_and_reflection_with_json(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    def answer(request: LLMRequest) -> str:
        return '{"memories": []}' if request.json_schema is not None else "Bonjour !"

    llm_server.handler = answer
    llm = client(http, api, llm_server.url)

    assert (await llm.chat(CONVERSATION, model=FAKE_MODEL)).text == "Bonjour !"
    assert (await llm.chat(CONVERSATION, model=FAKE_MODEL, json_schema=SCHEMA)).text == '{"memories": []}'
    assert [r.json_schema for r in llm_server.chats] == [None, SCHEMA]


async def test_ollama_temperature_goes_in_options(http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    llm = client(http, "ollama", llm_server.url)
    await llm.chat(CONVERSATION, model=FAKE_MODEL, temperature=0.2)
    await llm.chat(CONVERSATION, model=FAKE_MODEL)

    with_temperature, without = (r.body or {} for r in llm_server.chats)
    assert with_temperature["options"] == {"temperature": 0.2}
    assert "options" not in without and "temperature" not in without


async def test_openai_temperature_is_a_top_level_field(http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    llm = client(http, "openai", llm_server.url)
    await llm.chat(CONVERSATION, model=FAKE_MODEL, temperature=0.2)
    await llm.chat(CONVERSATION, model=FAKE_MODEL)

    with_temperature, without = (r.body or {} for r in llm_server.chats)
    assert with_temperature["temperature"] == 0.2
    assert "temperature" not in without


@pytest.mark.parametrize("api", APIS)
async def test_api_key_is_sent_as_bearer_token(http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str) -> None:
    await ask(client(http, api, llm_server.url, api_key="sk-test-123"))

    assert llm_server.requests[0].headers["authorization"] == "Bearer sk-test-123"


@pytest.mark.parametrize("api", APIS)
async def test_no_authorization_header_without_api_key(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    await ask(client(http, api, llm_server.url))

    assert "authorization" not in llm_server.requests[0].headers


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_openai_base_url_with_or_without_v1_reaches_chat_completions(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, suffix: str
) -> None:
    text = await ask(client(http, "openai", llm_server.url + suffix))

    assert text == "echo: Salut, je m'appelle Léa."
    assert llm_server.requests[0].path == "/v1/chat/completions"


@pytest.mark.parametrize("api", APIS)
async def test_slow_server_is_waited_for_within_the_timeout(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply("Enfin.", delay=0.3))

    assert await ask(client(http, api, llm_server.url), timeout=10) == "Enfin."


# -- thinking ------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_think_block_is_stripped_from_the_reply(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append("<think>\nElle se présente.\n</think>\n\nEnchanté, Léa !")

    assert await ask(client(http, api, llm_server.url)) == "Enchanté, Léa !"


@pytest.mark.parametrize("api", APIS)
async def test_separate_thinking_field_never_reaches_the_reply(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply("Enchanté, Léa !", thinking="L'utilisatrice se présente."))

    assert await ask(client(http, api, llm_server.url)) == "Enchanté, Léa !"


@pytest.mark.parametrize("api", APIS)
async def test_reply_made_only_of_thinking_is_a_bad_response(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append("<think>Je réfléchis encore")

    with pytest.raises(LLMBadResponse, match="empty reply"):
        await ask(client(http, api, llm_server.url))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("<think>a</think>Réponse", "Réponse"),
        ("<THINK>a</THINK> Réponse ", "Réponse"),
        ("<think>a</think>Un<think>b</think> deux", "Un deux"),
        # The template opened the block in the prompt: only its end is in the reply.
        ("raisonnement\n</think>\nRéponse", "Réponse"),
        # Cut while thinking: the unfinished block is not part of the answer.
        ("Réponse <think>et puis", "Réponse"),
        ("Pas de balise, 2 < 3 > 1", "Pas de balise, 2 < 3 > 1"),
    ],
)
def test_strip_thinking(raw: str, expected: str) -> None:
    assert strip_thinking(raw) == expected


def _whole_text_reference(text: str) -> str:
    """What the answer is, read on the whole text at once (the rule `Thinking` keeps). A block
    taken out joins what stood around it, which may form a block again ("<thi" + "nk>"): taken
    out until none is left."""
    block = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
    while (found := block.search(text)) is not None:
        text = text[: found.start()] + text[found.end() :]
    closes = list(re.finditer(r"</think>", text, re.IGNORECASE))
    if closes:
        text = text[closes[-1].end() :]
    opened = re.search(r"<think>", text, re.IGNORECASE)
    return (text[: opened.start()] if opened else text).strip()


@settings(max_examples=examples(400), deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["<think>", "</think>", "<THINK>", "</Think>", "<", ">", "</", "<thi", "nk>", "a", " ", "é\n", "2 < 3"]
        ),
        max_size=14,
    ),
    st.data(),
)
def test_reading_piece_by_piece_gives_the_answer_the_whole_text_gives(tokens: list[str], data: st.DataObject) -> None:
    text = "".join(tokens)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    thinking = Thinking()
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        thinking.feed(text[start:end])
        assert "<think>" not in thinking.answer().lower()
    assert thinking.answer(final=True) == _whole_text_reference(text)
    assert strip_thinking(text) == _whole_text_reference(text)


# -- failures ------------------------------------------------------------------------------


async def test_refused_connection_to_ollama_names_the_url_and_ollama_serve(
    http: httpx.AsyncClient, refused_url: str
) -> None:
    with pytest.raises(LLMUnavailable) as caught:
        await client(http, "ollama", refused_url).chat(CONVERSATION, model=FAKE_MODEL)

    message = str(caught.value)
    assert refused_url in message
    assert "connection refused" in message
    assert "`ollama serve`" in message
    assert "LLM_BASE_URL" in message
    assert "\n" not in message


async def test_refused_connection_to_openai_names_the_url_without_ollama_advice(
    http: httpx.AsyncClient, refused_url: str
) -> None:
    with pytest.raises(LLMUnavailable) as caught:
        await client(http, "openai", refused_url).chat(CONVERSATION, model=FAKE_MODEL)

    message = str(caught.value)
    assert refused_url in message
    assert "ollama" not in message.lower()


async def test_unknown_model_on_ollama_says_ollama_pull(http: httpx.AsyncClient, llm_server: FakeLLMServer) -> None:
    with pytest.raises(ModelNotFound) as caught:
        await client(http, "ollama", llm_server.url).chat(CONVERSATION, model="mistral-nemo")

    assert caught.value.model == "mistral-nemo"
    assert "`ollama pull mistral-nemo`" in str(caught.value)


async def test_unknown_model_on_openai_names_the_model_and_what_it_must_be(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    with pytest.raises(ModelNotFound) as caught:
        await client(http, "openai", llm_server.url).chat(CONVERSATION, model="gpt-nope")

    message = str(caught.value)
    # The client does not know which setting names the model: whoever catches it says (bot/doctor/models.py).
    assert "gpt-nope" in message and "model ids this server offers" in message
    assert "ollama pull" not in message


async def test_unknown_model_in_ollamas_openai_compatible_format_is_model_not_found(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    # Ollama's /v1 layer: 404 with a null error code and the reason only in the message.
    error = {
        "message": 'model "qwen3" not found, try pulling it first',
        "type": "api_error",
        "param": None,
        "code": None,
    }
    llm_server.replies.append(Reply(status=404, body=json.dumps({"error": error})))

    with pytest.raises(ModelNotFound):
        await client(http, "openai", llm_server.url).chat(CONVERSATION, model=FAKE_MODEL)


@pytest.mark.parametrize("api", APIS)
async def test_bare_404_is_a_bad_response_not_a_missing_model(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply(status=404, body="404 page not found", content_type="text/plain"))

    with pytest.raises(LLMBadResponse) as caught:
        await ask(client(http, api, llm_server.url))

    assert caught.value.status == 404
    assert "LLM_BASE_URL" in str(caught.value)


@pytest.mark.parametrize("api", APIS)
async def test_hanging_server_raises_timeout(http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str) -> None:
    llm_server.replies.append(Reply(hang=True))

    with pytest.raises(LLMTimeout) as caught:
        await client(http, api, llm_server.url).chat(CONVERSATION, model=FAKE_MODEL, timeout=0.3)

    assert llm_server.url in str(caught.value)


@pytest.mark.parametrize("api", APIS)
async def test_answer_trickling_past_the_timeout_raises_timeout(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    # Each piece arrives well within the timeout; only the whole answer is too slow.
    llm_server.replies.append(Reply("Une réponse qui arrive au compte-gouttes.", trickle=0.1))

    with pytest.raises(LLMTimeout):
        await client(http, api, llm_server.url).chat(CONVERSATION, model=FAKE_MODEL, timeout=0.35)


async def test_client_timeout_applies_when_the_call_gives_none(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.replies.append(Reply(hang=True))

    with pytest.raises(LLMTimeout):
        await ask(client(http, "ollama", llm_server.url, timeout=0.3))


@pytest.mark.parametrize("api", APIS)
async def test_http_500_is_a_bad_response_quoting_the_server(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply(status=500, error="model requires more system memory"))

    with pytest.raises(LLMBadResponse) as caught:
        await ask(client(http, api, llm_server.url))

    assert caught.value.status == 500
    assert "model requires more system memory" in str(caught.value)


@pytest.mark.parametrize("api", APIS)
async def test_non_json_body_is_a_bad_response(http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str) -> None:
    llm_server.replies.append(Reply(body='{"message": {"content": "Bonj'))

    with pytest.raises(LLMBadResponse, match="not a JSON object"):
        await ask(client(http, api, llm_server.url))


@pytest.mark.parametrize("api", APIS)
async def test_json_without_the_reply_text_is_a_bad_response(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply(body='{"done": true}'))

    with pytest.raises(LLMBadResponse, match="without a text"):
        await ask(client(http, api, llm_server.url))


@pytest.mark.parametrize("api", APIS)
async def test_body_cut_mid_transfer_is_a_bad_response(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply("Une réponse assez longue à couper.", truncated=True))

    with pytest.raises(LLMBadResponse, match="broke before a complete answer"):
        await ask(client(http, api, llm_server.url))


@pytest.mark.parametrize("api", APIS)
async def test_json_cut_at_the_token_limit_is_a_bad_response(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply('{"memories": ["Lé', finish="length"))

    with pytest.raises(LLMBadResponse, match="token limit"):
        await ask(client(http, api, llm_server.url), json_schema=SCHEMA)


@pytest.mark.parametrize("api", APIS)
async def test_prose_cut_at_the_token_limit_is_still_returned(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply("Il était une fois", finish="length"))

    assert await ask(client(http, api, llm_server.url)) == "Il était une fois"


@pytest.mark.parametrize("api", APIS)
async def test_api_key_echoed_by_the_server_is_masked(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, api: str
) -> None:
    llm_server.replies.append(Reply(status=401, error="invalid key sk-very-secret"))

    with pytest.raises(LLMBadResponse) as caught:
        await ask(client(http, api, llm_server.url, api_key="sk-very-secret"))

    assert "sk-very-secret" not in str(caught.value)
    assert "LLM_API_KEY" in str(caught.value)


async def test_credentials_in_the_base_url_are_not_shown(http: httpx.AsyncClient, refused_url: str) -> None:
    with_credentials = refused_url.replace("http://", "http://admin:hunter2@")

    with pytest.raises(LLMUnavailable) as caught:
        await client(http, "openai", with_credentials).chat(CONVERSATION, model=FAKE_MODEL)

    assert "hunter2" not in str(caught.value)
    assert refused_url in str(caught.value)


# -- start-up check ------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama3.2", "llama3.2:latest", "qwen3:8b"])
async def test_ollama_check_accepts_a_listed_model_with_or_without_latest(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, model: str
) -> None:
    llm_server.models = ["llama3.2", "qwen3:8b"]

    await client(http, "ollama", llm_server.url).check(model)

    assert [(r.method, r.path) for r in llm_server.requests] == [("GET", "/api/tags")]


async def test_ollama_check_rejects_an_unlisted_model_saying_ollama_pull(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    llm_server.models = ["llama3.2", "qwen3:8b"]

    with pytest.raises(ModelNotFound) as caught:
        await client(http, "ollama", llm_server.url).check("qwen3:14b")

    message = str(caught.value)
    assert "`ollama pull qwen3:14b`" in message
    assert "qwen3:8b" in message  # what is installed, to pick from


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/"])
async def test_openai_check_accepts_a_listed_model_with_base_url_with_or_without_v1(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, suffix: str
) -> None:
    llm_server.models = ["gpt-4o-mini", "gpt-4o"]

    await client(http, "openai", llm_server.url + suffix).check("gpt-4o")

    assert [(r.method, r.path) for r in llm_server.requests] == [("GET", "/v1/models")]


@pytest.mark.parametrize("suffix", ["", "/v1"])
async def test_openai_check_rejects_an_unlisted_model(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, suffix: str
) -> None:
    llm_server.models = ["gpt-4o-mini"]

    with pytest.raises(ModelNotFound) as caught:
        await client(http, "openai", llm_server.url + suffix).check("gpt-5")

    assert "model ids this server offers" in str(caught.value)


async def test_openai_check_without_models_endpoint_only_warns(
    http: httpx.AsyncClient, llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    llm_server.models_endpoint = False

    with caplog.at_level(logging.WARNING, logger="bot.clients.llm"):
        await client(http, "openai", llm_server.url).check("whatever-model")

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("/v1/models" in w for w in warnings)


@pytest.mark.parametrize("api", APIS)
async def test_check_on_a_refused_port_is_unavailable(http: httpx.AsyncClient, refused_url: str, api: str) -> None:
    with pytest.raises(LLMUnavailable, match=re.escape(refused_url)):
        await client(http, api, refused_url).check(FAKE_MODEL)


async def test_ollama_check_on_a_non_ollama_server_is_a_bad_response(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    # An OpenAI-only server has no /api/tags: the base URL or the api setting is wrong.
    with pytest.raises(LLMBadResponse):
        await client(http, "ollama", llm_server.url + "/v1").check(FAKE_MODEL)


async def test_ollama_calls_ask_for_the_configured_context_and_openai_calls_do_not(
    http: httpx.AsyncClient, llm_server: FakeLLMServer
) -> None:
    ollama = LLMClient(http, api="ollama", base_url=llm_server.url, context_tokens=8192)
    await ollama.chat([{"role": "user", "content": "salut"}], model=FAKE_MODEL, temperature=0.2)
    assert llm_server.chats[-1].body["options"] == {"temperature": 0.2, "num_ctx": 8192}
    openai = LLMClient(http, api="openai", base_url=llm_server.url, context_tokens=8192)
    await openai.chat([{"role": "user", "content": "salut"}], model=FAKE_MODEL)
    assert "options" not in llm_server.chats[-1].body and "num_ctx" not in str(llm_server.chats[-1].body)
