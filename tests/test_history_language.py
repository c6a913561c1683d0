"""/history in French: every operation and cause the code archives with is named from the
catalogue, none as stored (item 15 of issue 22: "par message deleted")."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import httpx
import pytest

from bot.engine import Incoming
from bot.i18n import MESSAGES, Message, use_locale
from bot.memory.model import Cause, NewMemory
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.reflection import parse_reflection
from bot.presenting import history_text, memory_pages, why_text
from tests.builders import http_client, make_engine

USER = "123"
WORD = re.compile(r"[^\W\d_]{2,}")  # one letter is an elision (t'a, don't), not a word


def english_only_words() -> set[str]:
    """Words of the English catalogue that the French one never uses."""

    def words(catalogue: dict[str, Message]) -> set[str]:
        templates = [form for value in catalogue.values() for form in ((value,) if isinstance(value, str) else value)]
        return {w.casefold() for template in templates for w in WORD.findall(re.sub(r"\{[^}]*\}", " ", template))}

    return words(MESSAGES["en"]) - words(MESSAGES["fr"])


def leaks(shown: str, data: list[str]) -> set[str]:
    """English catalogue words in `shown`, the user's own data (memory texts) taken out."""
    for text in sorted(data, key=len, reverse=True):
        shown = shown.replace(text, " ")
    return {w.casefold() for w in WORD.findall(shown)} & english_only_words()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with http_client() as client:
        yield client


def reflect(**fields):
    return parse_reflection(json.dumps(fields)).reflection


def fact(text: str, **extra) -> dict:
    return {"text": text, "type": "fact", "scope": "global", "confidence": 0.95, **extra}


def test_the_check_sees_the_english_leak_of_the_issue():
    assert {"deleted", "delete"} <= leaks("h1 : #2 delete le 2026-11-02 par message deleted — était « x »", [])


async def test_every_archived_operation_and_cause_reads_in_french(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    await engine.start()
    texts: list[str] = []

    async def add(text: str, **extra) -> int:
        texts.append(text)
        return await store.add(USER, NewMemory(text=text, place="guild-1", **extra))

    def ctx(allowed, message: str, source: str | None) -> ReflectionContext:
        return ReflectionContext(
            user_id=USER,
            allowed_ids=frozenset(allowed),
            character_name="Écho",
            user_message=message,
            user_name="Camille",
            story_id="chan-1",
            place="guild-1",
            source=source,
        )

    # The reflection's four archiving operations, with a Discord message as source and without.
    team = await add("L'utilisateur fait partie de l'équipe Paiements.")
    texts.append("L'utilisateur fait partie de l'équipe Logistique.")
    report = await apply_reflection(
        db,
        reflect(replace=[{"id": team, "text": texts[-1]}]),
        ctx({team}, "J'ai quitté l'équipe Paiements pour la Logistique.", "987654321"),
        clock=clock,
    )
    assert [d.action for d in report.decisions] == ["replaced"]
    films = await add("L'utilisateur aime les films de Miyazaki.")
    texts.append("L'utilisateur aime les films de Hayao Miyazaki.")
    report = await apply_reflection(db, reflect(memories=[fact(texts[-1])]), ctx((), "", "exchange 4"), clock=clock)
    assert [d.action for d in report.decisions] == ["merged"]
    await add("L'utilisateur est en congé en août.")
    report = await apply_reflection(
        db, reflect(memories=[fact(texts[-1], expires_at="2027-08-31")]), ctx((), "", None), clock=clock
    )
    assert [d.action for d in report.decisions] == ["absorbed"]
    sport = await add("L'utilisateur fait du sport le mardi.")
    report = await apply_reflection(db, reflect(delete=[sport]), ctx({sport}, "", "987654322"), clock=clock)
    assert [d.action for d in report.decisions] == ["deleted"]
    # The user's own commands.
    chat = await add("L'utilisateur a un chat.")
    texts.append("L'utilisateur a un chat roux.")
    history_id = await engine.memories.edit(USER, chat, texts[-1])
    assert history_id is not None
    assert await engine.memories.restore(USER, history_id) == chat
    assert await engine.memories.forget(USER, films)
    # A deleted Discord message takes the memory it alone produced with it.
    llm_server.handler = lambda r: (
        json.dumps({"memories": [fact("L'utilisateur joue du violon.")]}) if r.json_schema else "ok"
    )
    texts.append("L'utilisateur joue du violon.")
    await engine.conversation.turn(
        Incoming(
            user_id=USER,
            user_name="Camille",
            text="Je joue du violon.",
            story_id="chan-1",
            place="guild-1",
            message_id="555",
        )
    )
    await engine.conversation.wait_idle(USER)
    assert (await engine.conversation.message_deleted("555")).archived

    entries, removals = await engine.memories.history(USER)
    operations = {e.operation for e in entries}
    causes = {e.cause for e in entries}
    assert operations == {"replace", "merge", "expiry", "delete", "edit", "restore"}, operations
    assert causes == {
        Cause.reflection("987654321"),
        Cause.reflection("987654322"),
        Cause.reflection("exchange 4"),
        Cause.reflection(),
        Cause("edit"),
        Cause("restore"),
        Cause("forget"),
        Cause("message_deleted"),
    }, causes
    with use_locale("fr"):
        shown = history_text(entries, removals)
    assert leaks(shown, texts) == set(), shown
    assert "ton message a été supprimé" in shown and "appris de ton message 987654321" in shown
    with use_locale("fr"):
        pages = "\n".join(memory_pages(await engine.memories.list(USER), now=clock.now))
    assert leaks(pages, texts) == set(), pages
    selection = await engine.memories.why(USER, "chan-1")
    with use_locale("fr"):
        shown = why_text(selection)
    assert leaks(shown, [*texts, "Je joue du violon."]) == set(), shown
    assert "h1: #" in history_text(entries, removals), "English keeps its own words"
    await engine.close()
