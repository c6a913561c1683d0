"""The message catalogue: the same keys and placeholders in every language, locales mapped."""

from __future__ import annotations

import string

import pytest

from bot.i18n import COMMANDS, EN, MESSAGES, language, text
from bot.presenting import forget_result, memory_pages, sharing_text, why_text


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("lang", sorted(MESSAGES))
def test_every_catalogue_has_every_key_with_the_same_placeholders(lang):
    catalogue = MESSAGES[lang]
    assert catalogue.keys() == EN.keys()
    for key, template in catalogue.items():
        assert _fields(template) == _fields(EN[key]), key


@pytest.mark.parametrize(
    ("locale", "lang"), [("fr", "fr"), ("fr-FR", "fr"), ("FR", "fr"), ("en-US", "en"), ("de", "en"), (None, "en"), ("", "en")]
)
def test_a_discord_locale_picks_french_or_falls_back_to_english(locale, lang):
    assert language(locale) == lang


def test_french_answers_of_the_memory_commands():
    assert memory_pages([], now=None, lang="fr") == ["Aucun souvenir pour l'instant."]  # type: ignore[arg-type]
    assert forget_result(3, True, lang="fr") == "#3 est oublié (voir /history pour le restaurer)."
    assert forget_result(3, False, lang="fr") == "Tu n'as pas de souvenir #3."
    assert sharing_text(True, changed=True, lang="fr") == "Le partage entre lieux est maintenant activé."
    assert why_text(None, lang="fr").startswith("Pas encore de tour")
    assert text("de", "remembered", id=4) == "Remembered as #4.", "an unknown language falls back to English"


def test_command_translations_cover_every_command_text():
    french = COMMANDS["fr"]
    assert all(value and value == value.strip() for value in french.values())
    assert "memories" in french and "erase-me" in french and "Remember this" in french
