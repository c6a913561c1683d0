"""Every text the bot shows outside the character's own lines, in English and French.

`text(lang, key, **values)` formats one message; `language(locale)` picks the catalogue for a
Discord locale ("fr", "fr-FR" → French; anything else → English). Both catalogues have the same
keys and the same placeholders (a test checks it); a language is added by adding its mapping.
Command names and descriptions are translated from `COMMANDS`, keyed by their English text
(bot/discord_i18n.py hands them to Discord).
"""

from __future__ import annotations

DEFAULT_LANGUAGE = "en"

EN: dict[str, str] = {
    # memory lists
    "no_memories": "No memories yet.",
    "memories_header": "Memories {first}–{last} of {total}:\n",
    "flag_expired": "expired {date}",
    "flag_until": "until {date}",
    "flag_story": "this story",
    # /why
    "why_none": "No turn of yours in this channel yet: talk to me first, then ask /why.",
    "why_head": "Last turn ({at} UTC), message: “{query}”\n{chosen} chosen out of {candidates}",
    "why_degraded": "⚠️ Degraded turn: the embedder did not answer in time, no semantic scores (lexical matches only).",
    "why_score": " score {score}",
    "why_lexical": " lexical match",
    "why_series": " (one of a series of {members} look-alikes, cut to its share of slots)",
    "why_rules": "Rules, always in context (outside the 24-slot budget):",
    "why_lore": "Lore entries that fired (outside the 24-slot budget, their own budget):",
    "why_lore_line": "- {name} — on “{keyword}” ({fate})",
    "why_lore_kept": "{cost} chars",
    "why_lore_left_out": "{cost} chars, left out: over the lore budget",
    "why_anchors": "Anchors (key story facts):",
    "why_summary": "Story summary: {summary}",
    "why_positions": "Character positions served:",
    "why_state": "State: {values}",
    "reason_pinned": "pinned",
    "reason_global": "global",
    "reason_semantic": "recalled by the message",
    "reason_type_quota": "type quota",
    "reason_backfill": "backfill",
    "n_memory": "{n} memory",
    "n_memories": "{n} memories",
    "n_candidate": "{n} candidate",
    "n_candidates": "{n} candidates",
    # /history
    "history_empty": "History is empty: nothing was replaced, merged or forgotten.",
    "history_head": "Archived versions (restore one with /restore <history id>):",
    "history_line": "h{id}: #{memory_id} {operation} on {date} by {cause}{restored} — was “{text}”",
    "history_restored": " (restored)",
    "history_consolidated_into": "consolidated into #{id}",
    "history_consolidations": "Series consolidated into one memory (one /restore brings a whole series back):",
    "history_consolidation_line": "- {date}: {n} memories ({members}) → {now} — /restore {history_id} undoes it",
    "history_consolidation_undone": "undone, the memories are back",
    "history_consolidation_gone": "#{id}, forgotten since",
    "history_anchors": "Anchor removals:",
    "history_anchor_line": "- {date} “{text}” — reason: {reason}",
    # /memory-stats
    "stats_none": "none",
    "stats_total": "{memories} of at most {cap} ({types}); {pinned} pinned; {expired} expired (kept, not served).",
    "stats_cap_reached": "The cap is reached: new memories are refused until some are forgotten.",
    "stats_turns": "Turns: {turns}, of which degraded (no semantic recall): {degraded}.",
    "stats_never_semantic": "Memories never recalled by meaning: {n}.",
    "stats_pending": "Reflections waiting: {n}.",
    "stats_consolidations": "Series consolidated: {n}, holding {members} earlier memories (see /history to undo one).",
    "stats_never_surfaced": "Never surfaced although candidate often ({n}):",
    "stats_never_surfaced_line": "- #{id} {text} (candidate {times}×)",
    # answers to the memory commands
    "remembered": "Remembered as #{id}.",
    "not_remembered": "Not remembered: {reason}.",
    "pinned": "Pinned #{id}.",
    "unpinned": "Unpinned #{id}.",
    "forgot": "Forgot #{id} (see /history to restore it).",
    "no_history_entry": "No history entry h{id} of yours.",
    "restored": "Restored memory #{id}.",
    "no_memory": "You have no memory #{id}.",
    "sharing_now": "Sharing across places is now {state}.",
    "sharing_is": "Sharing across places is {state}. Usage: /share on|off",
    "on": "on",
    "off": "off",
    "storage_failed": (
        "Not done: the bot cannot write to its database right now (its log says why). Nothing was "
        "changed; try again later."
    ),
    # the Discord side
    "failed": "Something went wrong on my side; it was logged. Try again later.",
    "not_yours": "These buttons belong to the person who ran the command.",
    "previous": "◀ Previous",
    "next": "Next ▶",
    "erase_confirm": "This deletes every memory and all history about you, for real. Erase everything?",
    "erase_button": "Erase everything",
    "cancel_button": "Cancel",
    "erasing": "Erasing…",
    "erased": "Erased: {memories} memories and {history} archived versions.",
    "nothing_erased": "Nothing was erased.",
    "nothing_erased_timeout": "Nothing was erased (no answer in time).",
    "export_done": "Everything I store about you: {memories} memories, {history} archived versions, {messages} messages.",
    "remember_not_yours": "I only remember your own messages about you: this one is not yours.",
    "remember_no_text": "That message has no text to remember.",
    "remember_refused": "Not remembered: this bot's operator does not let me talk with you.",
    "unknown_character": "No character is called {name!r} here; the characters are: {names}.",
}

