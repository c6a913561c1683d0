"""A consolidated memory says what its members said: the check of a proposal refuses a rewrite
that keeps every carrier (numbers, years, names) and changes the rest.

- The attack's three cases, and the replace guard refusing the same rewrites (one rule, shared).
- A property over random series and random rewrites, French and English: every faithful write-out
  of a series is accepted (the control: the check is not a wall), and no rewrite that drops a
  content word, replaces one by another, adds a fact or flips the negation is ever accepted.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import event, given, settings
from hypothesis import strategies as st

from bot.memory.consolidation.proposal import Proposal, check_proposal
from bot.memory.model import Memory
from bot.memory.write.replace_guard import judge_replacement
from tests.lanes import examples

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def mem(i: int, text: str) -> Memory:
    return Memory(id=i, user_id="u", text=text, type="fact", scope="global", pinned=False, confidence=0.9,
                  created_at=NOW, updated_at=NOW)  # fmt: skip


def refusal(members: list[str], text: str) -> str | None:
    found = check_proposal(
        [mem(i, t) for i, t in enumerate(members, 1)], Proposal(text, 0.95), character_name="Écho", user_name="Alice"
    )
    return None if found is None else found.reason


ATTACKS = [
    ("The user takes 50 mg of sertraline every morning since {}", "The user takes 50 mg every morning since {}"),
    ("The user is allergic to peanuts since {}", "The user loved peanuts since {}"),
    ("Alice a visité Trieste en {}", "Alice a été arrêtée à Trieste en {}"),
]


def test_the_attack_s_rewrites_keep_every_carrier_and_are_refused_as_the_replace_guard_refuses_them() -> None:
    for member, rewrite in ATTACKS:
        years = (2019, 2020, 2021)
        members = [member.format(y) for y in years]
        listed = "2019, 2020 and 2021" if "The user" in member else "2019, 2020 et 2021"
        assert refusal(members, member.format(listed)) is None  # the faithful one passes
        assert refusal(members, rewrite.format(listed)) in ("word_lost", "word_added"), rewrite
        # The reflection's replace guard refuses the same rewrite of one member.
        assert not judge_replacement(members[0], rewrite.format(years[0]), "").replace


# --- the property ---------------------------------------------------------------------------------

FRENCH = {
    "verbs": ["a visité", "a photographié", "a repeint", "a réparé", "a nettoyé", "a vendu", "a dessiné"],
    "objects": ["la cathédrale de Trieste", "le vélo rouge", "la cuisine", "le jardin de sa mère", "les volets bleus",
                "la grange du voisin", "le bateau de pêche"],
    "list": lambda ys: ", ".join(map(str, ys[:-1])) + f" et {ys[-1]}",
    "range": lambda ys: f"de {ys[0]} à {ys[-1]}",
    "year": "en {}",
    "not": lambda verb: verb.replace("a ", "n'a pas ", 1),
    "additions": ["avec sa sœur", "en cachette", "pour son patron", "sans permis", "tous les dimanches matin",
                  "malgré la pluie", "avec un couteau volé"],
    "others": ["brûlé", "acheté", "cambriolé", "détesté", "oublié", "démoli", "inondé", "abandonné"],
    "subject": "Alice",
}  # fmt: skip
ENGLISH = {
    "verbs": ["visited", "photographed", "painted", "repaired", "cleaned", "sold", "sketched"],
    "objects": ["the cathedral of Trieste", "the red bike", "the kitchen", "her mother's garden", "the blue shutters",
                "the neighbour's barn", "the fishing boat"],
    "list": lambda ys: ", ".join(map(str, ys[:-1])) + f" and {ys[-1]}",
    "range": lambda ys: f"every year from {ys[0]} to {ys[-1]}",
    "year": "in {}",
    "not": lambda verb: f"never {verb}",
    "additions": ["with her sister", "in secret", "for her boss", "without a permit", "on Sunday mornings",
                  "despite the rain", "with a stolen knife"],
    "others": ["burned", "bought", "burgled", "hated", "forgot", "demolished", "flooded", "abandoned"],
    "subject": "Alice",
}  # fmt: skip
LANGUAGES = {"fr": FRENCH, "en": ENGLISH}
MUTATIONS = ("drop", "replace", "add", "negate")


@st.composite
def series_and_rewrites(draw: st.DrawFn) -> dict[str, object]:
    lang = draw(st.sampled_from(sorted(LANGUAGES)))
    words = LANGUAGES[lang]
    verb = draw(st.sampled_from(words["verbs"]))
    obj = draw(st.sampled_from(words["objects"]))
    negative = draw(st.booleans())
    said_verb = words["not"](verb) if negative else verb
    start = draw(st.integers(1990, 2020))
    consecutive = draw(st.booleans())
    n = draw(st.integers(3, 7))
    years = (
        list(range(start, start + n))
        if consecutive
        else sorted(draw(st.lists(st.integers(1990, 2030), min_size=3, max_size=7, unique=True)))
    )
    head = f"{words['subject']} {said_verb} {obj}"
    members = [f"{head} {words['year'].format(y)}." for y in years]
    as_range = consecutive and draw(st.booleans())
    listed = words["range"](years) if as_range else words["year"].format(words["list"](years))
    faithful = f"{head} {listed}."
    mutation = draw(st.sampled_from(MUTATIONS))
    content = [w for w in f"{said_verb} {obj}".replace("'", " ").split() if len(w) > 3 and w not in ("n'a", "never")]
    if mutation == "drop":
        word = draw(st.sampled_from(content))
        mutated = " ".join(w for w in faithful.split(" ") if w.strip(".,").replace("'s", "") != word.replace("'s", ""))
        mutated = mutated.replace(f" {word} ", " ").replace(f"'{word} ", "'")
    elif mutation == "replace":
        word = draw(st.sampled_from([w for w in content if w != "pas"]))
        other = draw(st.sampled_from(words["others"]))
        mutated = faithful.replace(word, other, 1)
    elif mutation == "add":
        addition = draw(st.sampled_from(words["additions"]))
        mutated = f"{head} {addition} {listed}."
    else:
        flipped = verb if negative else words["not"](verb)
        mutated = f"{words['subject']} {flipped} {obj} {listed}."
    return {"lang": lang, "members": members, "faithful": faithful, "mutation": mutation, "mutated": mutated}


@settings(max_examples=examples(400), deadline=None)
@given(series_and_rewrites())
def test_no_accepted_proposal_drops_a_word_flips_a_negation_or_adds_a_fact(case: dict[str, object]) -> None:
    members: list[str] = case["members"]  # type: ignore[assignment]
    assert refusal(members, str(case["faithful"])) is None, (members, case["faithful"])
    assert case["mutated"] != case["faithful"]
    reason = refusal(members, str(case["mutated"]))
    event(f"{case['lang']} {case['mutation']}: {reason}")
    assert reason is not None, (
        f"accepted a rewrite that changes what the members say ({case['mutation']}): {case['mutated']!r} for {members[0]!r}"
    )
