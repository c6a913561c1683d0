"""Corpus of French user memories for the dedup bench (and the dedup tests).

How it was written: one imagined user (Camille, night nurse in Nantes, the persona of the
prototype's extractor trials) followed over several weeks, written by hand. Each entry of ``FACTS`` is one fact; its tuple holds
the wordings a reflection model gives the same fact on different days, the way such models word
things:
a verb swapped for a synonym ("habite"/"vit"), a complement moved to the front ("Le mercredi,
l'utilisateur…"), the possessive turned around ("Le chat de l'utilisateur s'appelle…"), a detail
added later ("… Camille Martin"), a number written in letters, the gender agreement slipping
between "l'utilisateur" (masculine) and Camille ("marié"/"mariée"). Every pair inside a tuple is a
true variant (merging it is right); every pair across tuples is two distinct facts (merging it erases
one). Distinct facts were chosen to share sentence frames on purpose, because that is where a
lexical measure fails: two allergies, two siblings, two appointments on different days, a team
before and after a change, a taste and its negation, short one-attribute memories ("L'utilisateur
est diabétique." / "… est insomniaque."), the prototype's traps. Added after a review, facts that differ
only by a relation word ("dort sur / sous le canapé", "travaille avec / pour Marc", "vit chez /
près de sa mère") or by a name against a common noun ("avec son mari" / "avec Marie").

Nothing here was produced by the code under test; the labels are the author's judgement.
"""

from __future__ import annotations

