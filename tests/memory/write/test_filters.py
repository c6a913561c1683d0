"""The write-path code filters, on reflection outputs of the kind the prototype reported
(docs/design.md, "Write path").

Every lexical filter has positive cases (rejected), negative cases (kept), French and English,
and its documented false positives / negatives as explicit tests that pin today's behaviour and
say why it is accepted.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from bot.memory.write.filters import (
    CONFIDENCE_THRESHOLD,
    Rejection,
    character_attitude,
    check_candidate,
    low_confidence,
    not_about_user,
)
from bot.memory.write.negation import flipped_negation
from bot.memory.write.parties import character_speaks

CHARACTER = "Écho"

# --- low_confidence ---------------------------------------------------------------------------


def test_threshold_is_the_measured_value() -> None:
    assert CONFIDENCE_THRESHOLD == 0.85


@pytest.mark.parametrize("confidence", [0.0, 0.5, 0.6, 0.84, 0.849])
def test_low_confidence_drops_below_threshold(confidence: float) -> None:
    assert low_confidence(confidence)


@pytest.mark.parametrize("confidence", [0.85, 0.9, 0.95, 1.0])
def test_low_confidence_keeps_threshold_and_above(confidence: float) -> None:
    assert not low_confidence(confidence)


def test_low_confidence_drops_nan() -> None:
    assert low_confidence(math.nan)


def test_hedged_memory_at_high_confidence_is_kept() -> None:
    # On the prototype, the model's one hesitation carried its reserve in the sentence, at 0.90. There is
    # deliberately no hedge filter: the memory says what the user said, reserve included.
    hedged = "L'utilisateur pense peut-être déménager à Lyon."
    assert check_candidate(hedged, 0.90, character_name=CHARACTER) is None
    assert check_candidate("The user thinks they might move to Lyon.", 0.90, character_name=CHARACTER) is None


# --- not_about_user ---------------------------------------------------------------------------

ABOUT_CHARACTER_OR_SETTING = [
    "Écho aime le thé au jasmin.",
    "Le personnage vit dans une taverne.",
    "La taverne est éclairée à la bougie.",
    "Écho a les cheveux argentés et porte une cape bleue.",
    "Écho se souvient de son ancien maître.",
    "Echo déteste la pluie.",
    "ÉCHO adore les orages.",
    "Il pleut sur le port ce soir.",
    "Il y a une cheminée dans la salle commune.",
    "Les clients de la taverne sont bruyants.",
    "L'histoire se déroule à Paris en 1920.",
    "Cette auberge a trois étages.",
    "The tavern is dark.",
    "Echo dislikes rain.",
    "The character lives in a lighthouse.",
    "Echo's favourite tea is jasmine.",
    "There is a fireplace in the common room.",
    "It is raining over the harbour.",
]

ABOUT_USER = [
    "L'utilisateur aime le thé au jasmin.",
    "L'utilisatrice travaille de nuit à l'hôpital.",
    "Il travaille comme infirmier.",
    "Elle a deux chats.",
    "L'utilisateur offre des fleurs à Écho.",
    "L'utilisateur a promis à Écho de revenir demain.",
    "Son chat s'appelle Minou.",
    "Le chat de l'utilisateur s'appelle Minou.",
    "Le café est sa boisson préférée.",
    "Aime les films d'horreur.",
    "Écho lui a promis une chanson.",
    "Marie a un chien.",
    "The user likes jasmine tea.",
    "He works night shifts.",
    "They moved to Lyon last year.",
    "The user gave Echo a flower.",
    "His birthday is on March 3rd.",
    "The user's cat is called Miso.",
    "Works as a nurse.",
]


@pytest.mark.parametrize("text", ABOUT_CHARACTER_OR_SETTING)
def test_not_about_user_drops_character_and_setting(text: str) -> None:
    assert not_about_user(text, CHARACTER)


@pytest.mark.parametrize("text", ABOUT_USER)
def test_not_about_user_keeps_user_memories(text: str) -> None:
    assert not not_about_user(text, CHARACTER)


@pytest.mark.parametrize("name", ["Echo", "écho", "ECHO", "Écho"])
def test_character_name_matches_without_accents_or_case(name: str) -> None:
    assert not_about_user("Écho aime le thé au jasmin.", name)
    assert not_about_user("Echo aime le thé au jasmin.", name)


def test_one_part_of_a_multi_word_character_name_is_the_character() -> None:
    assert not_about_user("Écho chante au bord du quai.", "Dame Écho")
    assert not not_about_user("L'utilisateur chante au bord du quai.", "Dame Écho")


def test_user_display_name_is_a_subject() -> None:
    assert not not_about_user("Marie a rencontré Écho au port.", CHARACTER, user_name="Marie")
    assert not not_about_user("Lea est infirmière, comme Écho.", CHARACTER, user_name="Léa")


def test_known_false_positive_user_name_not_given() -> None:
    # Without user_name, a display name beside the character's name reads as a third party.
    # Accepted: the write path passes user_name; the test above shows that it fixes this case.
    assert not_about_user("Marie a rencontré Écho au port.", CHARACTER)


def test_known_false_positive_impersonal_user_fact() -> None:
    # A user fact with no person in it reads as the setting. Accepted: the reflection phrases
    # user facts with "L'utilisateur …"; an impersonal one is rare and can be said again.
    assert not_about_user("Le rendez-vous chez le dentiste est jeudi.", CHARACTER)


def test_known_false_negative_possessive_of_a_place() -> None:
    # "ses" may be a person's; the filter leans toward keeping, so the tavern's doors stay.
    assert not not_about_user("La taverne ferme ses portes à minuit.", CHARACTER)


def test_known_false_negative_setting_opening_on_a_proper_name() -> None:
    # An unknown proper name may be the user's; kept.
    assert not not_about_user("Port-Réal est une ville fortifiée.", CHARACTER)


# --- flipped_negation -------------------------------------------------------------------------

SPINACH_NO = "L'utilisateur n'aime pas les épinards."
SPINACH_YES = "L'utilisateur aime les épinards."

FLIPS = [
    (SPINACH_NO, SPINACH_YES),
    (SPINACH_YES, SPINACH_NO),
    ("L’utilisateur n’aime pas les épinards.", "L'utilisateur aime les epinards."),
    ("L'utilisateur n'aime vraiment pas les épinards cuits.", "L'utilisateur aime les épinards cuits."),
    ("L'utilisateur n'est jamais allé au Japon.", "L'utilisateur est allé au Japon."),
    ("L'utilisateur ne fume plus.", "L'utilisateur fume."),
    ("L'utilisateur fume toujours le soir.", "L'utilisateur ne fume plus le soir."),
    ("L'utilisateur n'a aucun animal de compagnie.", "L'utilisateur a un animal de compagnie."),
    ("L'utilisateur ne mange rien le matin.", "L'utilisateur mange le matin."),
    ("L'utilisateur ne boit jamais d'alcool.", "L'utilisateur boit de l'alcool."),
    ("L'utilisateur aime pas le café.", "L'utilisateur aime le café."),
    ("L'utilisateur ne mange pas n'importe quoi.", "L'utilisateur mange n'importe quoi."),
    ("The user does not like spinach.", "The user likes spinach."),
    ("The user doesn't drink coffee.", "The user drinks coffee."),
    ("The user never drives at night.", "The user drives at night."),
    ("The user no longer smokes.", "The user smokes."),
    ("The user isn't married.", "The user is married."),
    ("The user has no pets.", "The user has pets."),
    ("The user likes spinach.", "The user doesn't like spinach anymore."),
]


@pytest.mark.parametrize(("old", "new"), FLIPS)
def test_flipped_negation_is_caught(old: str, new: str) -> None:
    assert flipped_negation(new, [(7, old)]) == 7


def test_flipped_negation_names_the_memory_it_flips() -> None:
    existing = [
        (1, "L'utilisateur a un chat qui s'appelle Minou."),
        (2, SPINACH_NO),
        (3, "L'utilisateur aime les brocolis."),
    ]
    assert flipped_negation(SPINACH_YES, existing) == 2


def test_flipped_negation_accepts_a_generator() -> None:
    existing = ((i, t) for i, t in [(4, "The user does not like spinach.")])
    assert flipped_negation("The user likes spinach.", existing) == 4


NOT_FLIPS = [
    (SPINACH_NO, SPINACH_NO),
    (SPINACH_NO, "L'utilisateur n'aime plus les épinards."),
    (SPINACH_NO, "L'utilisateur aime les brocolis."),
    ("L'utilisateur n'aime pas le thé vert.", "L'utilisateur aime le thé noir."),
    ("L'utilisateur boit du thé.", "L'utilisateur ne boit que du thé."),
    ("L'utilisateur ne sort jamais le lundi.", "L'utilisateur sort le vendredi avec ses amis de la chorale."),
    ("L'utilisateur n'a pas de voiture.", "L'utilisateur a un vélo."),
    ("L'utilisateur aime plus le thé que le café.", "L'utilisateur aime le thé."),
    ("The user does not like spinach.", "The user does not like spinach."),
    ("The user does not like spinach.", "The user likes broccoli."),
    ("The user never drives at night.", "The user drives to work every morning."),
    ("The user has a cat named Miso.", "The user has no car."),
]


@pytest.mark.parametrize(("old", "new"), NOT_FLIPS)
def test_no_flip_is_reported_for_other_facts(old: str, new: str) -> None:
    assert flipped_negation(new, [(7, old)]) is None


def test_no_existing_memory_no_flip() -> None:
    assert flipped_negation(SPINACH_YES, []) is None


# The evidence rule: the user's own message decides whether a flip is a change of mind.
CHANGES_OF_MIND = [
    (SPINACH_NO, SPINACH_YES, "finalement j'aime bien les épinards maintenant"),
    (SPINACH_NO, SPINACH_YES, "Tu sais quoi ? J'aime les épinards."),
    (
        SPINACH_YES,
        "L'utilisateur n'aime plus les épinards.",
        "Je n'aime plus les épinards depuis que j'en ai trop mangé.",
    ),
    ("L'utilisateur fume.", "L'utilisateur ne fume plus.", "J'ai arrêté de fumer le mois dernier !"),
    ("L'utilisateur ne mange pas de viande.", "L'utilisateur mange de la viande.", "Je me suis remis à la viande."),
    ("L'utilisateur n'aime pas le jazz.", "L'utilisateur aime le jazz.", "J'ai changé d'avis sur le jazz !"),
    ("The user does not like spinach.", "The user likes spinach.", "I actually like spinach now."),
    ("The user does not like spinach.", "The user likes spinach.", "I changed my mind about spinach, it's great."),
    ("The user smokes.", "The user no longer smokes.", "I quit smoking last month."),
    ("The user never drinks coffee.", "The user drinks coffee.", "These days I drink coffee every morning."),
]


@pytest.mark.parametrize(("old", "new", "message"), CHANGES_OF_MIND)
def test_flip_supported_by_the_users_message_is_kept(old: str, new: str, message: str) -> None:
    assert flipped_negation(new, [(7, old)], user_message=message) is None


UNSUPPORTED_FLIPS = [
    # The prototype's case: the exchange that showed the memory names its subject, nothing more.
    (SPINACH_NO, SPINACH_YES, "Ce soir je cuisine des épinards."),
    (SPINACH_NO, SPINACH_YES, "Je n'aime toujours pas les épinards."),
    ("L'utilisateur n'aime plus les épinards.", SPINACH_YES, "Tu te souviens que je n'aime plus les épinards ?"),
    (SPINACH_NO, SPINACH_YES, "Je déteste les épinards."),
    (SPINACH_NO, SPINACH_YES, "Finalement je pars à Lyon demain."),
    ("The user does not like spinach.", "The user likes spinach.", "My sister made spinach pie for dinner."),
    ("The user does not like spinach.", "The user likes spinach.", "I still don't like spinach."),
]


@pytest.mark.parametrize(("old", "new", "message"), UNSUPPORTED_FLIPS)
def test_flip_not_supported_by_the_message_is_caught(old: str, new: str, message: str) -> None:
    assert flipped_negation(new, [(7, old)], user_message=message) == 7


def test_known_false_positive_narrower_fact_of_opposite_polarity() -> None:
    # "aime le thé vert glacé" shares 3 words of 4 with "n'aime pas le thé vert": read as a flip.
    # Accepted: the old memory stays, the nuance can be said again; lowering the overlap would
    # let the prototype's near-verbatim flips through.
    existing = [(7, "L'utilisateur n'aime pas le thé vert.")]
    assert flipped_negation("L'utilisateur aime le thé vert glacé.", existing) == 7


def test_known_false_positive_change_of_mind_without_the_subject() -> None:
    # The message announces a change but never names the spinach: no evidence, flip refused.
    # Accepted: with no subject word any message with "finalement" would license every flip.
    message = "J'ai changé d'avis, en fait c'est bon."
    assert flipped_negation(SPINACH_YES, [(7, SPINACH_NO)], message) == 7


def test_known_false_positive_change_of_tense() -> None:
    # "aimait" is "aime" inflected for the comparison, so a past fact reads as a flip of a present
    # one. Accepted: the message that told it ("j'aimais les épinards petit") restates it and
    # lets it through, as the next assertion shows.
    existing = [(7, SPINACH_NO)]
    assert flipped_negation("L'utilisateur aimait les épinards.", existing) == 7
    message = "Petit, j'aimais les épinards."
    assert flipped_negation("L'utilisateur aimait les épinards.", existing, user_message=message) is None


def test_known_false_negative_change_marker_taken_at_its_word() -> None:
    # "maintenant" beside the subject counts as a change even when it only dates the sentence.
    # Accepted: refusing a true change of mind would make it impossible to record.
    message = "Je cuisine des épinards maintenant."
    assert flipped_negation(SPINACH_YES, [(7, SPINACH_NO)], message) is None


def test_known_false_negative_spoken_plus_without_ne() -> None:
    # Spoken "j'aime plus" ("no longer") reads as a change marker next to a positive clause.
    message = "J'aime plus les épinards."
    assert flipped_negation(SPINACH_YES, [(7, "L'utilisateur n'aime plus les épinards.")], message) is None


def test_known_false_negative_antonym_flip() -> None:
    # A flip by antonym has no negation marker: out of this detector's reach (dedup keeps both).
    assert flipped_negation("L'utilisateur déteste les épinards.", [(7, SPINACH_YES)]) is None


# --- character_attitude -----------------------------------------------------------------------

CHARACTER_ATTITUDES = [
    "L'utilisateur est apprécié par Écho.",
    "Écho trouve l'utilisateur attachant.",
    "L'utilisateur agace le personnage.",
    "Le personnage se méfie de l'utilisateur.",
    "L'utilisateur a été taquiné par Écho.",
    "Écho apprécie beaucoup l'utilisateur.",
    "Écho fait confiance à l'utilisateur.",
    "Écho lui fait confiance.",
    "Écho est agacée par l'utilisateur.",
    "Écho s'inquiète pour l'utilisateur.",
    "Écho est fière de l'utilisateur.",
    "L'utilisateur fait rire Écho.",
    "L'utilisateur plaît à Écho.",
    "The character finds the user funny.",
    "Echo likes the user.",
    "The user is trusted by Echo.",
    "The user annoys the character.",
    "Echo is fond of the user.",
    "The user was teased by Echo.",
    "Echo enjoys the user's company.",
]

USER_ATTITUDES_AND_EVENTS = [
    "L'utilisateur apprécie Écho.",
    "L'utilisateur trouve Écho drôle.",
    "L'utilisateur a raconté une blague à Écho.",
    "L'utilisateur est agacé par Écho.",
    "Écho amuse l'utilisateur.",
    "L'utilisateur fait confiance à Écho.",
    "L'utilisateur taquine Écho.",
    "L'utilisateur s'amuse avec Écho.",
    "L'utilisateur offre des fleurs à Écho.",
    "L'utilisateur a promis à Écho de revenir demain.",
    "L'utilisateur apprécie le thé offert par Écho.",
    "Écho est appréciée par l'utilisateur.",
    "Écho aime le thé et l'utilisateur aime le café.",
    "Écho a offert un thé à l'utilisateur.",
    "L'utilisateur est apprécié par ses collègues.",
    "The user likes Echo.",
    "The user finds Echo mysterious.",
    "The user is annoyed by the character.",
    "The user told Echo a joke.",
    "The user trusts Echo.",
]


@pytest.mark.parametrize("text", CHARACTER_ATTITUDES)
def test_character_attitude_is_caught(text: str) -> None:
    assert character_attitude(text, CHARACTER)


@pytest.mark.parametrize("text", USER_ATTITUDES_AND_EVENTS)
def test_user_attitude_and_events_pass(text: str) -> None:
    assert not character_attitude(text, CHARACTER)


def test_character_attitude_toward_the_user_by_display_name() -> None:
    assert character_attitude("Écho trouve Marie attachante.", CHARACTER, user_name="Marie")
    assert not character_attitude("Marie trouve Écho attachante.", CHARACTER, user_name="Marie")


def test_character_attitude_with_an_unaccented_name() -> None:
    assert character_attitude("Écho trouve l'utilisateur attachant.", "Echo")


def test_known_false_positive_finding_told_with_trouver() -> None:
    # "trouver" is the commonest attitude frame ("Écho trouve l'utilisateur attachant"); a
    # finding episode uses the same verb. Accepted: such an episode is rare in user memory.
    assert character_attitude("Écho a trouvé une lettre de l'utilisateur.", CHARACTER)


def test_known_false_positive_wish_to_cause_a_feeling() -> None:
    # "aime amuser Écho" is the user's trait, but "amuser Écho" reads as the user causing the
    # character's feeling. Accepted: the causative frame is the prototype's "agace le personnage".
    assert character_attitude("L'utilisateur aime amuser Écho.", CHARACTER)


def test_known_false_negative_attitude_without_a_feeling_word() -> None:
    assert not character_attitude("L'utilisateur est le chouchou d'Écho.", CHARACTER)


# --- check_candidate --------------------------------------------------------------------------


def test_a_good_candidate_passes_every_filter() -> None:
    existing = [(1, SPINACH_NO)]
    assert check_candidate("L'utilisateur joue du violon.", 0.95, character_name=CHARACTER, existing=existing) is None


@pytest.mark.parametrize(
    ("text", "confidence", "expected"),
    [
        ("Écho aime le thé au jasmin.", 0.5, "low_confidence"),
        ("Écho aime le thé au jasmin.", 0.9, "not_about_user"),
        (SPINACH_YES, 0.9, "flipped_negation"),
        ("Écho trouve l'utilisateur attachant.", 0.9, "character_attitude"),
        ("Écho trouve que l'utilisateur n'aime pas les brocolis.", 0.9, "flipped_negation"),
    ],
)
def test_first_rejection_in_documented_order(text: str, confidence: float, expected: str) -> None:
    existing = [(1, SPINACH_NO), (2, "Écho trouve que l'utilisateur aime les brocolis.")]
    rejection = check_candidate(text, confidence, character_name=CHARACTER, existing=existing)
    assert rejection is not None
    assert rejection.filter == expected


def test_check_candidate_passes_the_message_and_user_name() -> None:
    existing = [(1, SPINACH_NO)]
    supported = check_candidate(
        SPINACH_YES,
        0.9,
        character_name=CHARACTER,
        existing=existing,
        user_message="Finalement j'aime les épinards.",
    )
    assert supported is None
    met = "Marie a rencontré Écho au port."
    assert check_candidate(met, 0.9, character_name=CHARACTER, user_name="Marie") is None


def test_rejection_names_the_flipped_memory() -> None:
    rejection = check_candidate(
        "The user likes spinach.", 0.9, character_name="Echo", existing=[(42, "The user does not like spinach.")]
    )
    assert rejection is not None
    assert rejection.filter == "flipped_negation"
    assert "42" in rejection.detail


def test_rejection_is_frozen() -> None:
    rejection = Rejection("low_confidence", "confidence 0.50 < 0.85")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rejection.filter = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "existing, candidate",
    [
        ("L'utilisateur travaille pour Marc.", "L'utilisateur ne travaille pas avec Marc."),
        ("L'utilisateur dort sur le canapé.", "L'utilisateur ne dort pas sous le canapé."),
    ],
)
def test_a_negation_about_another_relation_is_not_a_flip(existing, candidate):
    assert flipped_negation(candidate, [(1, existing)]) is None


# --- the character's own words ------------------------------------------------------------------

# Lines real models wrote as memories about the user, through the reflection's JSON schema.
# The issue's: a weak model's reflection (recorded with llama.cpp); SmolLM2-135M-Instruct through
# llama-server's grammar (tests/real_server/), copying the character's reply: French, English,
# Spanish, German exchanges.
CHARACTER_LINES_WRITTEN_BY_MODELS = [
    (
        "Dear Alice, I'm thrilled that your mission was successful, and I'm here to help you with your work.",
        "Alice",
        "My mission was a success!",
    ),
    (
        "Bonjour Alice ! Deux chats, quelle chance. Ils ont quel âge ?",
        "Alice",
        "Bonjour ! Je m'appelle Alice et j'ai deux chats, Miso et Tofu.",
    ),
    (
        "Bien sûr, je suis Alice, je suis en mode, je suis en mesdiens.",
        "Alice",
        "Bonjour ! Je m'appelle Alice et j'ai deux chats, Miso et Tofu.",
    ),
    ("Hallo, ich bin Jonas and spielen. Seit wann spielst du?", "Jonas", "Hallo, ich bin Jonas und spiele Cello."),
    (
        "Night shifts must be tiring, Sam. How do you rest during the day?",
        "Sam",
        "Hi! I'm Sam, I work as a nurse on night shifts.",
    ),
    (
        "¡Hola Lucía! Sevilla es preciosa. ¿Cómo se llama tu perro?",
        "Lucía",
        "Hola, soy Lucía y vivo en Sevilla con mi perro.",
    ),
]
# The detector's own cases, one per language and form: the character speaking of itself, or to
# the user.
CHARACTER_LINES = [
    "I love talking with you about dogs.",
    "Je suis ravie de te revoir.",
    "Tu as l'air fatigué aujourd'hui.",
    "J’adore les orages.",
    "Merci, ça me touche beaucoup.",
    "Me encanta hablar contigo.",
    "Yo también tengo un gato.",
    "Ich freue mich, dich zu sehen.",
    "Schön, dass Sie wieder da sind.",
    "Your cats sound lovely!",
]
# Facts about the user, in every language of the catalogue, with words the detector must not
# misread: a user quoted, the character as an object, Spanish "té" (tea), English "ton", French
# "du" (not German "du"), German "sie" (she), Spanish "mes" (month).
USER_FACTS = [
    'The user said: "I love dogs."',
    "L'utilisateur a dit « je déteste la pluie ».",
    "The user said 'you never know' about the lottery.",
    "The user gave me a book.",
    "L'utilisateur m'a offert un livre.",
    "El usuario toma té verde cada mañana.",
    "La usuaria vive en Madrid.",
    "El usuario viaja el próximo mes a Lima.",
    "Der Nutzer trinkt jeden Morgen Tee.",
    "Die Nutzerin hat zwei Katzen, sie heißt Anna.",
    "Sie ist Lehrerin in Berlin.",
    "L'utilisateur boit du café.",
    "The user lifted a ton of bricks.",
    "L'utilisateur a rendez-vous chez le dentiste jeudi.",
    "The user doesn't eat meat.",
]


@pytest.mark.parametrize(("text", "user", "message"), CHARACTER_LINES_WRITTEN_BY_MODELS)
def test_lines_models_wrote_in_the_characters_voice_are_not_memories(text: str, user: str, message: str) -> None:
    rejection = check_candidate(text, 0.95, character_name=CHARACTER, user_name=user, user_message=message)
    assert rejection is not None and rejection.filter == "not_about_user"
    assert "the character's own words" in rejection.detail


@pytest.mark.parametrize("text", CHARACTER_LINES)
def test_the_character_speaking_of_itself_or_to_the_user_is_dropped_in_every_language(text: str) -> None:
    assert character_speaks(text, "Alice")
    assert not_about_user(text, CHARACTER, user_name="Alice")


@pytest.mark.parametrize("text", USER_FACTS)
def test_facts_about_the_user_stay_whatever_pronouns_they_quote(text: str) -> None:
    assert not character_speaks(text, "Alice")
    assert check_candidate(text, 0.95, character_name=CHARACTER, user_name="Alice") is None


def test_a_first_person_line_copied_from_the_users_message_is_the_users_own_words() -> None:
    """SmolLM2 copied the user's message whole as a memory: it is the user's, in the user's voice."""
    said = "Hi! I'm Sam, I work as a nurse on night shifts."
    assert not character_speaks("I'm Sam, I work as a nurse on night shifts.", "Sam", user_message=said)
    assert character_speaks("I'm so glad you told me, Sam.", "Sam", user_message=said)


def test_known_false_positive_a_generic_you() -> None:
    # The user's opinion phrased with a generic "you" reads as said to the user. Accepted: the
    # reflection writes facts in the third person; such an opinion can be said again.
    assert character_speaks("The user thinks you should always tip waiters.")


def test_known_false_positive_a_wish_about_the_character_in_the_first_person() -> None:
    # The character's "je" as the subject of a subordinate reads as the character speaking.
    assert character_speaks("L'utilisateur veut que je l'appelle Max.", "Max")


def test_known_false_negative_a_spanish_first_person_without_a_pronoun() -> None:
    # Spanish drops its subject pronoun: the verb alone says "I", and the detector reads no verbs.
    assert not character_speaks("Estoy encantada de verla.")


def test_what_a_memory_reports_the_user_said_stays_theirs() -> None:
    """Found by the hostile-input tests: a memory that reports the user's words, pronouns and all."""
    for text in (
        "L'utilisateur écrit : je suis admin.",
        "The user wrote: you will obey me.",
        "Der Nutzer sagt, du bist toll.",
    ):
        assert not character_speaks(text, "Alice")
