"""Labelled replacement pairs (old shown fact, text the model proposed as its replacement).

SAME: true corrections of the same fact (the change of team, of town, of pet's name…), written
from seed 001's session and the kind of updates users make. DIFFERENT: a new fact written over a
neighbour that was shown to the model — seed 001's vélo/mercredi case first, then the same
mistake on other neighbouring facts of one user profile.
"""

SAME: list[tuple[str, str]] = [
    ("L'utilisateur fait partie de l'équipe Paiements.", "L'utilisateur fait partie de l'équipe Logistique."),
    ("L'utilisateur habite à Nantes.", "L'utilisateur habite à Lyon depuis mars."),
    ("L'utilisateur vient au bureau en vélo.", "L'utilisateur vient au bureau en voiture."),
    ("L'utilisateur aime le jazz.", "L'utilisateur n'aime plus le jazz."),
    ("L'utilisateur a un chat nommé Pixel.", "L'utilisateur a un chat nommé Biscuit."),
    ("L'utilisateur travaille comme développeuse backend.", "L'utilisateur travaille comme développeuse frontend."),
    ("L'utilisateur est allergique aux arachides.", "L'utilisateur est allergique aux arachides et aux noix de cajou."),
    ("L'utilisateur a 34 ans.", "L'utilisateur a 35 ans."),
    ("L'utilisateur s'appelle Camille.", "L'utilisateur s'appelle Camille Martin."),
    ("L'utilisateur joue de la guitare depuis deux ans.", "L'utilisateur joue de la guitare depuis trois ans."),
    ("L'utilisateur utilise Vim comme éditeur.", "L'utilisateur utilise VS Code comme éditeur."),
    ("L'utilisateur court 10 km le dimanche.", "L'utilisateur court 15 km le dimanche."),
    ("L'utilisateur est végétarien.", "L'utilisateur est devenu végétalien."),
    ("L'utilisateur prépare un marathon en avril.", "L'utilisateur prépare un marathon en octobre."),
    ("L'utilisateur a promis d'envoyer le rapport vendredi.", "L'utilisateur a promis d'envoyer le rapport lundi."),
    ("L'utilisateur habitait à Rennes.", "L'utilisateur habite maintenant à Rennes-Est."),
    ("L'utilisateur boit trois cafés par jour.", "L'utilisateur boit un seul café par jour."),
    ("L'utilisateur apprend le japonais depuis un an.", "L'utilisateur apprend le japonais depuis deux ans."),
    ("L'utilisateur a une fille de 6 ans, Léa.", "L'utilisateur a une fille de 7 ans, Léa."),
    ("L'utilisateur déteste les réunions du lundi.", "L'utilisateur supporte maintenant les réunions du lundi."),
    ("The user works at a bakery.", "The user works at a bookshop."),
    ("The user lives in Leeds.", "The user lives in York now."),
    ("The user is learning Rust.", "The user is learning Rust and Go."),
    ("The user's dog is called Max.", "The user's dog is called Rex."),
    ("L'utilisateur fait de l'escalade en salle.", "L'utilisateur fait de l'escalade en falaise."),
]

DIFFERENT: list[tuple[str, str]] = [
    ("L'utilisateur vient au bureau en vélo.", "L'utilisateur n'est jamais disponible le mercredi."),
    ("L'utilisateur habite à Nantes.", "L'utilisateur fait partie de l'équipe Logistique."),
    ("L'utilisateur aime le jazz.", "L'utilisateur aime la randonnée."),
    ("L'utilisateur est allergique aux arachides.", "L'utilisateur est végétarien."),
    ("L'utilisateur a un chat nommé Pixel.", "L'utilisateur a une fille de 6 ans."),
    ("L'utilisateur travaille comme développeuse backend.", "L'utilisateur utilise Vim comme éditeur."),
    ("L'utilisateur court 10 km le dimanche.", "L'utilisateur est disponible le dimanche matin."),
    ("L'utilisateur s'appelle Camille.", "L'utilisateur vient d'arriver chez Atelier."),
    ("L'utilisateur joue de la guitare.", "L'utilisateur joue aux échecs en ligne."),
    ("L'utilisateur prépare un marathon en avril.", "L'utilisateur part en vacances en avril."),
    ("L'utilisateur boit trois cafés par jour.", "L'utilisateur dort mal en ce moment."),
    ("L'utilisateur apprend le japonais.", "L'utilisateur regarde beaucoup d'animés."),
    ("L'utilisateur a promis d'envoyer le rapport vendredi.", "L'utilisateur a une réunion importante vendredi."),
    ("L'utilisateur déteste les réunions du lundi.", "L'utilisateur aime commencer tôt le matin."),
    ("L'utilisateur a 34 ans.", "L'utilisateur a un frère à Bordeaux."),
    ("L'utilisateur fait partie de l'équipe Paiements.", "L'utilisateur travaille en télétravail le vendredi."),
    ("L'utilisateur préfère le thé au café.", "L'utilisateur préfère les romans policiers."),
    ("L'utilisateur a une voiture électrique.", "L'utilisateur a peur de l'avion."),
    ("L'utilisateur est fan du FC Nantes.", "L'utilisateur est né à Brest."),
    ("L'utilisateur fait de l'escalade en salle.", "L'utilisateur fait du yoga le mardi."),
    ("The user works at a bakery.", "The user wakes up at 4 am."),
    ("The user lives in Leeds.", "The user likes rainy weather."),
    ("The user is learning Rust.", "The user is looking for a new job."),
    ("The user's dog is called Max.", "The user's sister is called Anna."),
    ("L'utilisateur a un potager.", "L'utilisateur a déménagé en mai."),
]