FACTS: dict[str, tuple[str, ...]] = {
    "prénom": (
        "L'utilisateur s'appelle Camille.",
        "L'utilisateur s'appelle Camille Martin.",
        "Le prénom de l'utilisateur est Camille.",
        "L'utilisateur se prénomme Camille.",
    ),
    "âge": (
        "L'utilisateur a 34 ans.",
        "L'utilisateur est âgé de 34 ans.",
        "L'utilisateur a 34 ans depuis le mois de mars.",
    ),
    "métier": (
        "L'utilisateur travaille comme infirmière de nuit à l'hôpital de Nantes.",
        "L'utilisateur est infirmière de nuit à l'hôpital de Nantes.",
        "L'utilisateur travaille de nuit comme infirmière à l'hôpital de Nantes.",
        "L'utilisateur est infirmière de nuit au CHU de Nantes.",
    ),
    "équipe actuelle": (
        "L'utilisateur fait partie de l'équipe Logistique.",
        "L'utilisateur fait désormais partie de l'équipe Logistique.",
    ),
    "équipe précédente": ("L'utilisateur faisait partie de l'équipe Paiements.",),
    "allergie arachides": (
        "L'utilisateur est allergique aux arachides.",
        "L'utilisateur est allergique à l'arachide.",
        "L'utilisateur a une allergie aux arachides.",
        "L'utilisateur est allergique aux arachides et le signale dans chaque restaurant.",
    ),
    "allergie crustacés": ("L'utilisateur est allergique aux crustacés.",),
    "domicile": (
        "L'utilisateur habite à Nantes.",
        "L'utilisateur vit à Nantes.",
        "L'utilisateur habite à Nantes, dans le quartier de Chantenay.",
    ),
    "trajet": (
        "L'utilisateur vient au bureau en vélo.",
        "L'utilisateur vient au bureau à vélo.",
        "L'utilisateur va au travail à vélo.",
        "L'utilisateur se rend au travail à vélo tous les jours.",
    ),
    "mercredi": (
        "L'utilisateur n'est jamais disponible le mercredi.",
        "L'utilisateur n'est jamais libre le mercredi.",
        "Le mercredi, l'utilisateur n'est jamais disponible.",
    ),
    "chat": (
        "L'utilisateur a un chat roux qui s'appelle Biscotte.",
        "L'utilisateur a un chat roux nommé Biscotte.",
        "Le chat de l'utilisateur s'appelle Biscotte.",
        "L'utilisateur a un chat roux, Biscotte.",
    ),
    "chien": ("L'utilisateur a un chien, un border collie nommé Filou.",),
    "adopter chat": ("L'utilisateur voudrait adopter un deuxième chat.",),
    "sœur": (
        "L'utilisateur a une sœur cadette, Léa, qui vit à Lyon.",
        "La sœur cadette de l'utilisateur, Léa, habite à Lyon.",
        "L'utilisateur a une petite sœur, Léa, qui habite à Lyon.",
    ),
    "frère": ("L'utilisateur a un frère aîné, Julien, qui vit à Bordeaux.",),
    "mère": (
        "La mère de l'utilisateur est professeure de piano.",
        "La mère de l'utilisateur enseigne le piano.",
        "La mère de l'utilisateur est prof de piano au conservatoire de Rennes.",
    ),
    "fille": (
        "L'utilisateur a une fille de 6 ans, Inès.",
        "La fille de l'utilisateur, Inès, a 6 ans.",
    ),
    "fils": ("L'utilisateur a un fils de 9 ans, Noé.",),
    "dentiste mardi": (
        "L'utilisateur a rendez-vous chez le dentiste mardi prochain à 14h30.",
        "L'utilisateur a un rendez-vous chez le dentiste mardi prochain à 14h30.",
        "Mardi prochain à 14 h 30, l'utilisateur a rendez-vous chez le dentiste.",
    ),
    "dentiste jeudi": ("L'utilisateur a rendez-vous chez le dentiste jeudi prochain à 14h30.",),
    "dîner ce soir": (
        "L'utilisateur dîne chez ses parents ce soir.",
        "Ce soir, l'utilisateur dîne chez ses parents.",
    ),
    "dîner demain": ("L'utilisateur dîne chez ses parents demain soir.",),
    "contrat 10 séances": ("Le contrat de coaching de l'utilisateur prévoit 10 séances à 200 € chacune.",),
    "contrat 3 séances": ("Le contrat de coaching de l'utilisateur prévoit 3 séances à 50 € chacune.",),
    "promesse Japon": (
        "L'utilisateur a promis de raconter la fin de son voyage au Japon.",
        "L'utilisateur a promis de raconter la suite de son voyage au Japon.",
        "L'utilisateur a promis de raconter la fin de son voyage au Japon la prochaine fois.",
    ),
    "promesse grand-mère": (
        "L'utilisateur a promis d'appeler sa grand-mère dimanche.",
        "L'utilisateur a promis d'appeler sa grand-mère ce dimanche.",
        "L'utilisateur doit appeler sa grand-mère dimanche, il l'a promis.",
    ),
    "Miyazaki": (
        "L'utilisateur aime les films de Miyazaki.",
        "L'utilisateur aime les films de Hayao Miyazaki.",
        "L'utilisateur adore les films de Miyazaki.",
        "L'utilisateur aime beaucoup les films de Miyazaki, surtout Le Voyage de Chihiro.",
    ),
    "aime Marc": ("L'utilisateur aime Marc.",),
    "confie à Marc": (
        "L'utilisateur aime discuter de ses problèmes avec Marc.",
        "L'utilisateur aime parler de ses problèmes avec Marc.",
    ),
    "thé": (
        "L'utilisateur préfère le thé au café.",
        "L'utilisateur préfère le thé plutôt que le café.",
        "L'utilisateur boit du thé plutôt que du café.",
    ),
    "coriandre": (
        "L'utilisateur n'aime pas la coriandre.",
        "L'utilisateur n'aime pas du tout la coriandre.",
        "L'utilisateur déteste la coriandre.",
    ),
    "coriandre inversée": ("L'utilisateur aime la coriandre.",),
    "poignet": (
        "L'utilisateur s'est cassé le poignet en faisant de l'escalade en mars 2023.",
        "En mars 2023, l'utilisateur s'est cassé le poignet en escalade.",
        "L'utilisateur s'est fracturé le poignet en faisant de l'escalade en mars 2023.",
    ),
    "semi-marathon": (
        "L'utilisateur a couru son premier semi-marathon à Rennes en octobre.",
        "L'utilisateur a terminé son premier semi-marathon à Rennes en octobre.",
        "En octobre, l'utilisateur a couru son premier semi-marathon, à Rennes.",
    ),
    "japonais": (
        "L'utilisateur apprend le japonais depuis deux ans.",
        "L'utilisateur étudie le japonais depuis deux ans.",
        "L'utilisateur apprend le japonais depuis 2 ans.",
        "L'utilisateur apprend le japonais depuis deux ans avec une application.",
    ),
    "guitare": (
        "L'utilisateur joue de la guitare dans un groupe de rock le week-end.",
        "Le week-end, l'utilisateur joue de la guitare dans un groupe de rock.",
    ),
    "piano": ("L'utilisateur joue du piano depuis l'enfance.",),
    "végétarien": (
        "L'utilisateur est végétarien depuis 2019.",
        "L'utilisateur ne mange plus de viande depuis 2019.",
    ),
    "migraines": (
        "L'utilisateur a des migraines quand il dort mal.",
        "L'utilisateur souffre de migraines quand il dort mal.",
    ),
    "vertige": ("L'utilisateur a le vertige.",),
    "avion": (
        "L'utilisateur a peur de l'avion.",
        "L'utilisateur a peur de prendre l'avion.",
    ),
    "Islande": (
        "L'utilisateur part en vacances en Islande en août.",
        "L'utilisateur part en Islande en août pour ses vacances.",
        "En août, l'utilisateur part en vacances en Islande.",
    ),
    "Grèce": ("L'utilisateur part en vacances en Grèce en août.",),
    "polars": (
        "L'utilisateur lit beaucoup de romans policiers, surtout ceux de Fred Vargas.",
        "L'utilisateur adore les romans policiers de Fred Vargas.",
    ),
    "jazz": (
        "L'utilisateur écoute du jazz en travaillant.",
        "L'utilisateur travaille en écoutant du jazz.",
    ),
    "réveil": ("L'utilisateur se lève à 5h30 les jours de garde.",),
    "appartement": (
        "L'utilisateur cherche un appartement plus grand à Nantes.",
        "L'utilisateur cherche un plus grand appartement à Nantes.",
    ),
    "cigarette": (
        "L'utilisateur a arrêté de fumer il y a trois mois.",
        "L'utilisateur a arrêté la cigarette il y a trois mois.",
    ),
    "voiture": ("L'utilisateur conduit une vieille Renault Clio rouge.",),
    "nom de famille": ("L'utilisateur déteste qu'on l'appelle par son nom de famille.",),
    "mariée": (
        "L'utilisateur est mariée.",
        "L'utilisateur est marié.",
    ),
    "gauchère": (
        "L'utilisateur est gauchère.",
        "L'utilisateur est gaucher.",
    ),
    "diabète": ("L'utilisateur est diabétique.",),
    "insomnie": ("L'utilisateur est insomniaque.",),
    "espagnol": ("L'utilisateur parle espagnol.",),
    "allemand": ("L'utilisateur parle allemand.",),
    "concours": (
        "L'utilisateur prépare le concours d'infirmier anesthésiste pour septembre.",
        "L'utilisateur prépare le concours d'infirmière anesthésiste pour septembre.",
    ),
    "chat sur le canapé": (
        "Le chat de l'utilisateur dort sur le canapé.",
        "Biscotte, le chat de l'utilisateur, dort sur le canapé.",
    ),
    "chat sous le canapé": ("Le chat de l'utilisateur dort sous le canapé.",),
    "avec Marc": (
        "L'utilisateur travaille avec Marc.",
        "L'utilisateur travaille en binôme avec Marc.",
    ),
    "pour Marc": ("L'utilisateur travaille pour Marc.",),
    "chez sa mère": ("L'utilisateur vit chez sa mère.",),
    "près de sa mère": ("L'utilisateur vit près de sa mère.",),
    "vacances mari": ("L'utilisateur part en vacances avec son mari.",),
    "vacances Marie": (
        "L'utilisateur part en vacances avec Marie.",
        "L'utilisateur part en vacances avec Marie, sa meilleure amie.",
    ),
}

