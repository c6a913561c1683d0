"""A question-style corpus for bench/recall_public.py: direct questions after useless small talk.

Written for this bench (no public source): 16 facts about MADial's user 1 (Bart), stored among
32 more facts of the same kind that no question asks for (among MADial's episodes instead, the
facts stood apart, and a query-free ranking by isolation found 0.94 of the asked ones in its top
24: unfit to judge), and one question per fact, each asked after a few
lines of small talk about something else (the weather, a game, lunch) — the case where the
conversation can only get in the way. Each question names what it asks about in its own
words, not the fact's ("where did I say my sister lives?" for "Bart's sister Emma lives in
Lyon"). Labels: the fact the question asks for.
"""

from __future__ import annotations

FACTS: tuple[tuple[str, str], ...] = (
    ("Bart's sister Emma lives in Lyon with her husband.", "fact"),
    ("Bart is allergic to peanuts and carries an epinephrine pen.", "fact"),
    ("Bart's dog is a beagle called Biscuit.", "fact"),
    ("Bart's grandmother's birthday is on the 14th of March.", "fact"),
    ("Bart takes piano lessons every Wednesday after school.", "fact"),
    ("Bart's best friend Jimmy moved to Canada last summer.", "episode"),
    ("Bart wants to become an astronaut when he grows up.", "preference"),
    ("Bart broke his left arm falling off his bike in April.", "episode"),
    ("Bart's favourite football team is Olympique Lyonnais.", "preference"),
    ("Bart's father works as a nurse at the city hospital.", "fact"),
    ("Bart promised his mother he would tidy his room every Sunday.", "promise"),
    ("Bart hates mushrooms and picks them out of every dish.", "preference"),
    ("Bart's school is called Jules Ferry Primary, near the river.", "fact"),
    ("Bart is saving his pocket money to buy a telescope.", "fact"),
    ("Bart's teacher this year is Mrs Laurent, who teaches maths.", "fact"),
    ("Bart sleeps with a night light because he is afraid of the dark.", "fact"),
)

# Facts of the same kind that no question asks for.
OTHER_FACTS: tuple[tuple[str, str], ...] = (
    ("Bart's cousin Léo lives in Marseille near the harbour.", "fact"),
    ("Bart is allergic to cat hair and sneezes near cats.", "fact"),
    ("Bart's neighbour has a grey parrot called Coco.", "fact"),
    ("Bart's grandfather's birthday is in late October.", "fact"),
    ("Bart goes to swimming lessons every Saturday morning.", "fact"),
    ("Bart's friend Lucy moved to the other side of town in May.", "episode"),
    ("Bart wants to visit Japan one day to see the temples.", "preference"),
    ("Bart sprained his ankle playing basketball last winter.", "episode"),
    ("Bart's favourite basketball player is Tony Parker.", "preference"),
    ("Bart's mother works as a teacher at a secondary school.", "fact"),
    ("Bart promised his father he would walk the dog every evening.", "promise"),
    ("Bart loves strawberries and eats them every summer.", "preference"),
    ("Bart's swimming pool is called Piscine du Rhône, near the park.", "fact"),
    ("Bart is saving stickers to complete his football album.", "fact"),
    ("Bart's music teacher is Mr Girard, who plays the violin.", "fact"),
    ("Bart sleeps with his old teddy bear called Nounours.", "fact"),
    ("Bart's uncle Paul lives in Brussels and works in a bakery.", "fact"),
    ("Bart wears glasses to read the blackboard.", "fact"),
    ("Bart's family goes camping in the Alps every August.", "fact"),
    ("Bart's bedroom is painted blue with stars on the ceiling.", "fact"),
    ("Bart is learning to ride a skateboard with his cousin.", "fact"),
    ("Bart's favourite colour is green.", "preference"),
    ("Bart does not like rainy Mondays because of the long walk to school.", "preference"),
    ("Bart's best subject at school is geography.", "fact"),
    ("Bart promised his teacher he would read one book a month.", "promise"),
    ("Bart's grandmother knits him a scarf every winter.", "fact"),
    ("Bart has a goldfish called Bubbles in his bedroom.", "fact"),
    ("Bart's bus to school leaves at half past seven.", "fact"),
    ("Bart wants a new bike with gears for his birthday.", "preference"),
    ("Bart's aunt Sophie is a doctor in Paris.", "fact"),
    ("Bart plays chess with his grandfather on Sundays.", "fact"),
    ("Bart is scared of big dogs since one barked at him.", "fact"),
)

QUESTIONS: tuple[tuple[str, int], ...] = (
    ("Where did I say my sister lives?", 0),
    ("What was the thing I'm allergic to again?", 1),
    ("Do you remember my dog's name?", 2),
    ("When is my grandma's birthday, did I tell you?", 3),
    ("Which day do I have my music lessons?", 4),
    ("Where did my best friend move to?", 5),
    ("What job did I say I want to do later?", 6),
    ("Do you remember how I hurt my arm?", 7),
    ("Which football club do I support?", 8),
    ("What does my dad do for a living?", 9),
    ("What did I promise my mom?", 10),
    ("What food did I tell you I can't stand?", 11),
    ("What's the name of my school?", 12),
    ("What am I saving my money for?", 13),
    ("Who's my teacher this year?", 14),
    ("Why do I need a lamp on at night?", 15),
)

SMALL_TALK: tuple[tuple[str, ...], ...] = (
    ("It's raining again today.", "Rainy days are perfect for staying in with a good book!", "Yeah, I guess so."),
    ("I just finished my level in the game!", "Well done! Was it a hard one?", "Kind of, the last boss was tricky."),
    ("We had pasta for lunch.", "Yum, what kind of sauce?", "Tomato, with cheese on top."),
    ("I'm a bit bored this afternoon.", "Want to talk about something fun?", "Sure, ask me anything."),
)
