"""Labelled replacements: (old shown fact, text the model proposed to replace it, user's message).

SAME: true corrections of the same fact (change of team, town, pet's name, age…), written from
the prototype's extractor session (docs/design.md, "Write path") and the kind of updates users
make, each with the message that caused it.
DIFFERENT: a new fact written over a neighbour that was shown to the model — the prototype's
vélo/mercredi case first, then the same mistake on other facts of one profile. HARD: wrong
replacements that share the old fact's verb or frame ("habite à Nantes" → "habite avec sa
sœur"), added after a review showed that subject overlap alone cannot tell them from true
corrections (both score 0.50).
"""

SAME: list[tuple[str, str, str]] = [
    (
        "L'utilisateur fait partie de l'équipe Paiements.",
        "L'utilisateur fait partie de l'équipe Logistique.",
        "Ah, et changement depuis lundi : j'ai quitté l'équipe Paiements pour la Logistique.",
    ),
    (
        "L'utilisateur habite à Nantes.",
        "L'utilisateur habite à Lyon depuis mars.",
        "J'ai déménagé à Lyon en mars, au fait.",
    ),
    (
        "L'utilisateur vient au bureau en vélo.",
        "L'utilisateur vient au bureau en voiture.",
        "Maintenant je viens au bureau en voiture, le vélo c'est fini.",
    ),
    ("L'utilisateur aime le jazz.", "L'utilisateur n'aime plus le jazz.", "Le jazz, franchement, j'en peux plus."),
    (
        "L'utilisateur a un chat nommé Pixel.",
        "L'utilisateur a un chat nommé Biscuit.",
        "Non, mon chat ne s'appelle pas Pixel, c'est Biscuit !",
    ),
    (
        "L'utilisateur travaille comme développeuse backend.",
        "L'utilisateur travaille comme développeuse frontend.",
        "Je suis passée côté frontend le mois dernier.",
    ),
    (
        "L'utilisateur est allergique aux arachides.",
        "L'utilisateur est allergique aux arachides et aux noix de cajou.",
        "Et les noix de cajou aussi, en plus des arachides.",
    ),
    ("L'utilisateur a 34 ans.", "L'utilisateur a 35 ans.", "J'ai 35 ans depuis hier, plus 34 !"),
    (
        "L'utilisateur s'appelle Camille.",
        "L'utilisateur s'appelle Camille Martin.",
        "Camille Martin, pour le nom complet.",
    ),
    (
        "L'utilisateur joue de la guitare depuis deux ans.",
        "L'utilisateur joue de la guitare depuis trois ans.",
        "Je me suis trompée, ça fait trois ans que je joue, pas deux.",
    ),
    (
        "L'utilisateur utilise Vim comme éditeur.",
        "L'utilisateur utilise VS Code comme éditeur.",
        "J'ai lâché Vim, maintenant c'est VS Code.",
    ),
    (
        "L'utilisateur court 10 km le dimanche.",
        "L'utilisateur court 15 km le dimanche.",
        "Le dimanche je cours 15 km maintenant.",
    ),
    ("L'utilisateur est végétarien.", "L'utilisateur est devenu végétalien.", "Je suis devenu végétalien."),
    (
        "L'utilisateur prépare un marathon en avril.",
        "L'utilisateur prépare un marathon en octobre.",
        "Le marathon est finalement en octobre, pas en avril.",
    ),
    (
        "L'utilisateur a promis d'envoyer le rapport vendredi.",
        "L'utilisateur a promis d'envoyer le rapport lundi.",
        "Le rapport, ce sera lundi plutôt que vendredi.",
    ),
    (
        "L'utilisateur habitait à Rennes.",
        "L'utilisateur habite maintenant à Rennes-Est.",
        "On a déménagé à Rennes-Est.",
    ),
    (
        "L'utilisateur boit trois cafés par jour.",
        "L'utilisateur boit un seul café par jour.",
        "J'ai réduit : un seul café par jour maintenant.",
    ),
    (
        "L'utilisateur apprend le japonais depuis un an.",
        "L'utilisateur apprend le japonais depuis deux ans.",
        "Erreur de ma part, ça fait deux ans que j'apprends le japonais.",
    ),
    (
        "L'utilisateur a une fille de 6 ans, Léa.",
        "L'utilisateur a une fille de 7 ans, Léa.",
        "Léa a eu 7 ans ce week-end, elle n'a plus 6 ans !",
    ),
    (
        "L'utilisateur déteste les réunions du lundi.",
        "L'utilisateur supporte maintenant les réunions du lundi.",
        "Les réunions du lundi, finalement je m'y fais.",
    ),
    ("The user works at a bakery.", "The user works at a bookshop.", "I quit the bakery, I work at a bookshop now."),
    ("The user lives in Leeds.", "The user lives in York now.", "We moved to York last week."),
    ("The user is learning Rust.", "The user is learning Rust and Go.", "Also picking up Go alongside Rust."),
    ("The user's dog is called Max.", "The user's dog is called Rex.", "Actually my dog is called Rex, not Max."),
    (
        "L'utilisateur fait de l'escalade en salle.",
        "L'utilisateur fait de l'escalade en falaise.",
        "Je suis passée de la salle à la falaise !",
    ),
    # An enrichment keeps the whole old fact: replacing it loses nothing.
    (
        "L'utilisateur joue de la guitare.",
        "L'utilisateur joue de la guitare dans un groupe de rock.",
        "Je joue dans un groupe de rock.",
    ),
]

