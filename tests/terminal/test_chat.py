"""End to end through the terminal chat: scripted LLM on 127.0.0.1, real SQLite, real embedder.

A fact told in turn 1 is in the selection of turn 6 with its reason; a correction replaces it
and /history still shows the old text; another user never sees it.
"""

from __future__ import annotations

import io
import json
import re

import pytest

from bot.app import open_services
from bot.config import load_settings
from bot.memory.stores.memory_store import MemoryStore
from bot.terminal.chat import run_chat, session_for
from tests.fakes.llm_server import FAKE_MODEL, LLMRequest

ALLERGY = "L'utilisateur est allergique aux arachides."
CASHEW = "L'utilisateur est allergique aux noix de cajou."


def reflection_for(request: LLMRequest) -> str:
    """The scripted reflection: answers from what the exchange says, like a real model would."""
    prompt = request.last_user
    exchange = prompt.split("The exchange:", 1)[1]
    if "allergique aux arachides" in exchange and "En fait" not in exchange:
        return json.dumps(
            {
                "memories": [
                    {"text": "L'utilisateur s'appelle Camille.", "type": "fact", "confidence": 0.95},
                    {"text": ALLERGY, "type": "fact", "scope": "global", "confidence": 0.97},
                ]
            }
        )
    if "En fait" in exchange:
        shown = re.search(r"\[(\d+)\] \(fact\) " + re.escape(ALLERGY), prompt)
        assert shown, "the allergy memory must be shown to the reflection with its id"
        return json.dumps({"replace": [{"id": int(shown.group(1)), "text": CASHEW}]})
    return json.dumps({"memories": []})


def handler(request: LLMRequest) -> str:
    if request.json_schema is not None:
        return reflection_for(request)
    return f"(réponse à : {request.last_user[-60:]})"


@pytest.fixture
def settings(tmp_path, llm_server):
    llm_server.handler = handler
    return load_settings(
        _env_file=None,
        llm_base_url=llm_server.url,
        llm_model=FAKE_MODEL,
        database_path=tmp_path / "echo.sqlite3",
        embeddings="local",
    )


async def chat(services, user: str, lines: list[str]) -> str:
    out = io.StringIO()
    await run_chat(
        services.engine,
        user=user,
        stdin=io.StringIO("\n".join(lines) + "\n"),
        stdout=out,
        interactive=False,
    )
    return out.getvalue()


async def test_a_fact_told_in_turn_one_is_recalled_in_turn_six_then_corrected(settings, llm_server):
    async with open_services(settings) as services:
        await chat(
            services,
            "Camille",
            [
                "Bonjour ! Je m'appelle Camille et je suis allergique aux arachides.",
                "Il fait beau à Nantes aujourd'hui.",
                "Tu as vu le match hier soir ?",
                "Je pense repeindre mon salon en vert.",
                "Mon chat dort sur le clavier, comme d'habitude.",
            ],
        )
        # Piped chat indexes after each reflection: turn 6 has cosine scores without waiting 45 s.
        out = await chat(services, "Camille", ["Quel dessert sans risque pour mes allergies ce soir ?", "/why"])
        why = out.split("Écho:", 2)[-1]
        # Ranked first, chosen by the global pass (all memories here are global) on its score:
        # the first line under "About you in general", with its closeness in percent.
        lines = why.splitlines()
        group = next(i for i, line in enumerate(lines) if line.startswith("About you in general"))
        first = lines[group + 1]
        assert ALLERGY in first and re.search(r"\] \d{1,2}% — ", first), first
        turn = await services.engine.memories.why("terminal:Camille", "terminal:main")
        slot = next(s for s in turn.slots if s.text == ALLERGY)
        assert slot.reason == "global" and slot.score is not None and not turn.degraded

        # Every reply call went out before its reflection (the reply never waits for memory).
        kinds = ["reflection" if r.json_schema else "reply" for r in llm_server.chats]
        assert kinds[:2] == ["reply", "reflection"]

        out = await chat(
            services,
            "Camille",
            ["En fait je ne suis pas allergique aux arachides, c'est aux noix de cajou.", "/memories", "/history"],
        )
        assert CASHEW in out
        memories_block = out.split("Memories 1–", 1)[1].split("Archived versions", 1)[0]
        assert ALLERGY not in memories_block
        assert "replace" in out and f"was “{ALLERGY}”" in out

        bob = await chat(services, "Bob", ["/memories", "Salut, tu te souviens de moi ?", "/why"])
        assert "No memories yet." in bob and "arachides" not in bob and "cajou" not in bob
        camille_ids = {m.id for m in await MemoryStore(services.db).list(session_for("Camille", "main").user_id)}
        bob_turn = await services.engine.memories.why(
            session_for("Bob", "main").user_id, session_for("Bob", "main").story_id
        )
        assert bob_turn is not None and not ({s.id for s in bob_turn.slots} & camille_ids)
        # Bob's reply context never carried Camille's memories either.
        bob_reply = [r for r in llm_server.chats if r.json_schema is None and "Bob:" in r.last_user][-1]
        assert "cajou" not in bob_reply.context and "arachides" not in bob_reply.context


async def test_pending_reflection_survives_a_restart(settings, llm_server):
    """An exchange answered but not reflected (LLM gone mid-way) is reflected after a restart."""
    from tests.fakes.llm_server import Reply

    async def down_for_reflections(request: LLMRequest):
        if request.json_schema is not None:
            return Reply(status=503, error="overloaded")
        return handler(request)

    llm_server.handler = down_for_reflections
    async with open_services(settings) as services:
        await chat(services, "Camille", ["Bonjour ! Je m'appelle Camille et je suis allergique aux arachides."])
        assert await MemoryStore(services.db).list("terminal:Camille") == []
        assert (await services.engine.memories.stats("terminal:Camille")).pending_reflections == 1

    llm_server.handler = handler
    async with open_services(settings) as services:
        await services.engine.operator.wait_reflections("terminal:Camille")
        texts = [m.text for m in await MemoryStore(services.db).list("terminal:Camille")]
        assert ALLERGY in texts
        assert (await services.engine.memories.stats("terminal:Camille")).pending_reflections == 0
