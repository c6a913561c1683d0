"""What a French, Spanish or German Discord user sees around a reply comes from the catalogue in
their language: the receipt and its buttons, the edit form, its answer, the refusal, the notice
of a settled answer. The real bot process against the fake Discord."""

from __future__ import annotations

from tests.discord_e2e.conftest import StartEcho
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
from tests.fakes.llm_server import FakeLLMServer


async def test_the_receipt_its_buttons_and_the_edit_form_speak_the_presser_s_language(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer
) -> None:
    echo = await start_echo(BURST_SECONDS="0", SETTLE_SECONDS="0")
    script(llm_server, ["Pixel, quel joli nom."], lambda r: {"memories": [{"text": CAT, "type": "fact", "confidence": 0.9}]})
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
    assert shown is not None and [b["label"] for b in buttons(shown)] == [f"Oublier #{memory_id}", f"Modifier #{memory_id}"]

    edit = await fake_discord.press_button(ALICE, shown, button(shown, "Modifier")["custom_id"], locale="fr")
    modal = await callback(fake_discord, edit)
    assert modal["type"] == MODAL and modal["data"]["title"] == f"Modifier le souvenir #{memory_id}"
    (field,) = [c for row in modal["data"]["components"] for c in row["components"]]
    assert field["label"] == "Ce que je dois retenir"
    submitted = await fake_discord.submit_modal(
        ALICE, fake_discord.general, modal["data"]["custom_id"], {field["custom_id"]: "L'utilisateur a deux chats."},
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
    stale = dict(reply, components=[{"type": 1, "components": [{"type": 2, "style": 2, "label": "🔄", "custom_id": custom_id}]}])
    press = await fake_discord.press_button(ALICE, stale, custom_id, locale="es-ES")
    await callback(fake_discord, press)
    (followup,) = await fake_discord.wait_for_call("POST", f"/webhooks/{fake_discord.application_id}/{press.token}")
    assert followup.json["content"].startswith("Esta respuesta está cerrada") and followup.json["flags"] & EPHEMERAL