FR: dict[str, str] = {
    "no_memories": "Aucun souvenir pour l'instant.",
    "memories_header": "Souvenirs {first}–{last} sur {total} :\n",
    "flag_expired": "expiré le {date}",
    "flag_until": "jusqu'au {date}",
    "flag_story": "cette histoire",
    "why_none": "Pas encore de tour de ta part dans ce salon : parle-moi d'abord, puis demande /why.",
    "why_head": "Dernier tour ({at} UTC), message : « {query} »\n{chosen} choisi(s) parmi {candidates}",
    "why_degraded": "⚠️ Tour dégradé : l'embedder n'a pas répondu à temps, pas de score sémantique (correspondances lexicales seulement).",
    "why_score": " score {score}",
    "why_lexical": " correspondance lexicale",
    "why_series": " (d'une série de {members} souvenirs semblables, réduite à sa part des places)",
    "why_rules": "Règles, toujours dans le contexte (hors du budget de 24 places) :",
    "why_lore": "Entrées du lorebook déclenchées (hors du budget de 24 places, avec leur propre budget) :",
    "why_lore_line": "- {name} — sur « {keyword} » ({fate})",
    "why_lore_kept": "{cost} caractères",
    "why_lore_left_out": "{cost} caractères, laissée de côté : budget du lore dépassé",
    "why_anchors": "Ancres (faits clés de l'histoire) :",
    "why_summary": "Résumé de l'histoire : {summary}",
    "why_positions": "Positions du personnage servies :",
    "why_state": "État : {values}",
    "reason_pinned": "épinglé",
    "reason_global": "global",
    "reason_semantic": "rappelé par le message",
    "reason_type_quota": "quota par type",
    "reason_backfill": "complément",
    "n_memory": "{n} souvenir",
    "n_memories": "{n} souvenirs",
    "n_candidate": "{n} candidat",
    "n_candidates": "{n} candidats",
    "history_empty": "L'historique est vide : rien n'a été remplacé, fusionné ni oublié.",
    "history_head": "Versions archivées (à restaurer avec /restore <numéro>) :",
    "history_line": "h{id} : #{memory_id} {operation} le {date} par {cause}{restored} — était « {text} »",
    "history_restored": " (restauré)",
    "history_consolidated_into": "consolidé dans #{id}",
    "history_consolidations": "Séries réunies en un seul souvenir (un /restore ramène toute la série) :",
    "history_consolidation_line": "- {date} : {n} souvenirs ({members}) → {now} — /restore {history_id} l'annule",
    "history_consolidation_undone": "annulé, les souvenirs sont revenus",
    "history_consolidation_gone": "#{id}, oublié depuis",
    "history_anchors": "Ancres retirées :",
    "history_anchor_line": "- {date} « {text} » — raison : {reason}",
    "stats_none": "aucun",
    "stats_total": "{memories} sur {cap} au plus ({types}) ; {pinned} épinglé(s) ; {expired} expiré(s) (gardés, pas servis).",
    "stats_cap_reached": "Le plafond est atteint : les nouveaux souvenirs sont refusés tant que certains ne sont pas oubliés.",
    "stats_turns": "Tours : {turns}, dont dégradés (sans rappel sémantique) : {degraded}.",
    "stats_never_semantic": "Souvenirs jamais rappelés par le sens : {n}.",
    "stats_pending": "Réflexions en attente : {n}.",
    "stats_consolidations": "Séries réunies : {n}, qui tiennent {members} souvenirs d'avant (voir /history pour en annuler une).",
    "stats_never_surfaced": "Jamais servis bien que souvent candidats ({n}) :",
    "stats_never_surfaced_line": "- #{id} {text} (candidat {times}×)",
    "remembered": "Retenu sous le numéro #{id}.",
    "not_remembered": "Pas retenu : {reason}.",
    "pinned": "#{id} est épinglé.",
    "unpinned": "#{id} n'est plus épinglé.",
    "forgot": "#{id} est oublié (voir /history pour le restaurer).",
    "no_history_entry": "Tu n'as pas d'entrée d'historique h{id}.",
    "restored": "Souvenir #{id} restauré.",
    "no_memory": "Tu n'as pas de souvenir #{id}.",
    "sharing_now": "Le partage entre lieux est maintenant {state}.",
    "sharing_is": "Le partage entre lieux est {state}. Usage : /share on|off",
    "on": "activé",
    "off": "désactivé",
    "storage_failed": (
        "Pas fait : le bot ne peut pas écrire dans sa base de données en ce moment (son journal dit "
        "pourquoi). Rien n'a changé ; réessaie plus tard."
    ),
    "failed": "Quelque chose a échoué de mon côté ; c'est noté dans le journal. Réessaie plus tard.",
    "not_yours": "Ces boutons appartiennent à la personne qui a lancé la commande.",
    "previous": "◀ Précédent",
    "next": "Suivant ▶",
    "erase_confirm": "Ceci efface pour de vrai tous tes souvenirs et tout ton historique. Tout effacer ?",
    "erase_button": "Tout effacer",
    "cancel_button": "Annuler",
    "erasing": "Effacement…",
    "erased": "Effacé : {memories} souvenirs et {history} versions archivées.",
    "nothing_erased": "Rien n'a été effacé.",
    "nothing_erased_timeout": "Rien n'a été effacé (pas de réponse à temps).",
    "export_done": "Tout ce que je garde sur toi : {memories} souvenirs, {history} versions archivées, {messages} messages.",
    "remember_not_yours": "Je ne retiens que tes propres messages sur toi : celui-ci n'est pas de toi.",
    "remember_no_text": "Ce message n'a pas de texte à retenir.",
    "remember_refused": "Pas retenu : l'opérateur de ce bot ne me laisse pas parler avec toi.",
    "unknown_character": "Aucun personnage ne s'appelle {name!r} ici ; les personnages sont : {names}.",
}

