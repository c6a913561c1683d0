"""What a French, Spanish or German Discord user sees around a reply comes from the catalogue in
their language: the receipt and its buttons, the edit form, its answer, the refusal, the notice
of a settled answer. The real bot process against the fake Discord."""

from __future__ import annotations

import pytest

from tests.discord_e2e.conftest import Scene, StartEcho
from tests.discord_e2e.test_swipes_and_memory import (
    CAT,
    MODAL,
    alice_tells_about_the_cat,
    bot_messages,
    button,
    buttons,
    callback,
    query,
    script,
    until,
)
from tests.fakes.discord import ALICE, BOB, FakeDiscord
from tests.fakes.discord.rest import EPHEMERAL
from tests.fakes.llm_server import FakeLLMServer, LLMRequest


async def test_the_receipt_its_buttons_and_the_edit_form_speak_the_presser_s_language(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0")
    script(
        llm_server,
        ["Pixel, quel joli nom."],
        lambda r: {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]},
    )
    reply = await alice_tells_about_the_cat(fake_discord)
    receipt = button(reply, "🧠")
    (memory_id,) = query(echo, "SELECT id FROM memories WHERE user_id = ?", (str(ALICE.id),))[0]

    refused = await fake_discord.press_button(BOB, reply, receipt["custom_id"], locale="de")
    answer = await callback(fake_discord, refused)
    assert answer["data"]["content"] == "Diese Schaltflächen gehören der Person, für die diese Antwort war."

    press = await fake_discord.press_button(ALICE, reply, receipt["custom_id"], locale="fr")
    content = (await callback(fake_discord, press))["data"]["content"]
    assert content.startswith("Ce que j'ai changé dans mes souvenirs de toi après ce message :")
    assert f"+ ajouté #{memory_id} : {CAT}" in content
    shown = press.original
    assert shown is not None and [b["label"] for b in buttons(shown)] == [
        f"Oublier #{memory_id}",
        f"Modifier #{memory_id}",
    ]

    edit = await fake_discord.press_button(ALICE, shown, button(shown, "Modifier")["custom_id"], locale="fr")
    modal = await callback(fake_discord, edit)
    assert modal["type"] == MODAL and modal["data"]["title"] == f"Modifier le souvenir #{memory_id}"
    (field,) = [c for row in modal["data"]["components"] for c in row["components"]]
    assert field["label"] == "Ce que je dois retenir"
    submitted = await fake_discord.submit_modal(
        ALICE,
        fake_discord.general,
        modal["data"]["custom_id"],
        {field["custom_id"]: "L'utilisateur a deux chats."},
        locale="fr",  # Discord sends the submitter's locale with every interaction
    )
    said = (await callback(fake_discord, submitted))["data"]["content"]
    assert said.startswith(f"#{memory_id} modifié. La version précédente est archivée sous h")


async def test_a_settled_answer_is_told_in_spanish(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="2")
    script(llm_server, ["Una respuesta."], lambda r: {})
    await fake_discord.user_says(ALICE, fake_discord.general, "hola", mention_bot=True)
    reply = (await until(lambda: [m for m in bot_messages(fake_discord) if buttons(m)]))[0]
    custom_id = button(reply, "🔄")["custom_id"]
    await until(lambda: not buttons(reply))
    stale = dict(
        reply, components=[{"type": 1, "components": [{"type": 2, "style": 2, "label": "🔄", "custom_id": custom_id}]}]
    )
    press = await fake_discord.press_button(ALICE, stale, custom_id, locale="es-ES")
    await callback(fake_discord, press)
    (followup,) = await fake_discord.wait_for_call("POST", f"/webhooks/{fake_discord.application_id}/{press.token}")
    assert followup.json["content"].startswith("Esta respuesta está cerrada") and followup.json["flags"] & EPHEMERAL


# --- the memory commands and the outage note, in each language (issue 33, item 5) ------------------

FACTS = ["Je joue du violoncelle le mardi.", "J'adore les chats.", "Je vis à Lyon depuis 2019."]


def english_only(lang: str) -> set[str]:
    """Words of the English catalogue that `lang`'s never uses: none may show in that language."""
    import re

    from bot.i18n import MESSAGES

    word = re.compile(r"[^\W\d_]{2,}")

    def words(lang: str) -> set[str]:
        forms = [f for v in MESSAGES[lang].values() for f in ((v,) if isinstance(v, str) else v)]
        return {w.casefold() for f in forms for w in word.findall(re.sub(r"\{[^}]*\}", " ", f))}

    return words("en") - words(lang)


