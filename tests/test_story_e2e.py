"""Story summary, anchors, positions and bounded state through the engine and a scripted
reflection server on 127.0.0.1 (docs/design.md, "Loops")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest_asyncio

from bot.engine import Engine, Incoming
from bot.memory.stores.stories import load_story, story_history
from bot.memory.story.state import parse_state_specs
from bot.presenting import history_text, why_text
from tests.builders import make_engine
from tests.fakes.llm_server import LLMRequest

USER = "camille"
STORY = "chan-7"
STANCE = "Le personnage pense que le rangement des livres par couleur est une idée charmante mais peu pratique."
# Quotes 53+ characters of the stance: the character's own line coming back as its proof.
SELF_CITING = "Comme je l'ai dit : le rangement des livres par couleur est une idée charmante mais peu pratique."
LEGITIMATE = "Camille dit qu'elle ne retrouve jamais ses livres de cuisine."


@pytest_asyncio.fixture
async def engine(tmp_path, db, http, llm_server, clock) -> AsyncIterator[Engine]:
    eng = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await eng.start()
    yield eng
    await eng.close()


def script(llm_server, reflection: dict) -> None:
    def handler(request: LLMRequest) -> str:
        return json.dumps(reflection) if request.json_schema is not None else "D'accord !"

    llm_server.handler = handler


async def turn(engine: Engine, text: str = "On continue ?") -> None:
    await engine.conversation.turn(
        Incoming(user_id=USER, user_name="Camille", text=text, story_id=STORY, place="guild-1")
    )
    engine.operator.schedule_reflection(USER)
    await engine.operator.wait_reflections(USER)


async def test_a_summary_that_drops_an_anchored_fact_leaves_the_anchor(db, engine, llm_server):
    script(
        llm_server,
        {
            "summary": "Camille prépare un voyage à Lisbonne avec sa sœur Inès.",
            "anchors": {"add": ["La sœur de Camille s'appelle Inès."]},
        },
    )
    await turn(engine, "Je pars à Lisbonne avec ma sœur Inès.")
    script(llm_server, {"summary": "Camille parle de ses valises."})
    await turn(engine, "Je fais mes valises.")
    story = await load_story(db, USER, STORY)
    assert story.summary == "Camille parle de ses valises."
    assert [a.text for a in story.anchors] == ["La sœur de Camille s'appelle Inès."]
    # The next reply's context shows the anchor above the new summary.
    await engine.conversation.turn(
        Incoming(user_id=USER, user_name="Camille", text="Tu te souviens ?", story_id=STORY, place="guild-1")
    )
    system = llm_server.chats[-1].context
    assert system.index("Inès") < system.index("valises")


async def test_anchor_removal_needs_a_reason_and_is_archived_with_it(db, engine, llm_server, store):
    script(llm_server, {"anchors": {"add": ["Camille habite à Nantes."]}})
    await turn(engine)
    [anchor] = (await load_story(db, USER, STORY)).anchors

    script(llm_server, {"anchors": {"remove": [{"id": anchor.id}]}})
    await turn(engine)
    assert [a.id for a in (await load_story(db, USER, STORY)).anchors] == [anchor.id]
    report = engine.operator.last_reflection(USER).story
    assert report is not None and report.anchors.refused

    reason = "Camille a déménagé à Lyon le mois dernier."
    script(llm_server, {"anchors": {"remove": [{"id": anchor.id, "reason": reason}]}})
    await turn(engine, "J'ai déménagé à Lyon le mois dernier.")
    assert (await load_story(db, USER, STORY)).anchors == []
    [removed] = [h for h in await story_history(db, USER, STORY) if h.operation == "anchor_removed"]
    assert removed.reason == reason and removed.payload["text"] == "Camille habite à Nantes."
    shown = history_text(await store.history(USER), await story_history(db, USER, None))
    assert "Camille habite à Nantes." in shown and reason in shown


async def test_a_self_citing_justification_does_not_refresh_the_date_a_legitimate_one_does(
    db, engine, llm_server, clock
):
    script(
        llm_server, {"positions": [{"subject": "rangement des livres", "stance": STANCE, "justification": LEGITIMATE}]}
    )
    await turn(engine)
    [first] = (await load_story(db, USER, STORY)).positions
    created = first.updated_at

    clock.advance(hours=5)
    script(
        llm_server, {"positions": [{"subject": "rangement des livres", "stance": STANCE, "justification": SELF_CITING}]}
    )
    await turn(engine)
    [looped] = (await load_story(db, USER, STORY)).positions
    assert looped.updated_at == created

    clock.advance(hours=5)
    script(
        llm_server,
        {
            "positions": [
                {
                    "subject": "rangement des livres",
                    "stance": STANCE,
                    "justification": "Camille a encore perdu un livre de recettes hier.",
                }
            ]
        },
    )
    await turn(engine)
    [refreshed] = (await load_story(db, USER, STORY)).positions
    assert refreshed.updated_at == clock.now


async def test_state_deltas_are_clamped_and_unknown_keys_ignored(db, engine, llm_server):
    script(llm_server, {"state": {"mood": 4, "trust": -3, "jealousy": 5}})
    await turn(engine, "Tu es la meilleure !")
    state = (await load_story(db, USER, STORY)).state
    specs = parse_state_specs(engine.character.state)
    assert state["mood"] == specs["mood"].default + specs["mood"].max_delta
    assert state["trust"] == max(specs["trust"].minimum, specs["trust"].default - specs["trust"].max_delta)
    assert "jealousy" not in state
    for _ in range(12):
        script(llm_server, {"state": {"mood": 1}})
        await turn(engine)
    assert (await load_story(db, USER, STORY)).state["mood"] == specs["mood"].maximum


async def test_why_lists_anchors_positions_and_state_of_the_last_turn(engine, llm_server):
    script(
        llm_server,
        {
            "anchors": {"add": ["Camille est allergique aux arachides."]},
            "positions": [{"subject": "rangement des livres", "stance": STANCE, "justification": LEGITIMATE}],
            "state": {"mood": 1},
        },
    )
    await turn(engine, "Je range mes livres par couleur.")
    await engine.conversation.turn(
        Incoming(user_id=USER, user_name="Camille", text="Et mes livres ?", story_id=STORY, place="guild-1")
    )
    text = why_text(await engine.memories.why(USER, STORY))
    assert "Camille est allergique aux arachides." in text
    assert "rangement des livres" in text
    assert "mood 1" in text
