"""Labelled English replacements: (old shown fact, text the model proposed to replace it, user's
message), written like the French corpus for an English-speaking user.

SAME: true corrections of the same fact (team, town, pet's name, age…), each with the message
that caused it. DIFFERENT: a new fact written over a neighbour that was shown to the model.
HARD: wrong replacements that share the old fact's verb or frame ("lives in Leeds" → "lives
with two flatmates").
"""

SAME_EN: list[tuple[str, str, str]] = [
    (
        "The user is on the Payments team.",
        "The user is on the Logistics team.",
        "Oh, and since Monday I've left Payments for Logistics.",
    ),
    ("The user lives in Leeds.", "The user lives in York since March.", "I moved to York in March, by the way."),
    ("The user cycles to the office.", "The user drives to the office.", "I drive to the office now, no more cycling."),
    ("The user likes jazz.", "The user no longer likes jazz.", "Honestly, I can't stand jazz any more."),
    (
        "The user has a cat named Pixel.",
        "The user has a cat named Biscuit.",
        "No, my cat isn't called Pixel, it's Biscuit!",
    ),
    (
        "The user works as a backend developer.",
        "The user works as a frontend developer.",
        "I moved to frontend last month.",
    ),
    (
        "The user is allergic to peanuts.",
        "The user is allergic to peanuts and cashews.",
        "And cashews too, on top of peanuts.",
    ),
    ("The user is 34 years old.", "The user is 35 years old.", "I turned 35 yesterday, not 34 any more!"),
    ("The user's name is Sam.", "The user's name is Sam Taylor.", "Sam Taylor, for the full name."),
    (
        "The user has played the guitar for two years.",
        "The user has played the guitar for three years.",
        "I was wrong, it's been three years that I play, not two.",
    ),
    (
        "The user uses Vim as their editor.",
        "The user uses VS Code as their editor.",
        "I dropped Vim, it's VS Code now.",
    ),
    ("The user runs 10 km on Sundays.", "The user runs 15 km on Sundays.", "On Sundays I run 15 km now."),
    ("The user is vegetarian.", "The user has become vegan.", "I've become vegan."),
    (
        "The user is training for a marathon in April.",
        "The user is training for a marathon in October.",
        "The marathon is in October in the end, not April.",
    ),
    (
        "The user promised to send the report on Friday.",
        "The user promised to send the report on Monday.",
        "The report will be Monday rather than Friday.",
    ),
    (
        "The user drinks three coffees a day.",
        "The user drinks only one coffee a day.",
        "I cut down: only one coffee a day now.",
    ),
    (
        "The user has been learning Japanese for a year.",
        "The user has been learning Japanese for two years.",
        "My mistake, I've been learning Japanese for two years.",
    ),
    (
        "The user has a 6-year-old daughter, Lea.",
        "The user has a 7-year-old daughter, Lea.",
        "Lea turned 7 this weekend, she's not 6 any more!",
    ),
    ("The user works at a bakery.", "The user works at a bookshop.", "I quit the bakery, I work at a bookshop now."),
    ("The user's dog is called Max.", "The user's dog is called Rex.", "Actually my dog is called Rex, not Max."),
    ("The user climbs indoors.", "The user climbs outdoors on crags.", "I've moved from the gym to real crags!"),
    # An enrichment keeps the whole old fact: replacing it loses nothing.
    ("The user plays the guitar.", "The user plays the guitar in a rock band.", "I play in a rock band."),
]