def leaked(shown: str, lang: str, data: list[str]) -> set[str]:
    import re

    for value in sorted(data, key=len, reverse=True):
        shown = shown.replace(value, " ")
    return {w.casefold() for w in re.findall(r"[^\W\d_]{2,}", shown)} & english_only(lang)


async def said(scene, name: str, locale: str, options=()) -> dict:  # type: ignore[no-untyped-def]
    interaction = await scene.fake_discord.run_command(scene.alice, scene.channel, name, list(options), locale=locale)
    return (await callback(scene.fake_discord, interaction))["data"]


@pytest.mark.shared_settings(SETTLE_SECONDS="0")
@pytest.mark.parametrize(
    ("locale", "lang", "thousands", "facts", "remembered", "why_group", "menu", "option", "note"),
    [
        (
            "fr",
            "fr",
            "8\u202f192",
            "3 faits",
            "Retenu sous le numéro #",
            "Sur toi en général",
            "Modifier un souvenir…",
            "Modifier #",
            "Je n'arrive pas à joindre",
        ),
        (
            "es-ES",
            "es",
            "8.192",
            "3 hechos",
            "Recordado como #",
            "Sobre ti en general",
            "Editar un recuerdo…",
            "Editar #",
            "No consigo contactar",
        ),
        (
            "de",
            "de",
            "8.192",
            "3 Fakten",
            "Gemerkt als #",
            "Über dich allgemein",
            "Eine Erinnerung bearbeiten…",
            "#",
            "Ich erreiche mein Sprachmodell",
        ),
    ],
)
async def test_memories_why_stats_and_the_outage_note_in_the_person_s_language(
    scene: Scene,
    locale: str,
    lang: str,
    thousands: str,
    facts: str,
    remembered: str,
    why_group: str,
    menu: str,
    option: str,
    note: str,
) -> None:
    from tests.fakes.llm_server import Reply

    fake_discord, llm_server, channel = scene.fake_discord, scene.llm_server, scene.channel
    data = [*FACTS, "Alice", "Écho", "Tu te souviens de mon instrument ?", "UTC"]
    for fact in FACTS:
        answer = await said(scene, "remember", locale, [{"name": "text", "type": 3, "value": fact}])
        assert answer["content"].startswith(remembered), answer["content"]

    def handler(request: LLMRequest):  # type: ignore[no-untyped-def]
        if request.json_schema is not None:
            return "{}"
        if "instrument" in request.last_user:
            return Reply("Le violoncelle, bien sûr.", prompt_tokens=8192)
        return Reply(status=500, error="model crashed")

    llm_server.handler = handler
    await fake_discord.user_says(scene.alice, channel, "Tu te souviens de mon instrument ?", mention_bot=True)
    await until(lambda: [m for m in bot_messages(fake_discord, channel) if "violoncelle" in m["content"]])

    why = (await said(scene, "why", locale))["content"]
    assert why_group in why and "%" in why
    assert thousands in why, "the prompt's 8,192 tokens as the language writes the number"
    assert leaked(why, lang, data) == set(), why

    stats = (await said(scene, "memory-stats", locale))["content"]
    assert facts in stats, "each type's count in its plural"
    assert leaked(stats, lang, data) == set(), stats

    page = await said(scene, "memories", locale)
    assert leaked(page["content"], lang, data) == set(), page["content"]
    (select,) = [c for row in page["components"] for c in row["components"] if c["type"] == 3]
    assert select["placeholder"] == menu
    assert all(o["label"].startswith(option) and leaked(o["label"], lang, data) == set() for o in select["options"])
    assert all(leaked(c.get("label", ""), lang, data) == set() for row in page["components"] for c in row["components"])

    # The model is down: the note comes in the language Alice's commands told the bot, not the
    # character's French.
    await fake_discord.user_says(scene.alice, channel, "Et maintenant ?", mention_bot=True)
    (down,) = await until(lambda: [m for m in bot_messages(fake_discord, channel) if note in m["content"]])
    assert leaked(down["content"], lang, data) == set(), down["content"]