DIFFERENT: list[tuple[str, str, str]] = [
    (
        "L'utilisateur vient au bureau en vélo.",
        "L'utilisateur n'est jamais disponible le mercredi.",
        "Je ne suis jamais disponible le mercredi, c'est mon jour de sport.",
    ),
    (
        "L'utilisateur habite à Nantes.",
        "L'utilisateur fait partie de l'équipe Logistique.",
        "Je bosse dans l'équipe Logistique.",
    ),
    ("L'utilisateur aime le jazz.", "L'utilisateur aime la randonnée.", "J'adore la randonnée."),
    ("L'utilisateur est allergique aux arachides.", "L'utilisateur est végétarien.", "Je suis végétarien, au passage."),
    ("L'utilisateur a un chat nommé Pixel.", "L'utilisateur a une fille de 6 ans.", "Ma fille a 6 ans."),
    (
        "L'utilisateur travaille comme développeuse backend.",
        "L'utilisateur utilise Vim comme éditeur.",
        "J'utilise Vim pour tout.",
    ),
    (
        "L'utilisateur court 10 km le dimanche.",
        "L'utilisateur est disponible le dimanche matin.",
        "Je suis dispo dimanche matin.",
    ),
    (
        "L'utilisateur s'appelle Camille.",
        "L'utilisateur vient d'arriver chez Atelier.",
        "Je viens d'arriver chez Atelier.",
    ),
    (
        "L'utilisateur joue de la guitare.",
        "L'utilisateur joue aux échecs en ligne.",
        "Je joue aux échecs en ligne le soir.",
    ),
    (
        "L'utilisateur prépare un marathon en avril.",
        "L'utilisateur part en vacances en avril.",
        "En avril je pars en vacances.",
    ),
    ("L'utilisateur boit trois cafés par jour.", "L'utilisateur dort mal en ce moment.", "Je dors mal en ce moment."),
    ("L'utilisateur apprend le japonais.", "L'utilisateur regarde beaucoup d'animés.", "Je regarde plein d'animés."),
    (
        "L'utilisateur a promis d'envoyer le rapport vendredi.",
        "L'utilisateur a une réunion importante vendredi.",
        "Grosse réunion vendredi.",
    ),
    (
        "L'utilisateur déteste les réunions du lundi.",
        "L'utilisateur aime commencer tôt le matin.",
        "J'aime bien commencer tôt.",
    ),
    ("L'utilisateur a 34 ans.", "L'utilisateur a un frère à Bordeaux.", "Mon frère vit à Bordeaux."),
    (
        "L'utilisateur fait partie de l'équipe Paiements.",
        "L'utilisateur travaille en télétravail le vendredi.",
        "Le vendredi je suis en télétravail.",
    ),
    ("L'utilisateur préfère le thé au café.", "L'utilisateur préfère les romans policiers.", "Je préfère les polars."),
    ("L'utilisateur a une voiture électrique.", "L'utilisateur a peur de l'avion.", "J'ai peur de l'avion."),
    ("L'utilisateur est fan du FC Nantes.", "L'utilisateur est né à Brest.", "Je suis né à Brest."),
    ("L'utilisateur fait de l'escalade en salle.", "L'utilisateur fait du yoga le mardi.", "Yoga le mardi !"),
    ("The user works at a bakery.", "The user wakes up at 4 am.", "I wake up at 4 am."),
    ("The user lives in Leeds.", "The user likes rainy weather.", "I like rainy weather."),
    ("The user is learning Rust.", "The user is looking for a new job.", "I'm looking for a new job."),
    ("The user's dog is called Max.", "The user's sister is called Anna.", "My sister is called Anna."),
    ("L'utilisateur a un potager.", "L'utilisateur a déménagé en mai.", "J'ai déménagé en mai."),
]