# The prototype's traps (docs/design.md, "Write path"), with its wording where it gives one.
# Each must stay under the threshold.
TRAPS: tuple[tuple[str, str, str], ...] = (
    (
        "10 séances à 200 € / 3 séances à 50 € (prototype: 0.963)",
        "Le contrat prévoit 10 séances à 200 € chacune.",
        "Le contrat prévoit 3 séances à 50 € chacune.",
    ),
    (
        "mardi prochain / jeudi prochain (prototype: 0.938)",
        "L'utilisateur a rendez-vous chez le dentiste mardi prochain.",
        "L'utilisateur a rendez-vous chez le dentiste jeudi prochain.",
    ),
    (
        "ce soir / demain soir (prototype: 0.80)",
        "L'utilisateur voit Marc ce soir.",
        "L'utilisateur voit Marc demain soir.",
    ),
    (
        "demain / après-demain",
        "L'utilisateur a rendez-vous chez le médecin demain.",
        "L'utilisateur a rendez-vous chez le médecin après-demain.",
    ),
    (
        "mais / mai",
        "L'utilisateur aime courir, mais il déteste la pluie.",
        "L'utilisateur aime courir, il déteste la pluie en mai.",
    ),
    (
        "word-subset inclusion",
        "L'utilisateur aime Marc.",
        "L'utilisateur aime discuter de ses problèmes avec Marc.",
    ),
    (
        "one content word swapped (issue)",
        "L'utilisateur est allergique aux arachides.",
        "L'utilisateur est allergique aux crustacés.",
    ),
    (
        "negation flipped while copying",
        "L'utilisateur n'aime pas la coriandre.",
        "L'utilisateur aime la coriandre.",
    ),
)