MESSAGES: dict[str, dict[str, str]] = {"en": EN, "fr": FR}

# Command names, descriptions and option texts, by their English text: what Discord shows a
# French-speaking user. Names follow Discord's rule: lower case, no spaces, at most 32.
COMMANDS: dict[str, dict[str, str]] = {
    "fr": {
        "memories": "souvenirs",
        "What I remember about you (only you see the answer)": "Ce dont je me souviens sur toi (toi seul vois la réponse)",
        "type": "type",
        "Show only memories of this type": "N'afficher que les souvenirs de ce type",
        "character": "personnage",
        "Another character than this channel's (start typing to pick)": "Un autre personnage que celui du salon (tape pour choisir)",
        "history": "historique",
        "Archived versions of your memories, to bring back with /restore": "Versions archivées de tes souvenirs, à ramener avec /restore",
        "why": "pourquoi",
        "The memories I used for your last message in this channel, and why": "Les souvenirs utilisés pour ton dernier message dans ce salon, et pourquoi",
        "memory-stats": "stats-souvenirs",
        "Statistics on your memories: never recalled, degraded turns": "Statistiques de tes souvenirs : jamais rappelés, tours dégradés",
        "remember": "retenir",
        "Ask me to remember something about you": "Me demander de retenir quelque chose sur toi",
        "text": "texte",
        "One short sentence about you, as you want it remembered": "Une courte phrase sur toi, telle que tu veux qu'on la retienne",
        "pin": "epingler",
        "Always keep one of your memories in my context": "Toujours garder un de tes souvenirs dans mon contexte",
        "unpin": "desepingler",
        "Stop always keeping a memory in my context": "Ne plus toujours garder un souvenir dans mon contexte",
        "id": "numero",
        "The memory's number (#id); start typing to search yours": "Le numéro du souvenir (#id) ; tape pour chercher parmi les tiens",
        "forget": "oublier",
        "Forget one of your memories (archived: /restore brings it back)": "Oublier un de tes souvenirs (archivé : /restore le ramène)",
        "restore": "restaurer",
        "Bring back an archived version of one of your memories": "Ramener une version archivée d'un de tes souvenirs",
        "history_id": "numero_historique",
        "The archived version's number (h…, see /history); start typing to search": "Le numéro de la version archivée (h…, voir /history) ; tape pour chercher",
        "share": "partage",
        "Use your memories from DMs and other servers here too (on) or not (off)": "Utiliser aussi ici tes souvenirs des MP et d'autres serveurs (on) ou non (off)",
        "state": "etat",
        "on: memories cross places; off (default): each place keeps its own": "on : les souvenirs passent d'un lieu à l'autre ; off (défaut) : chaque lieu garde les siens",
        "export": "exporter",
        "Download everything I store about you, as a JSON file": "Télécharger tout ce que je garde sur toi, en fichier JSON",
        "erase-me": "m-effacer",
        "Delete everything I store about you, for real (asks to confirm)": "Effacer pour de vrai tout ce que je garde sur toi (demande confirmation)",
        "Remember this": "Retenir ceci",
    },
}


def language(locale: object) -> str:
    """The catalogue for a Discord locale: French for any "fr…", English otherwise."""
    code = str(getattr(locale, "value", locale) or "").lower()
    return "fr" if code.startswith("fr") else DEFAULT_LANGUAGE


def text(lang: str, key: str, **values: object) -> str:
    catalogue = MESSAGES.get(lang, EN)
    return catalogue.get(key, EN[key]).format(**values)
