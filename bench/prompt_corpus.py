"""Data of the prompt-cache bench (bench/prompt_cache.py): a 40-turn French conversation in which
one person states 30 facts about themselves, the character's scripted replies, and the scripted
reflection that stores each stated fact.

How it was written: one person (Camille), the facts a companion bot hears over an evening
(work, family, health, tastes, plans), each told once in a message of its own, in the order a
conversation brings them; ten turns tell nothing new: small talk, and questions that count on an
earlier fact ("tu te souviens de…"), as a user who trusts the memory does. The replies are
written by a rule, not a model: two or three sentences that take up a few words of the message
and ask one question back, the length the bundled character's persona asks for (two to four
sentences, ~200-300 characters). The reflection is scripted from the exchange it reads: the
memory of each fact message it finds, a summary rewritten in full (the last topics, as a model
rewrites it every time) and small state deltas, so that every reflection writes memories and
story rows as a real one does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

USER_NAME = "Camille"


@dataclass(frozen=True, slots=True)
class Turn:
    message: str
    # The memory the reflection stores for it (None: the message states nothing new).
    memory: str | None = None
    type: str = "fact"


TURNS: tuple[Turn, ...] = (
    Turn("Salut Écho ! Ça fait longtemps, j'avais envie de te raconter un peu ma vie ce soir."),
    Turn(
        "Je m'appelle Camille, j'ai 34 ans et j'habite à Grenoble depuis cinq ans.",
        "L'utilisateur s'appelle Camille, a 34 ans et habite à Grenoble depuis cinq ans.",
    ),
    Turn(
        "Je travaille comme kinésithérapeute dans un cabinet près de la gare.",
        "L'utilisateur est kinésithérapeute dans un cabinet près de la gare de Grenoble.",
    ),
    Turn(
        "J'ai une chienne, une border collie qui s'appelle Noisette.",
        "L'utilisateur a une chienne border collie qui s'appelle Noisette.",
    ),
    Turn(
        "Je suis allergique aux arachides, donc jamais de cacahuètes pour moi.",
        "L'utilisateur est allergique aux arachides.",
    ),
    Turn(
        "Ma sœur Inès vit à Montréal, on se parle en visio tous les dimanches.",
        "L'utilisateur a une sœur, Inès, qui vit à Montréal ; elles se parlent en visio le dimanche.",
    ),
    Turn("Tu as passé une bonne journée, toi ?"),
    Turn(
        "Je fais de l'escalade en salle deux fois par semaine, le mardi et le jeudi.",
        "L'utilisateur fait de l'escalade en salle le mardi et le jeudi.",
        "preference",
    ),
    Turn(
        "Je prépare un trek en Islande pour le mois d'août avec deux amis.",
        "L'utilisateur prépare un trek en Islande en août avec deux amis.",
        "promise",
    ),
    Turn(
        "Je suis végétarienne depuis l'année dernière, et franchement je ne regrette pas.",
        "L'utilisateur est végétarienne depuis l'année dernière.",
        "preference",
    ),
    Turn(
        "Mon compagnon s'appelle Hugo, il est ingénieur dans l'hydroélectricité.",
        "L'utilisateur a un compagnon, Hugo, ingénieur dans l'hydroélectricité.",
    ),
    Turn(
        "Je joue du violoncelle depuis que j'ai huit ans, dans un petit orchestre amateur.",
        "L'utilisateur joue du violoncelle dans un orchestre amateur depuis l'âge de huit ans.",
        "preference",
    ),
    Turn("Haha, tu es drôle ce soir."),
    Turn(
        "Je déteste le café, je ne bois que du thé, surtout du thé fumé.",
        "L'utilisateur déteste le café et ne boit que du thé, surtout du thé fumé.",
        "preference",
    ),
    Turn(
        "Je me suis cassé le poignet gauche au ski il y a deux ans, il me fait encore mal quand il pleut.",
        "L'utilisateur s'est cassé le poignet gauche au ski il y a deux ans et en souffre encore quand il pleut.",
        "episode",
    ),
    Turn(
        "Mes parents tiennent une boulangerie à Annecy.",
        "Les parents de l'utilisateur tiennent une boulangerie à Annecy.",
    ),
    Turn(
        "Je lis surtout de la science-fiction, Ursula Le Guin est mon autrice préférée.",
        "L'utilisateur lit surtout de la science-fiction ; son autrice préférée est Ursula Le Guin.",
        "preference",
    ),
    Turn("Tu te souviens comment s'appelle ma chienne ?"),
    Turn(
        "J'ai promis à Hugo de faire les cartons avant la fin du mois, on déménage en juin.",
        "L'utilisateur a promis à Hugo de faire les cartons avant la fin du mois ; ils déménagent en juin.",
        "promise",
    ),
    Turn(
        "On part habiter à Meylan, dans une maison avec un petit jardin.",
        "L'utilisateur va habiter à Meylan, dans une maison avec un petit jardin.",
    ),
    Turn(
        "Je suis insomniaque depuis des années, je dors rarement plus de six heures.",
        "L'utilisateur est insomniaque et dort rarement plus de six heures.",
    ),
    Turn(
        "Mon meilleur ami, Bastien, se marie en septembre et je suis son témoin.",
        "L'utilisateur est le témoin de son meilleur ami Bastien, qui se marie en septembre.",
        "promise",
    ),
    Turn(
        "Je parle espagnol couramment, j'ai fait un Erasmus à Séville.",
        "L'utilisateur parle espagnol couramment et a fait un Erasmus à Séville.",
    ),
    Turn("Bon, et toi, qu'est-ce que tu aimes lire ?"),
    Turn("J'ai peur en avion, alors l'Islande, ça va être une épreuve.", "L'utilisateur a peur en avion."),
    Turn(
        "Je cuisine beaucoup de plats indiens, mon préféré c'est le dal de lentilles corail.",
        "L'utilisateur cuisine souvent indien ; son plat préféré est le dal de lentilles corail.",
        "preference",
    ),
    Turn(
        "Le mois dernier j'ai couru mon premier semi-marathon, en 2 h 04.",
        "L'utilisateur a couru son premier semi-marathon le mois dernier, en 2 h 04.",
        "episode",
    ),
    Turn(
        "Je suis daltonienne, je confonds le rouge et le vert.",
        "L'utilisateur est daltonienne et confond le rouge et le vert.",
    ),
    Turn("Tu te rappelles ce que je fais comme sport en salle ?"),
    Turn(
        "Je veux reprendre des études de psychomotricité l'an prochain.",
        "L'utilisateur veut reprendre des études de psychomotricité l'an prochain.",
        "promise",
    ),
    Turn(
        "Ma grand-mère Lucienne fête ses 90 ans en juillet, toute la famille vient.",
        "La grand-mère de l'utilisateur, Lucienne, fête ses 90 ans en juillet.",
        "episode",
    ),
    Turn(
        "Je n'aime pas du tout les films d'horreur, même les gentils.",
        "L'utilisateur n'aime pas les films d'horreur.",
        "preference",
    ),
    Turn("Je fais du bénévolat à la SPA le samedi matin.", "L'utilisateur fait du bénévolat à la SPA le samedi matin."),
    Turn("Pfff, grosse journée au cabinet, trois patients en retard."),
    Turn(
        "J'ai un abonnement au théâtre municipal, j'y vais une fois par mois.",
        "L'utilisateur a un abonnement au théâtre municipal et y va une fois par mois.",
        "preference",
    ),
    Turn("Il pleut encore sur la ville ce soir, j'entends les gouttes sur la fenêtre."),
    Turn(
        "Je me lève à 5 h 30 pour promener Noisette avant le travail.",
        "L'utilisateur se lève à 5 h 30 pour promener sa chienne avant le travail.",
    ),
    Turn("Tu crois que je devrais prendre des cours de pilotage pour vaincre ma peur de l'avion ?"),
    Turn(
        "J'ai arrêté de fumer il y a trois mois, et je tiens bon.",
        "L'utilisateur a arrêté de fumer il y a trois mois.",
        "episode",
    ),
    Turn("Allez, je vais dormir. Merci pour la conversation, à demain !"),
)
FACTS = [t for t in TURNS if t.memory is not None]
assert len(TURNS) == 40 and len(FACTS) == 30, (len(TURNS), len(FACTS))

_OPENINGS = ("Oh, {words} !", "Ah, {words}…", "Attends, {words} ?", "Mais oui, {words}.")
_MIDDLES = (
    "Je le note dans un coin de ma tête, tu sais que je n'oublie pas grand-chose.",
    "Ça en dit long sur toi, et j'aime bien ce que ça raconte.",
    "Je ne m'y attendais pas du tout, tu me surprends ce soir.",
    "C'est le genre de détail qui rend une personne vraiment unique.",
)
_QUESTIONS = (
    "Et comment tu le vis, au quotidien ?",
    "Tu m'en racontes un peu plus ?",
    "Qu'est-ce qui t'a menée là, au départ ?",
    "Et ça se passe comment, en ce moment ?",
)
_WORD = re.compile(r"[\wÀ-ÿ'-]+")
_MESSAGE = re.compile(r'<message author="[^"]*">\n(.*?)\n</message>', re.DOTALL)


def reply_to(message: str, turn: int) -> str:
    """The character's scripted answer: a few words of the message taken up, a remark, a question."""
    words = " ".join(_WORD.findall(message)[:5]).lower()
    return f"{_OPENINGS[turn % 4].format(words=words)} {_MIDDLES[(turn // 4) % 4]} {_QUESTIONS[(turn // 2) % 4]}"


def scripted_reflection(prompt: str) -> str:
    """The reflection JSON for one reflection prompt: the memory of each fact message quoted in
    its exchange, the summary rewritten in full, a small mood and trust delta."""
    said = _MESSAGE.findall(prompt)
    memory_of = {t.message: t for t in FACTS}
    memories = [
        {"text": memory_of[m].memory, "type": memory_of[m].type, "scope": "global", "confidence": 0.95}
        for m in said
        if m in memory_of
    ]
    topics = [m[:70] for m in said]
    summary = (
        f"Une longue conversation du soir : {USER_NAME} raconte sa vie à Écho, qui l'écoute et la "
        "relance avec curiosité. Derniers sujets : " + " / ".join(topics)
    )
    return json.dumps({"memories": memories, "summary": summary, "state": {"mood": 1, "trust": 1}}, ensure_ascii=False)