DIFFERENT_EN: list[tuple[str, str, str]] = [
    (
        "The user cycles to the office.",
        "The user is never available on Wednesdays.",
        "I'm never free on Wednesdays, it's my sports day.",
    ),
    ("The user lives in Leeds.", "The user is on the Logistics team.", "I work in the Logistics team."),
    ("The user likes jazz.", "The user likes hiking.", "I love hiking."),
    ("The user is allergic to peanuts.", "The user is vegetarian.", "I'm vegetarian, by the way."),
    ("The user has a cat named Pixel.", "The user has a 6-year-old daughter.", "My daughter is 6."),
    ("The user works as a backend developer.", "The user uses Vim as their editor.", "I use Vim for everything."),
    ("The user runs 10 km on Sundays.", "The user is free on Sunday mornings.", "I'm free on Sunday morning."),
    ("The user's name is Sam.", "The user has just joined Atelier.", "I've just joined Atelier."),
    ("The user plays the guitar.", "The user plays chess online.", "I play chess online in the evenings."),
    (
        "The user is training for a marathon in April.",
        "The user is going on holiday in April.",
        "I'm off on holiday in April.",
    ),
    (
        "The user drinks three coffees a day.",
        "The user is sleeping badly at the moment.",
        "I'm sleeping badly at the moment.",
    ),
    ("The user is learning Japanese.", "The user watches a lot of anime.", "I watch loads of anime."),
    (
        "The user promised to send the report on Friday.",
        "The user has an important meeting on Friday.",
        "Big meeting on Friday.",
    ),
    ("The user hates Monday meetings.", "The user likes to start early in the morning.", "I like starting early."),
    ("The user is 34 years old.", "The user has a brother in Bristol.", "My brother lives in Bristol."),
    ("The user prefers tea to coffee.", "The user prefers crime novels.", "I prefer crime novels."),
    ("The user has an electric car.", "The user is afraid of flying.", "I'm afraid of flying."),
    ("The user supports Leeds United.", "The user was born in Hull.", "I was born in Hull."),
    ("The user works at a bakery.", "The user wakes up at 4 am.", "I wake up at 4 am."),
    ("The user's dog is called Max.", "The user's sister is called Anna.", "My sister is called Anna."),
]

HARD_EN: list[tuple[str, str, str]] = [
    ("The user lives in Leeds.", "The user lives with two flatmates.", "I live with two flatmates."),
    ("The user is allergic to peanuts.", "The user is allergic to shellfish.", "I'm also allergic to shellfish."),
    ("The user works at Atelier.", "The user works nights.", "This week I work nights."),
    ("The user has a cat named Pixel.", "The user has a cat and a dog.", "I have a cat and a dog."),
    ("The user likes green tea.", "The user likes black tea.", "I like black tea too."),
    ("The user speaks English.", "The user speaks Spanish.", "I speak Spanish."),
    ("The user has a 6-year-old daughter, Lea.", "The user has a 9-year-old son, Hugo.", "And my son Hugo is 9."),
    ("The user works at a bakery.", "The user works on weekends.", "I work on weekends too."),
    ("The user plays the guitar.", "The user plays tennis.", "I also play tennis."),
]

# Facts about the user's relatives (issue 22, item 9), as in the French corpus.
PEOPLE_SAME_EN: list[tuple[str, str, str]] = [
    ("The user's sister lives in Paris.", "The user's sister lives in Lyon.", "My sister moved to Lyon."),
    (
        "The user's mother works at a bank.",
        "The user's mother works at the hospital.",
        "My mum started working at the hospital.",
    ),
    ("The user's daughter plays tennis.", "The user's daughter plays football now.", "My daughter now plays football."),
    ("The user's wife is a nurse.", "The user's wife is a teacher.", "My wife became a teacher."),
    (
        "The user's sister lives in Paris.",
        "The user's brother lives in Paris.",
        "My sister moved out, my brother lives in Paris now.",
    ),
]

PEOPLE_OTHER_EN: list[tuple[str, str, str]] = [
    ("The user's sister lives in Paris.", "The user's brother lives in Paris.", "My brother just moved to Paris."),
    (
        "The user's mother works at the hospital.",
        "The user's father works at the hospital.",
        "My dad started working at the hospital last week.",
    ),
    ("The user's daughter plays football.", "The user's son plays football.", "My son now plays football."),
    ("The user's wife is a teacher.", "The user's friend Tom is a teacher.", "My friend Tom became a teacher."),
    (
        "The user's son is learning the piano.",
        "The user's daughter is learning the piano.",
        "My daughter started the piano.",
    ),
    ("The user's grandmother lives in Dublin.", "The user's aunt lives in Dublin now.", "My aunt moved to Dublin."),
]
