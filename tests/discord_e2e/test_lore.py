"""A card's lorebook is untrusted: a regular expression written to backtrack for ever neither
freezes the real bot nor keeps it from stopping (issue 22, item 3)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.discord_e2e.conftest import StartEcho
from tests.fakes.discord import ALICE, FakeDiscord
from tests.fakes.llm_server import FakeLLMServer, LLMRequest

# Catastrophic for Python's `re` (it froze the process for more than 10 minutes) and for the
# `regex` engine alike, on a 42-character message of words and spaces ending in "?".
NESTED = r"/^(\w+\s?)+$/"
ALTERNATION = r"/^(\w|\w\w|\s)+$/"
MESSAGE = "Je voudrais tout savoir sur le vieux port?"
LORE = f"""\
entries:
  - name: Echo chamber
    keys: ['{NESTED}']
    content: Every word echoes twice in the caves.
  - name: Alternating tides
    keys: ['{ALTERNATION}']
    content: The tides alternate every six hours.
  - name: The harbour
    keys: [port, "/vieux port/i"]
    content: The old harbour of Vellmar freezes every winter.
"""


def write_card(folder: Path) -> Path:
    folder.mkdir()
    (folder / "vellmar.yaml").write_text(LORE, encoding="utf-8")
    character = folder / "lina.yaml"
    character.write_text("name: Lina\npersona: Une marinière de Vellmar.\nlore: vellmar.yaml\n", encoding="utf-8")
    return character


async def test_a_backtracking_lore_key_neither_freezes_the_bot_nor_keeps_it_from_stopping(
    start_echo: StartEcho, fake_discord: FakeDiscord, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    echo = await start_echo(CHARACTER_FILE=str(write_card(tmp_path / "card")), BURST_SECONDS="0", SETTLE_SECONDS="0")
    prompts: list[str] = []

    def answer(request: LLMRequest) -> str:
        if request.json_schema is not None:
            return "{}"
        prompts.append(request.context)
        return "Le vieux port gèle chaque hiver."

    llm_server.handler = answer
    posted = f"/channels/{fake_discord.general.id}/messages"
    # A first message elsewhere, that no key makes slow: what start-up leaves to the first turn
    # is not timed, and #general's history stays empty (the keys are anchored at its start).
    dm = fake_discord.dm_channel(ALICE)
    await fake_discord.user_says(ALICE, dm, "Bonjour !")
    await fake_discord.wait_for_call("POST", f"/channels/{dm.id}/messages")

    said = time.monotonic()
    await fake_discord.user_says(ALICE, fake_discord.general, MESSAGE, mention_bot=True)
    calls = await fake_discord.wait_for_call("POST", posted)
    assert calls[0].at - said < 2.0, f"answered after {calls[0].at - said:.1f} s"
    await fake_discord.wait_for_text(fake_discord.general, "Le vieux port gèle chaque hiver.")
    assert "The old harbour of Vellmar freezes every winter." in prompts[1], "the sound keys still fire"

    # The next message is answered at once too.
    again = time.monotonic()
    await fake_discord.user_says(ALICE, fake_discord.general, "Et le phare?", mention_bot=True)
    calls = await fake_discord.wait_for_call("POST", posted, count=2)
    assert calls[1].at - again < 2.0, f"answered after {calls[1].at - again:.1f} s"

    interaction = await fake_discord.run_command(ALICE, fake_discord.general, "why")
    [callback] = await fake_discord.wait_for_call(
        "POST", f"/interactions/{interaction.id}/{interaction.token}/callback"
    )
    why = callback.json["data"]["content"]
    assert f"- Alternating tides: on “{ALTERNATION}” — left out: this regular expression took too long" in why
    interaction = await fake_discord.run_command(ALICE, fake_discord.general, "why", locale="fr")
    [callback] = await fake_discord.wait_for_call(
        "POST", f"/interactions/{interaction.id}/{interaction.token}/callback"
    )
    why = callback.json["data"]["content"]
    assert f"- Alternating tides : sur « {ALTERNATION} » — laissée de côté : cette expression régulière" in why
    log = echo.log()
    assert log.count(f"lore: the key {ALTERNATION} of the entry 'Alternating tides' took more than") == 1

    stopping = time.monotonic()
    await echo.stop()
    assert echo.process.returncode == 0 or echo.process.returncode == -15, echo.process.returncode
    assert time.monotonic() - stopping < 10, "SIGTERM ended the bot"