HARD: list[tuple[str, str, str]] = [
    ("L'utilisateur habite à Nantes.", "L'utilisateur habite avec sa sœur.", "J'habite avec ma sœur."),
    (
        "L'utilisateur est allergique aux arachides.",
        "L'utilisateur est allergique aux crustacés.",
        "Je suis aussi allergique aux crustacés.",
    ),
    (
        "L'utilisateur travaille chez Atelier.",
        "L'utilisateur travaille de nuit.",
        "Cette semaine je travaille de nuit.",
    ),
    ("L'utilisateur a un chat nommé Pixel.", "L'utilisateur a un chat et un chien.", "J'ai un chat et un chien."),
    ("L'utilisateur aime le thé vert.", "L'utilisateur aime le thé noir.", "J'aime aussi le thé noir."),
    ("L'utilisateur parle anglais.", "L'utilisateur parle espagnol.", "Je parle espagnol."),
    (
        "L'utilisateur a une fille de 6 ans, Léa.",
        "L'utilisateur a un fils de 9 ans, Hugo.",
        "Et mon fils Hugo a 9 ans.",
    ),
    ("The user lives in Leeds.", "The user lives with two flatmates.", "I live with two flatmates."),
    ("The user works at a bakery.", "The user works on weekends.", "I work on weekends too."),
]

# Facts about the user's relatives (issue 22, item 9). PEOPLE_SAME: the same person's fact
# changed, or the message names the person the old fact was about. PEOPLE_OTHER: the message
# names another person with a change word; the old person's fact must stay.
PEOPLE_SAME: list[tuple[str, str, str]] = [
    (
        "La sœur de l'utilisateur habite à Paris.",
        "La sœur de l'utilisateur habite à Lyon.",
        "Ma sœur a déménagé à Lyon.",
    ),
    (
        "La mère de l'utilisateur travaille dans une banque.",
        "La mère de l'utilisateur travaille à l'hôpital.",
        "Ma mère travaille maintenant à l'hôpital.",
    ),
    (
        "La fille de l'utilisateur joue au tennis.",
        "La fille de l'utilisateur joue au football maintenant.",
        "Ma fille joue au football maintenant.",
    ),
    (
        "La femme de l'utilisateur est infirmière.",
        "La femme de l'utilisateur est devenue professeure.",
        "Ma femme est devenue professeure.",
    ),
    (
        "La sœur de l'utilisateur habite à Paris.",
        "Le frère de l'utilisateur habite à Paris.",
        "Ma sœur est partie de Paris, c'est mon frère qui y habite maintenant.",
    ),
]

PEOPLE_OTHER: list[tuple[str, str, str]] = [
    (
        "La sœur de l'utilisateur habite à Paris.",
        "Le frère de l'utilisateur habite à Paris.",
        "Mon frère a déménagé à Paris.",
    ),
    (
        "La mère de l'utilisateur travaille à l'hôpital.",
        "Le père de l'utilisateur travaille à l'hôpital.",
        "Mon père a commencé à l'hôpital, il y travaille maintenant.",
    ),
    (
        "La fille de l'utilisateur joue au football.",
        "Le fils de l'utilisateur joue au football.",
        "Mon fils joue au football maintenant.",
    ),
    (
        "La femme de l'utilisateur est professeure.",
        "Tom, l'ami de l'utilisateur, est devenu professeur.",
        "Mon ami Tom est devenu professeur.",
    ),
    (
        "La grand-mère de l'utilisateur vit à Dublin.",
        "La tante de l'utilisateur vit à Dublin.",
        "Ma tante vit à Dublin maintenant.",
    ),
]
