"""A group scene: three people talk to the character in one channel. Each line of the context
names its speaker, a turn's memories are the speaker's only, and the reflection keeps what it
learns with the person who said it."""

from __future__ import annotations

import json

from bot.engine import Incoming
from bot.engine.prompting import ChannelLine
from tests.builders import http_client, make_engine
from tests.fakes.llm_server import LLMRequest

SCENE = [
    ("bob", "Bob", "I have a cat named Pixel."),
    ("carol", "Carol", "I work as a night nurse."),
    ("alice", "Alice", "Nice cat, Bob! I live in Lyon."),
]
# What a careless reflection proposes for each author: Alice's mixes in Bob's and Carol's facts.
PROPOSED = {
    "Bob": ["The user has a cat named Pixel."],
    "Carol": ["The user works as a night nurse."],
    "Alice": ["Bob has a cat named Pixel.", "The user lives in Lyon.", "Carol works as a night nurse."],
}


async def test_three_people_in_one_channel_each_keep_only_their_own_facts(db, llm_server, tmp_path, store):
    reflections: dict[str, LLMRequest] = {}

    def handler(request: LLMRequest) -> str:
        if request.json_schema is None:
            return "Noted."
        author = next(name for name in PROPOSED if f"ONE person: {name} (the author" in request.system)
        reflections[author] = request
        return json.dumps({"memories": [{"text": t, "type": "fact", "confidence": 0.95} for t in PROPOSED[author]]})

    llm_server.handler = handler
    async with http_client() as http:
        engine = make_engine(db, http, llm_server, tmp_path)
        await engine.start()
        history: list[ChannelLine] = []
        for user_id, name, said in SCENE:
            await engine.conversation.turn(
                Incoming(
                    user_id=user_id, user_name=name, text=said, story_id="tavern", place="g", history=list(history)
                )
            )
            history += [ChannelLine(name, said), ChannelLine("Écho", "Noted.", from_bot=True)]
        alice_reply = [r for r in llm_server.chats if r.json_schema is None][-1]
        lines = [m["content"] for m in alice_reply.messages if m["role"] == "user" and not m["content"].startswith("<")]
        assert lines == [
            "Bob: I have a cat named Pixel.",
            "Carol: I work as a night nurse.",
            "Alice: Nice cat, Bob! I live in Lyon.",
        ]
        assert '<memories about="Alice">' in alice_reply.context

        for user_id, _, _ in SCENE:
            engine.operator.schedule_reflection(user_id)
            await engine.operator.wait_reflections(user_id)

        alice = reflections["Alice"]
        assert "This is a shared channel: Bob, Carol spoke there too." in alice.text
        assert "never a memory of Alice" in alice.text
        assert "Nice cat, Bob! I live in Lyon." in alice.last_user
        assert "Pixel" not in alice.last_user.replace("Nice cat, Bob!", ""), "Bob's line is not shown as Alice's"
        stored = {user: [m.text for m in await store.list(user)] for user in ("alice", "bob", "carol")}
        assert stored == {
            "alice": ["The user lives in Lyon."],
            "bob": ["The user has a cat named Pixel."],
            "carol": ["The user works as a night nurse."],
        }
        dropped = [d for d in engine.operator.last_reflection("alice").decisions if d.action == "dropped"]
        assert sorted(d.text for d in dropped) == ["Bob has a cat named Pixel.", "Carol works as a night nurse."]
        assert all(d.detail.startswith("about_someone_else") for d in dropped)
