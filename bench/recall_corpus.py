"""Data of the semantic recall bench (bench/recall.py): one user, 18 reference memories, 6 chat
queries, 10 relevant (query, memory) pairs, and a generator of distractor memories.

How the corpus was built
------------------------
- The references describe one user (a night nurse in Nantes, father of a six-year-old, training
  for a half-marathon, co-writing a pirate story with the character). They cover work, family,
  health, hobbies, preferences, promises and episodes. Eight of them are needed by no query:
  they are in the corpus as same-user, same-theme competitors (the night at the emergency room
  with his daughter competes with the birthday cake and the holidays, for instance).
- Each query is written as a chat message: one is elliptical ("on continue ?", Q1), two recall
  their facts only implicitly (Q3: sleepless night "entre deux gardes" = night shifts + the
  exam; Q4: "la petite" = his daughter, a cake = the nut allergy), three name what they recall
  (Q2 running, Q5 the sister, Q6 the promise to Lina), as a user who counts on the memory does.
- Relevance is declared per fact: a memory is relevant to a query only if it is the fact the
  answer needs, not because it shares the query's theme (the prototype: labelling by theme moved
  recall@3 from 10/10 to 9/15 without a single ranking changing).
- Distractors come from templates x vocabularies (relatives x first names, cities, times,
  sports, health appointments, promises, outings, tastes...), drawn with a seeded generator and
  deduplicated. Many share a theme with a reference on purpose (promises to a niece to take her
  out during the holidays, insomnia, work schedules, other sports, other medical appointments,
  cakes for a relative's birthday, board and role-playing games) without being the fact a query
  needs. To keep the labels true, no distractor may contain a word that would make it an answer
  (`FORBIDDEN_WORDS`: the daughter, the sister, running, the ankle, nuts, the pirate story...);
  `distractor_pool` checks it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

# (key, type, scope, text). Scope "story" = learnt in the channel of the pirate story.
REFERENCES: tuple[tuple[str, str, str, str], ...] = (
    ("R01", "fact", "global", "L'utilisateur est infirmier de nuit en réanimation au CHU de Nantes."),
    (
        "R02",
        "fact",
        "global",
        "L'utilisateur prépare le concours d'infirmier anesthésiste, dont l'écrit a lieu le 14 mai.",
    ),
    ("R03", "fact", "global", "L'utilisateur a une fille de six ans, Lina, qui a peur du noir."),
    (
        "R04",
        "fact",
        "global",
        "L'utilisateur va devenir oncle : sa sœur Margaux attend son premier enfant pour fin avril.",
    ),
    (
        "R05",
        "fact",
        "global",
        "L'utilisateur s'est fait une entorse à la cheville gauche et son kiné lui interdit de courir jusqu'à mi-mai.",
    ),
    (
        "R06",
        "fact",
        "global",
        "L'utilisateur est allergique aux fruits à coque, comme sa fille : aucun des deux ne peut manger de noix ni d'amandes.",
    ),
    ("R07", "fact", "global", "L'utilisateur s'entraîne pour le semi-marathon de La Baule, prévu le 15 juin."),
    (
        "R08",
        "fact",
        "global",
        "L'utilisateur joue de la guitare classique et travaille en ce moment une pièce de Tárrega.",
    ),
    ("R09", "preference", "global", "L'utilisateur préfère qu'on l'appelle Tom plutôt que Thomas."),
    (
        "R10",
        "promise",
        "global",
        "L'utilisateur a promis à sa fille Lina de l'emmener voir les éléphants au zoo de La Flèche pendant les vacances de printemps.",
    ),
    (
        "R11",
        "promise",
        "global",
        "L'utilisateur s'est promis d'arrêter de fumer le 1er juin et a demandé qu'on le lui rappelle.",
    ),
    (
        "R12",
        "episode",
        "global",
        "L'utilisateur a passé la nuit du 3 janvier aux urgences pédiatriques avec sa fille, qui avait 40 de fièvre.",
    ),
    (
        "R13",
        "fact",
        "story",
        "L'utilisateur et le personnage écrivent ensemble une histoire de pirates où il joue le capitaine Morvan.",
    ),
    (
        "R14",
        "episode",
        "story",
        "L'utilisateur s'est arrêté, dans l'histoire de pirates, au moment où l'équipage de Morvan accostait l'île aux Brumes pour retrouver la carte volée.",
    ),
    ("R15", "preference", "global", "L'utilisateur préfère le thé vert au café et n'en boit jamais après 16 h."),
    ("R16", "fact", "global", "L'utilisateur vit à Rezé, au quatrième étage d'un immeuble sans ascenseur."),
    ("R17", "preference", "global", "L'utilisateur ne supporte pas les films d'horreur depuis l'enfance."),
    ("R18", "fact", "global", "L'utilisateur a un vieux chat roux de douze ans qui s'appelle Biscotte."),
)

# (key, message as the user types it, references the answer needs).
QUERIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Q1", "on continue ?", ("R13", "R14")),
    ("Q2", "Il fait trop beau, j'ai bien envie d'aller courir dimanche matin, t'en penses quoi ?", ("R05", "R07")),
    ("Q3", "pfff encore une nuit blanche à bosser mes fiches entre deux gardes…", ("R01", "R02")),
    ("Q4", "tu aurais une idée de gâteau pour l'anniversaire de la petite ? rien de trop compliqué", ("R03", "R06")),
    ("Q5", "Ma sœur vient de m'appeler, ça y est, c'est pour ce week-end !", ("R04",)),
    ("Q6", "tu te rappelles ce que j'ai promis à Lina pour les vacances ?", ("R10",)),
)

# The story the channel plays, as the prototype appended it to every query: title + situation.
# It is several times longer than a chat message, which is the point being measured.
SETTING = (
    "Histoire : Les Brumes de Kerlann.\n"
    "Situation : le personnage est Nell, cartographe à bord d'un navire pirate qui écume "
    "l'archipel de Kerlann au XVIIIe siècle. Le ton est celui d'un roman d'aventure : "
    "tempêtes, trahisons, cartes au trésor et tavernes enfumées. Nell parle peu, observe "
    "beaucoup et tutoie tout le monde. Elle se méfie des officiers de la Couronne et garde sur "
    "elle un carnet de cartes qu'elle ne montre à personne. L'utilisateur incarne le capitaine "
    "du navire, et la dernière escale s'est mal terminée."
)

# A distractor containing one of these words could be the fact a query needs; none may.
FORBIDDEN_WORDS: frozenset[str] = frozenset(
    """
    sœur sœurs fille lina margaux tom thomas zoo éléphant éléphants courir course coureur
    jogging footing marathon semi-marathon cheville entorse kiné kinésithérapeute infirmier
    infirmière réanimation concours garde gardes réviser révise révisions révision pirate
    pirates capitaine morvan brumes noix cajou amandes arachides allergique allergie enceinte
    accouche accoucher bébé naissance nantes rezé biscotte tárrega fumer cigarette
    """.split()
)


@dataclass(frozen=True, slots=True)
class Distractor:
    text: str
    type: str
    theme: str


# --- vocabularies ----------------------------------------------------------------------------

_MALE_NAMES = (
    "Julien Hugo Karim Mathieu Antoine Rachid Pierre Nicolas Baptiste Yann Sébastien Olivier "
    "Mehdi Louis Théo Vincent Damien Florian Guillaume Jérôme Kevin Loïc Romain Samuel Bruno"
).split()
_FEMALE_NAMES = (
    "Camille Sarah Léa Nadia Claire Élodie Sophie Amandine Inès Julie Laure Manon Pauline "
    "Yasmine Chloé Émilie Hélène Nathalie Audrey Fatou Justine Marion Océane Valérie Agathe"
).split()

# (possessive form, indefinite form, gender)
_RELATIVES = (
    ("son collègue", "un collègue", "m"),
    ("sa collègue", "une collègue", "f"),
    ("son cousin", "un cousin", "m"),
    ("sa cousine", "une cousine", "f"),
    ("son oncle", "un oncle", "m"),
    ("sa tante", "une tante", "f"),
    ("son voisin", "un voisin", "m"),
    ("sa voisine", "une voisine", "f"),
    ("son ami", "un ami", "m"),
    ("son amie", "une amie", "f"),
    ("son beau-frère", "un beau-frère", "m"),
    ("sa belle-mère", "une belle-mère", "f"),
    ("son neveu", "un neveu", "m"),
    ("sa nièce", "une nièce", "f"),
    ("son parrain", "un parrain", "m"),
    ("sa marraine", "une marraine", "f"),
    ("son frère", "un frère", "m"),
    ("sa grand-mère", "une grand-mère", "f"),
    ("son filleul", "un filleul", "m"),
    ("sa filleule", "une filleule", "f"),
    ("son meilleur ami", "un meilleur ami", "m"),
    ("sa meilleure amie", "une meilleure amie", "f"),
    ("son ancien colocataire", "un ancien colocataire", "m"),
    ("son ancienne colocataire", "une ancienne colocataire", "f"),
)
_WORK_RELATIVES = (
    ("son collègue", "m"),
    ("sa collègue", "f"),
    ("son chef", "m"),
    ("sa cheffe", "f"),
    ("son binôme", "m"),
    ("sa binôme", "f"),
    ("le nouveau stagiaire", "m"),
    ("la nouvelle stagiaire", "f"),
    ("son responsable", "m"),
    ("sa responsable", "f"),
)
_CITIES = (
    "Lyon",
    "Lille",
    "Rennes",
    "Bordeaux",
    "Marseille",
    "Toulouse",
    "Brest",
    "Angers",
    "Tours",
    "Dijon",
    "Grenoble",
    "Strasbourg",
    "Montpellier",
    "Nancy",
    "Caen",
    "Rouen",
    "Limoges",
    "Poitiers",
    "Clermont-Ferrand",
    "Annecy",
    "Quimper",
    "Lorient",
    "Vannes",
    "Saint-Malo",
    "La Rochelle",
    "Nîmes",
    "Avignon",
    "Metz",
    "Besançon",
    "Orléans",
)

_FUTURE = (
    "demain",
    "samedi prochain",
    "la semaine prochaine",
    "avant la fin du mois",
    "jeudi soir",
    "le 12 juin",
    "dans quinze jours",
    "cet été",
    "à la rentrée",
    "lundi matin",
    "pour Noël",
    "d'ici la fin de l'année",
    "le week-end prochain",
    "mercredi après-midi",
    "début juillet",
    "pendant les vacances",
    "aux prochaines vacances",
)
_PAST = (
    "hier",
    "le week-end dernier",
    "mardi dernier",
    "l'an dernier",
    "en novembre",
    "il y a deux semaines",
    "pendant les fêtes",
    "la semaine dernière",
    "le mois dernier",
    "en 2019",
    "cet hiver",
    "samedi soir",
    "il y a trois ans",
    "à Pâques",
    "début mars",
)
_FREQUENCY = (
    "tous les mardis soir",
    "le dimanche matin",
    "deux fois par semaine",
    "dès qu'il a un moment",
    "chaque samedi",
    "une fois par mois",
    "pendant ses jours de repos",
    "presque tous les jours",
    "un week-end sur deux",
    "le jeudi midi",
)
_LONG_AGO = (
    "depuis l'enfance",
    "depuis une dizaine d'années",
    "depuis ses études",
    "depuis 2015",
    "depuis trois ans",
    "depuis l'adolescence",
    "depuis peu",
    "depuis son premier voyage",
)


def _a(phrase: str) -> str:
    """French "à" + article, contracted: à le -> au, à les -> aux."""
    if phrase.startswith("le "):
        return "au " + phrase[3:]
    if phrase.startswith("les "):
        return "aux " + phrase[4:]
    return "à " + phrase


def _relative_names() -> list[str]:
    return [
        f"{poss} {name}" for poss, _, gender in _RELATIVES for name in (_MALE_NAMES if gender == "m" else _FEMALE_NAMES)
    ]


def _relative_intros() -> list[str]:
    return [
        f"{indef}, {name},"
        for _, indef, gender in _RELATIVES
        for name in (_MALE_NAMES if gender == "m" else _FEMALE_NAMES)
    ]


def _work_names() -> list[str]:
    return [
        f"{who} {name}" for who, gender in _WORK_RELATIVES for name in (_MALE_NAMES if gender == "m" else _FEMALE_NAMES)
    ]


def _pairs(items: tuple[str, ...]) -> list[str]:
    return [f"{a} {_a(b)}" for a in items for b in items if a != b]


_REL = _relative_names()
_VOCAB: dict[str, list[str] | tuple[str, ...]] = {
    "rel": _REL,
    "rel_intro": _relative_intros(),
    "work_rel": _work_names(),
    "city": _CITIES,
    "future": _FUTURE,
    "past": _PAST,
    "freq": _FREQUENCY,
    "long_ago": _LONG_AGO,
    "sector": (
        "la banque",
        "l'informatique",
        "le bâtiment",
        "une librairie",
        "la restauration",
        "l'aéronautique",
        "une agence immobilière",
        "l'enseignement",
        "le transport routier",
        "une ferme bio",
        "la grande distribution",
        "une start-up de jeux vidéo",
        "une mairie",
        "un garage automobile",
        "un cabinet d'architectes",
        "une compagnie d'assurances",
    ),
    "return_freq": (
        "chaque été",
        "pour Noël",
        "deux fois par an",
        "rarement",
        "dès qu'il peut",
        "à chaque long week-end",
        "pour la fête du village",
    ),
    "owned": (
        "une vieille Renault Clio grise qu'il répare lui-même",
        "un vélo cargo pour faire ses courses",
        "une collection de vinyles de jazz",
        "un piano droit hérité de sa grand-mère",
        "une tente quatre places jamais utilisée",
        "un appareil photo argentique des années 70",
        "une cave à vin qu'il remplit petit à petit",
        "un scooter électrique",
        "un canapé convertible pour les amis de passage",
        "une imprimante 3D",
        "un petit potager sur le toit de son immeuble",
        "un kayak gonflable",
        "une machine à pain qu'il utilise tous les week-ends",
        "une console rétro des années 90",
        "une vieille montre de son grand-père",
        "un barbecue au charbon",
        "un télescope d'occasion",
        "une bibliothèque pleine de romans policiers",
        "un aquarium d'eau douce",
        "un vélo de route en carbone",
    ),
    "owned_since": ("depuis deux ans", "depuis l'an dernier", "depuis peu", "depuis son déménagement", "depuis 2018"),
    "language": (
        "couramment l'espagnol",
        "un peu d'italien",
        "assez bien l'anglais",
        "quelques mots de japonais",
        "l'arabe avec sa famille",
        "le breton",
        "correctement l'allemand",
        "un portugais hésitant",
        "la langue des signes",
        "un peu de russe",
        "le catalan",
        "le wolof",
    ),
    "language_source": (
        "grâce à un échange Erasmus",
        "grâce à sa grand-mère",
        "grâce à des cours du soir",
        "grâce à une application",
        "depuis un séjour au Canada",
        "depuis le lycée",
        "grâce à des séries en version originale",
        "depuis un stage à l'étranger",
    ),
    "sport": (
        "la natation à la piscine municipale",
        "l'escalade dans une salle de bloc",
        "le badminton au gymnase de son quartier",
        "le yoga dans un petit studio près de chez lui",
        "le tennis de table dans un club",
        "le judo avec un groupe d'adultes débutants",
        "l'aviron sur l'Erdre",
        "la pétanque avec les retraités du parc",
        "le vélo de route avec un club",
        "la boxe française dans une salle associative",
        "le volley-ball sur la plage",
        "le tir à l'arc dans un club de la périphérie",
    ),
    "collection": (
        "les timbres",
        "les capsules de champagne",
        "les cartes postales anciennes",
        "les figurines de Star Wars",
        "les vinyles de soul",
        "les boîtes en fer de biscuits",
        "les plaques émaillées",
        "les vieux appareils photo",
        "les mangas en édition originale",
        "les billets de concert",
        "les maillots de football",
        "les minéraux",
        "les cartes de randonnée",
        "les pièces de monnaie étrangères",
        "les magnets de voyage",
    ),
    "craft": (
        "de la poterie",
        "de l'aquarelle",
        "du jardinage sur son balcon",
        "de la photo de rue",
        "de la menuiserie dans le garage de son père",
        "du tricot devant la télé",
        "des puzzles de mille pièces",
        "de la pâtisserie",
        "du modélisme ferroviaire",
        "de la couture",
        "du bricolage électronique",
        "de la calligraphie",
        "des mots croisés",
        "du dessin au fusain",
        "de la reliure",
    ),
    "series": (
        "The Wire",
        "Kaamelott",
        "Dix pour cent",
        "Le Bureau des légendes",
        "Breaking Bad",
        "The Office",
        "Lupin",
        "Fargo",
        "Mad Men",
        "Engrenages",
        "Better Call Saul",
        "Severance",
        "Succession",
        "The Crown",
        "Dark",
    ),
    "season": ("un", "deux", "trois", "quatre", "cinq", "six"),
    "book": (
        "un roman de Fred Vargas",
        "L'Étranger de Camus",
        "une biographie de Marie Curie",
        "un manga de cuisine",
        "un essai sur le sommeil",
        "Les Misérables",
        "un polar islandais",
        "une BD de Riad Sattouf",
        "Dune",
        "un guide de randonnée des Pyrénées",
        "un livre sur la permaculture",
        "les mémoires de Michelle Obama",
        "un roman d'Amélie Nothomb",
        "un recueil de nouvelles de Maupassant",
        "Le Comte de Monte-Cristo",
        "un livre de développement personnel",
        "un roman de science-fiction chinois",
        "un livre sur les débuts du jazz",
    ),
    "reading_moment": (
        "avant de dormir",
        "dans le tram",
        "le dimanche",
        "pendant sa pause déjeuner",
        "par petits bouts",
        "au bord de la piscine",
    ),
    "appointment": (
        "chez le dentiste pour un détartrage",
        "chez le dentiste pour une carie",
        "chez l'ophtalmologue pour renouveler ses lunettes",
        "chez l'ophtalmologue pour un contrôle de la vue",
        "chez le dermatologue pour un grain de beauté à surveiller",
        "chez le dermatologue pour son eczéma",
        "chez l'ORL pour des acouphènes",
        "chez l'ORL pour une otite qui traîne",
        "chez son médecin traitant pour un renouvellement d'ordonnance",
        "chez son médecin traitant pour un bilan sanguin",
        "chez l'ostéopathe pour un torticolis",
        "chez l'ostéopathe pour des douleurs aux épaules",
        "au centre de radiologie pour une échographie",
        "chez le médecin du travail pour sa visite annuelle",
    ),
    "ailment": (
        "de migraines",
        "d'eczéma",
        "du rhume des foins",
        "d'insomnies",
        "d'une tendinite au poignet droit",
        "de reflux",
        "d'acouphènes",
        "de douleurs aux cervicales",
        "de crises d'angoisse",
        "de maux de ventre",
    ),
    "ailment_when": (
        "depuis l'automne",
        "quand il est stressé",
        "au printemps",
        "depuis son déménagement",
        "par périodes",
        "depuis quelques semaines",
        "surtout en hiver",
    ),
    "medicine": (
        "de la vitamine D",
        "un traitement pour la thyroïde",
        "des gouttes pour les yeux",
        "un antihistaminique",
        "du magnésium",
        "des probiotiques",
        "un sirop pour la toux",
        "de la mélatonine",
    ),
    "medicine_rhythm": ("tous les matins", "le soir au coucher", "une fois par semaine"),
    "medicine_since": (
        "depuis un mois",
        "depuis l'hiver",
        "depuis deux ans",
        "depuis sa dernière prise de sang",
        "depuis peu",
    ),
    "old_job": (
        "cinq ans comme serveur",
        "deux étés comme moniteur de colonie",
        "un an comme livreur à vélo",
        "trois ans comme caissier",
        "quelques mois comme vendeur de chaussures",
        "six ans dans une usine de yaourts",
        "deux ans comme surveillant dans un collège",
        "un été comme saisonnier dans les vignes",
        "un an comme standardiste",
        "quatre ans comme magasinier",
    ),
    "old_job_when": (
        "avant de reprendre ses études",
        "avant de changer de voie",
        "pendant ses études",
        "avant de déménager",
    ),
    "pet": (
        "un chien nommé",
        "un lapin nommé",
        "un hamster nommé",
        "une tortue nommée",
        "un perroquet nommé",
        "un poisson rouge nommé",
        "un cochon d'Inde nommé",
        "une chienne nommée",
    ),
    "pet_name": (
        "Caramel",
        "Oscar",
        "Filou",
        "Plume",
        "Gribouille",
        "Rocky",
        "Moka",
        "Tango",
        "Câline",
        "Flocon",
        "Pirouette",
    ),
    "project": (
        "la refonte du planning de l'équipe",
        "l'inventaire du matériel",
        "l'accueil des nouveaux arrivants",
        "le déménagement du service au deuxième étage",
        "un dossier de subvention pour la région",
        "la mise en place d'un nouveau logiciel",
        "un rapport pour la direction",
        "la préparation d'un audit qualité",
        "la journée portes ouvertes",
        "le tri des archives",
        "un projet de jardin partagé dans la cour",
        "le nouveau protocole d'hygiène",
    ),
    "work_topic": (
        "ses congés d'été",
        "une augmentation",
        "un changement d'horaires",
        "un conflit dans l'équipe",
        "sa formation continue",
        "son entretien annuel",
        "un nouveau protocole",
        "le budget de l'année",
        "le remplacement d'un collègue malade",
        "l'organisation des astreintes",
    ),
    "taste_verb": (
        "adore",
        "aime beaucoup",
        "n'aime pas",
        "déteste",
        "ne supporte pas",
        "apprécie",
        "a un faible pour",
    ),
    "taste": (
        "les endives au jambon",
        "la cuisine thaïlandaise",
        "les huîtres",
        "le fromage de chèvre",
        "la coriandre",
        "les plats très épicés",
        "le chocolat noir",
        "les tartes au citron",
        "les crêpes au sarrasin",
        "les sushis",
        "la choucroute",
        "les lasagnes",
        "les fruits de mer",
        "le jazz manouche",
        "le rap français des années 90",
        "la musique classique",
        "les chansons de Brassens",
        "le metal",
        "l'électro",
        "la variété française",
        "l'opéra",
        "les comédies musicales",
        "les films de science-fiction",
        "les westerns",
        "les documentaires animaliers",
        "les comédies romantiques",
        "les films de Miyazaki",
        "les films d'auteur",
        "la pluie",
        "les longues soirées d'hiver",
        "le bruit des tondeuses le dimanche",
        "les trajets en train",
        "les jeux de société",
        "les parcs d'attractions",
        "les grandes surfaces le samedi",
        "les randonnées en montagne",
        "les brocantes",
        "la foule",
        "les karaokés",
        "les matchs de rugby",
        "le football à la télé",
        "le camping",
        "les réveils en musique",
        "les émissions de cuisine",
        "les repas de famille qui s'éternisent",
    ),
    "pref_pair": (
        _pairs(("la montagne", "la mer", "la campagne", "la ville"))
        + _pairs(("l'automne", "le printemps", "l'été", "l'hiver"))
        + _pairs(("la bière", "le vin rouge", "le cidre", "les jus de fruits"))
        + _pairs(("le cinéma", "le théâtre", "les concerts", "les restaurants"))
        + _pairs(("les romans", "les BD", "les essais", "les magazines"))
        + _pairs(("le train", "la voiture", "le vélo", "le bus"))
        + _pairs(("les chiens", "les chats", "les oiseaux"))
    ),
    "music": (
        "du jazz",
        "du rap",
        "des podcasts de sciences",
        "la radio",
        "de la musique classique",
        "de vieux tubes des années 80",
        "de la musique bretonne",
        "des livres audio",
        "du reggae",
        "de l'électro",
        "du rock",
        "de la bossa nova",
        "de la chanson française",
    ),
    "activity": (
        "cuisine",
        "conduit",
        "fait le ménage",
        "travaille",
        "n'arrive pas à dormir",
        "bricole",
        "fait du sport",
        "prend le train",
        "repasse",
        "se douche",
    ),
    "dish": (
        "une pizza aux quatre fromages",
        "un tajine aux pruneaux",
        "un pad thaï",
        "un burger végétarien",
        "des moules-frites",
        "un bo bun",
        "une entrecôte saignante",
        "une galette complète",
        "un poke bowl",
        "des raviolis chinois",
        "une paella",
        "un croque-monsieur",
    ),
    "restaurant": (
        "au restaurant",
        "chez le traiteur du coin",
        "en livraison le vendredi soir",
        "à la brasserie près de son travail",
        "au food truck du marché",
        "dans les restaurants de gare",
        "en vacances",
        "avec ses collègues",
    ),
    "leisure_time": ("ses dimanches après-midi", "ses soirées", "ses jours de repos", "ses vacances", "ses pauses"),
    "leisure": (
        "flâner dans les librairies",
        "jouer aux jeux vidéo",
        "cuisiner pour ses amis",
        "regarder des matchs de rugby",
        "se promener au bord de l'eau",
        "faire la sieste",
        "bricoler",
        "jardiner",
        "chiner dans les brocantes",
        "écouter des podcasts",
        "faire de longues balades à vélo",
        "regarder des documentaires",
    ),
    "comm_pref": (
        "qu'on lui écrive plutôt qu'on l'appelle",
        "qu'on aille droit au but",
        "qu'on ne lui parle pas de politique",
        "qu'on évite de lui parler de travail le week-end",
        "qu'on le tutoie",
        "qu'on lui envoie des messages courts",
        "qu'on lui demande avant de l'appeler",
        "qu'on le prévienne à l'avance des changements de programme",
        "qu'on lui donne des conseils concrets plutôt que des encouragements",
        "qu'on lui réponde avec un peu d'humour",
    ),
    "favour": (
        "l'aider à déménager",
        "l'aider à repeindre sa cuisine",
        "lui rendre sa perceuse",
        "l'appeler",
        "passer le voir",
        "lui prêter sa voiture",
        "lui envoyer les photos du mariage",
        "garder son chien",
        "l'accompagner à son rendez-vous à la banque",
        "lui préparer un couscous",
        "l'emmener au cinéma",
        "relire sa lettre de motivation",
        "l'aider à monter une armoire",
        "lui rapporter du fromage de Savoie",
        "lui installer une imprimante",
        "l'accompagner à un concert",
        "lui trouver un bon plombier",
        "lui rembourser les cinquante euros qu'il lui doit",
        "l'emmener à l'aquarium",
        "l'aider à préparer son code de la route",
        "lui apprendre à jouer aux échecs",
        "l'emmener voir un match de rugby",
        "lui faire visiter son quartier",
    ),
    "event": (
        "son mariage",
        "sa crémaillère",
        "son anniversaire",
        "son spectacle de théâtre",
        "sa soutenance",
        "son concert de fin d'année",
        "son pot de départ",
        "son match de handball",
    ),
    "resolution": (
        "ranger le garage",
        "lire un livre par mois",
        "se coucher avant minuit",
        "moins regarder son téléphone le soir",
        "reprendre la natation",
        "apprendre à faire son pain",
        "mettre de côté cent euros par mois",
        "trier ses photos de vacances",
        "appeler sa grand-mère chaque dimanche",
        "finir le puzzle du salon",
        "manger moins de viande",
        "passer son permis moto",
        "réparer la fuite de la salle de bains",
        "apprendre à nager le crawl",
        "se remettre au dessin",
    ),
    "resolution_when": (
        "d'ici l'été",
        "cette année",
        "avant la fin du mois",
        "à partir de lundi",
        "avant ses quarante ans",
        "pour la rentrée",
        "dès que possible",
    ),
    "tell": (
        "comment s'est passé son rendez-vous à la banque",
        "la fin du film qu'il regardait",
        "le résultat du match de dimanche",
        "sa visite chez le notaire",
        "comment s'est terminé le repas de famille",
        "ce qu'il a pensé du restaurant coréen",
        "le dénouement de sa dispute avec son voisin",
    ),
    "road": (
        "sur la rocade de Rennes",
        "sur l'autoroute vers Bordeaux",
        "en pleine campagne",
        "sur le parking du supermarché",
        "dans une petite route de montagne",
        "sur le périphérique",
    ),
    "artist": (
        "Stromae",
        "Angèle",
        "Orelsan",
        "Christine and the Queens",
        "Vianney",
        "Ibrahim Maalouf",
        "Zaz",
        "Louise Attaque",
        "Matthieu Chedid",
        "IAM",
        "Jain",
        "Calogero",
    ),
    "concert_note": (
        "et en est ressorti ému",
        "mais le son était mauvais",
        "et a perdu la voix à force de chanter",
        "sous une pluie battante",
        "avec des places au premier rang",
    ),
    "party_place": (
        "dans un restaurant italien",
        "dans un bowling",
        "chez lui",
        "au bord du lac",
        "dans un bar à jeux",
        "dans une guinguette",
        "dans un escape game",
    ),
    "quarrel": (
        "la politique",
        "l'héritage de leur grand-père",
        "un prêt d'argent jamais rendu",
        "l'organisation des fêtes",
        "une place de parking",
        "le bruit",
        "un match de foot",
        "le choix des vacances",
        "une remarque sur son travail",
    ),
    "lost": (
        "ses clés",
        "son portefeuille",
        "son téléphone",
        "ses lunettes de soleil",
        "son écharpe préférée",
        "son badge du travail",
        "un gant",
        "sa carte de bus",
        "son parapluie",
    ),
    "lost_where": (
        "dans le métro",
        "au marché",
        "dans un taxi",
        "à la plage",
        "au cinéma",
        "dans le train pour Lyon",
        "à la piscine",
        "dans un bar",
        "au parc",
    ),
    "visit": (
        "le Mont-Saint-Michel",
        "les châteaux de la Loire",
        "le musée d'Orsay",
        "le Futuroscope",
        "les calanques de Marseille",
        "le Puy du Fou",
        "la dune du Pilat",
        "la grotte de Lascaux",
        "la cité de Carcassonne",
        "le viaduc de Millau",
        "les falaises d'Étretat",
        "le pont du Gard",
        "les gorges du Verdon",
        "l'aquarium de La Rochelle",
        "le marché de Noël de Strasbourg",
    ),
    "visit_opinion": ("magnifique", "décevant", "trop touristique", "inoubliable", "épuisant mais génial"),
    "stuck": (
        "deux heures dans un TGV",
        "toute une nuit à l'aéroport de Lyon",
        "trois heures dans les bouchons",
        "vingt minutes dans un ascenseur",
        "une demi-journée sur une aire d'autoroute",
    ),
    "stuck_cause": ("d'une panne", "d'une grève", "de la neige", "d'un accident", "d'un orage"),
    "cooked": (
        "un bœuf bourguignon",
        "un gâteau au chocolat",
        "une blanquette de veau",
        "des lasagnes maison",
        "une tarte tatin",
        "un curry de légumes",
        "un couscous",
        "une quiche lorraine",
    ),
    "cooked_issue": (
        "tout a brûlé",
        "tout le monde a adoré",
        "il a oublié le sel",
        "la cuisson était ratée",
        "il n'est rien resté",
    ),
    "since_seen": ("dix ans", "des mois", "le lycée", "leur dernière dispute", "le mariage de leurs amis"),
    "met_place": (
        "au supermarché",
        "dans le train",
        "à un enterrement",
        "à la sortie du cinéma",
        "sur un quai de gare",
        "à la boulangerie",
    ),
    "prize": (
        "un panier garni à la tombola de son quartier",
        "un tournoi de belote",
        "cinquante euros au loto",
        "le prix de photo amateur de sa ville",
        "un quiz au bar du coin",
        "un bon d'achat dans une librairie",
    ),
    "lodging": (
        "un gîte",
        "un mobil-home",
        "une chambre d'hôtes",
        "un petit appartement",
        "une cabane dans les arbres",
    ),
    "holiday_place": (
        "dans le Vercors",
        "près d'Annecy",
        "sur l'île de Ré",
        "dans le Périgord",
        "en Corse",
        "au Pays basque",
        "dans les Vosges",
        "en Ardèche",
        "dans le Finistère",
    ),
    "holiday_when": (
        "la Toussaint",
        "le mois d'août",
        "le pont de l'Ascension",
        "les vacances de février",
        "quelques jours en juillet",
    ),
    "dream_place": (
        "au Japon",
        "en Islande",
        "au Canada",
        "en Écosse",
        "au Portugal",
        "au Maroc",
        "en Norvège",
        "au Vietnam",
        "en Grèce",
        "au Mexique",
    ),
    "dream_when": (
        "un jour",
        "pour ses quarante ans",
        "quand il aura mis assez d'argent de côté",
        "l'été prochain",
        "avec ses amis d'enfance",
        "en sac à dos",
    ),
    "appliance": (
        "son lave-linge",
        "le chauffe-eau",
        "sa voiture",
        "la porte du garage",
        "son vélo",
        "l'écran de son téléphone",
        "le lave-vaisselle",
        "la chaudière",
        "son ordinateur portable",
    ),
    "room": ("sa chambre", "le salon", "la cuisine", "l'entrée", "son bureau", "la salle de bains"),
    "colour": ("bleu canard", "vert sauge", "blanc cassé", "jaune moutarde", "gris perle", "terracotta"),
    "saving": (
        "un nouveau canapé",
        "un voyage au Japon",
        "un vélo électrique",
        "des travaux dans sa salle de bains",
        "une voiture d'occasion",
        "un ordinateur plus puissant",
        "un week-end à Venise",
    ),
    "waiting": (
        "le remboursement de sa mutuelle",
        "son nouveau passeport",
        "une réponse de sa banque pour un prêt",
        "un colis commandé en ligne",
        "le devis du plombier",
        "sa carte grise",
        "la réponse du propriétaire",
    ),
    "waiting_since": ("depuis trois semaines", "depuis un mois", "depuis plus de deux mois", "depuis lundi"),
    "charity": (
        "aux Restos du cœur",
        "dans une association de quartier",
        "à la SPA",
        "dans un club de foot pour enfants",
        "à la bibliothèque de son quartier",
        "à la Croix-Rouge",
        "dans une épicerie solidaire",
    ),
    "city_opinion": (
        "trop bruyante",
        "très agréable à vivre",
        "sans grand charme",
        "magnifique au printemps",
        "trop chère",
        "idéale pour sortir le soir",
    ),
    "drink": (
        "une tisane",
        "un chocolat chaud",
        "un verre de vin rouge",
        "une bière",
        "un jus d'orange pressé",
        "un grand verre d'eau",
        "un verre de cidre",
    ),
    "drink_when": ("le soir en rentrant", "au petit-déjeuner", "le dimanche midi", "après le sport", "avant de dormir"),
    "game": (
        "aux échecs en ligne",
        "à un jeu de rôle médiéval",
        "à Mario Kart",
        "à la belote",
        "au Scrabble",
        "à Catan",
        "à des jeux de plateau coopératifs",
        "à un jeu vidéo de gestion de ville",
    ),
}

# (theme, type, pattern). The theme is only for the bench's printout of the pool.
_TEMPLATES: tuple[tuple[str, str, str], ...] = (
    ("famille", "fact", "L'utilisateur a {rel_intro} qui vit à {city} et travaille dans {sector}."),
    ("famille", "fact", "L'utilisateur a grandi à {city} et y retourne {return_freq}."),
    ("maison", "fact", "L'utilisateur possède {owned} {owned_since}."),
    ("langues", "fact", "L'utilisateur parle {language} {language_source}."),
    ("sport", "fact", "L'utilisateur pratique {sport} {freq}."),
    ("loisirs", "fact", "L'utilisateur collectionne {collection} {long_ago}."),
    ("loisirs", "fact", "L'utilisateur fait {craft} {freq}."),
    ("loisirs", "fact", "L'utilisateur regarde la série {series} et en est à la saison {season}."),
    ("loisirs", "fact", "L'utilisateur lit en ce moment {book} {reading_moment}."),
    ("loisirs", "fact", "L'utilisateur joue {game} avec {rel} {freq}."),
    ("santé", "fact", "L'utilisateur a rendez-vous {future} {appointment}."),
    ("santé", "fact", "L'utilisateur souffre {ailment} {ailment_when}."),
    ("santé", "fact", "L'utilisateur prend {medicine} {medicine_rhythm} {medicine_since}."),
    ("travail", "fact", "L'utilisateur a travaillé {old_job} {old_job_when}."),
    ("travail", "fact", "L'utilisateur travaille avec {work_rel} sur {project}."),
    ("travail", "fact", "L'utilisateur a une réunion {future} avec {work_rel} au sujet de {work_topic}."),
    ("enfance", "fact", "L'utilisateur avait {pet} {pet_name} quand il était enfant."),
    ("vacances", "fact", "L'utilisateur a réservé {lodging} {holiday_place} pour {holiday_when}."),
    ("maison", "fact", "L'utilisateur doit faire réparer {appliance} {future}."),
    ("argent", "fact", "L'utilisateur économise pour {saving}."),
    ("argent", "fact", "L'utilisateur attend {waiting} {waiting_since}."),
    ("engagement", "fact", "L'utilisateur est bénévole {charity} {freq}."),
    ("goûts", "preference", "L'utilisateur {taste_verb} {taste}."),
    ("goûts", "preference", "L'utilisateur préfère {pref_pair}."),
    ("goûts", "preference", "L'utilisateur écoute {music} quand il {activity}."),
    ("goûts", "preference", "L'utilisateur commande toujours {dish} {restaurant}."),
    ("goûts", "preference", "L'utilisateur aime passer {leisure_time} à {leisure}."),
    ("goûts", "preference", "L'utilisateur préfère {comm_pref}."),
    ("goûts", "preference", "L'utilisateur trouve {city} {city_opinion}."),
    ("goûts", "preference", "L'utilisateur boit {drink} {drink_when}."),
    ("vacances", "preference", "L'utilisateur rêve de partir {dream_place} {dream_when}."),
    ("promesses", "promise", "L'utilisateur a promis à {rel} de {favour} {future}."),
    ("promesses", "promise", "L'utilisateur a promis à {rel} de venir à {event} {future}."),
    ("promesses", "promise", "L'utilisateur s'est promis de {resolution} {resolution_when}."),
    ("promesses", "promise", "L'utilisateur a promis au personnage de lui raconter {tell}."),
    ("épisodes", "episode", "L'utilisateur a crevé un pneu {road} {past}."),
    ("épisodes", "episode", "L'utilisateur a vu {artist} en concert à {city} {past} {concert_note}."),
    ("épisodes", "episode", "L'utilisateur a fêté l'anniversaire de {rel} {party_place} {past}."),
    ("épisodes", "episode", "L'utilisateur s'est disputé avec {rel} {past} au sujet de {quarrel}."),
    ("épisodes", "episode", "L'utilisateur a perdu {lost} {lost_where} {past}."),
    ("épisodes", "episode", "L'utilisateur a visité {visit} {past} et a trouvé ça {visit_opinion}."),
    ("épisodes", "episode", "L'utilisateur est resté bloqué {stuck} {past} à cause {stuck_cause}."),
    ("épisodes", "episode", "L'utilisateur a cuisiné {cooked} pour {rel} {past} et {cooked_issue}."),
    (
        "épisodes",
        "episode",
        "L'utilisateur a croisé {rel} {met_place} {past}, pour la première fois depuis {since_seen}.",
    ),
    ("épisodes", "episode", "L'utilisateur a aidé {rel} à déménager à {city} {past}."),
    ("épisodes", "episode", "L'utilisateur a gagné {prize} {past}."),
    ("maison", "episode", "L'utilisateur a repeint {room} en {colour} {past}."),
)

# Shares of memory types among distractors: facts first, as in a real profile.
TYPE_SHARES: dict[str, float] = {"fact": 0.42, "preference": 0.15, "promise": 0.18, "episode": 0.25}

_SLOT = re.compile(r"\{(\w+)\}")
_WORD = re.compile(r"[^\W_]+(?:-[^\W_]+)*")
# A slot lands after "de" or "à" in some patterns: French contracts and elides there.
_CONTRACTIONS = (
    (re.compile(r"\bde le "), "du "),
    (re.compile(r"\bde les "), "des "),
    (re.compile(r"\bà le "), "au "),
    (re.compile(r"\bà les "), "aux "),
    (re.compile(r"\bde ([aeiouyéèêâîôû])"), r"d'\1"),
)


def _french(text: str) -> str:
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    return text


def _space(pattern: str) -> int:
    size = 1
    for slot in _SLOT.findall(pattern):
        size *= len(_VOCAB[slot])
    return size


def forbidden_words_in(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w in FORBIDDEN_WORDS}


def distractor_pool(size: int, seed: int = 0) -> list[Distractor]:
    """`size` distinct distractor memories, always the same ones for the same (size, seed).

    A type is drawn with the shares of `TYPE_SHARES`, then one of its templates with a weight
    that grows with how many sentences it can make (capped, so that the large templates do not
    drown the others), then each slot uniformly.
    """
    rng = random.Random(seed)
    types = list(TYPE_SHARES)
    by_type = {t: [tpl for tpl in _TEMPLATES if tpl[1] == t] for t in types}
    weights = {t: [min(_space(tpl[2]), 300) for tpl in by_type[t]] for t in types}
    seen: set[str] = set()
    out: list[Distractor] = []
    attempts = 0
    while len(out) < size:
        attempts += 1
        if attempts > size * 20:
            raise RuntimeError(f"templates cannot make {size} distinct distractors")
        mtype = rng.choices(types, [TYPE_SHARES[t] for t in types])[0]
        theme, _, pattern = rng.choices(by_type[mtype], weights[mtype])[0]
        text = _french(_SLOT.sub(lambda m: rng.choice(_VOCAB[m.group(1)]), pattern))
        if text in seen:
            continue
        bad = forbidden_words_in(text)
        if bad:
            raise ValueError(f"distractor would answer a query ({sorted(bad)}): {text}")
        seen.add(text)
        out.append(Distractor(text=text, type=mtype, theme=theme))
    return out


def template_space() -> int:
    """How many distinct sentences the templates can make."""
    return sum(_space(pattern) for _, _, pattern in _TEMPLATES)
