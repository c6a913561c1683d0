"""Look-alike text is one text: NFKC and invisible characters are normalised, once, by
`bot.memory.text.canonical`, before any comparison and before any memory text is stored."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.errors import InvalidMemory
from bot.memory.model import NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.text import INVISIBLE, canonical, normalise
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.dedup import similarity
from bot.memory.write.dedup_index import DedupIndex
from bot.memory.write.reflection import parse_reflection
from tests.lanes import examples

ORIGINAL = "L'utilisateur est allergique aux arachides."


def full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else ("\u3000" if c == " " else c) for c in text)


def sprinkle(text: str, mark: str) -> str:
    """The mark between every two letters of every word."""
    return " ".join(mark.join(word) for word in text.split(" "))


# Each looks exactly like ORIGINAL on screen.
LOOKALIKES = {
    "full-width": full_width(ORIGINAL),
    "soft hyphens": sprinkle(ORIGINAL, "\u00ad"),
    "zero-width spaces": sprinkle(ORIGINAL, "\u200b"),
    "zero-width joiners": sprinkle(ORIGINAL, "\u200d"),
    "word joiners": sprinkle(ORIGINAL, "\u2060"),
    "BOM": "\ufeff" + ORIGINAL.replace(" ", " \ufeff"),
    "bidi isolates": "\u2066" + ORIGINAL + "\u2069",
    "bidi marks": ORIGINAL.replace("arachides", "\u200earachides\u200f"),
    "variation selectors": sprinkle(ORIGINAL, "\ufe0f"),
    "compatibility letters": ORIGINAL.replace("a", "\uff41"),
    "Hangul filler": ORIGINAL.replace(" ", " \u3164", 1),
    "tags": ORIGINAL + "\U000e0061\U000e007f",
}

# The format characters that are drawn (Arabic and Syriac number signs): not invisible.
DRAWN_FORMAT = {0x600, 0x601, 0x602, 0x603, 0x604, 0x605, 0x6DD, 0x70F, 0x890, 0x891, 0x8E2, 0x110BD, 0x110CD}


def test_every_invisible_format_character_of_this_unicode_is_removed():
    missing = [
        f"U+{c:04X}"
        for c in range(0x110000)
        if unicodedata.category(chr(c)) == "Cf" and c not in DRAWN_FORMAT and c not in INVISIBLE
    ]
    assert missing == []


@pytest.mark.parametrize("name", LOOKALIKES)
def test_a_lookalike_is_the_same_text_to_every_comparison(name):
    copy = LOOKALIKES[name]
    assert copy != ORIGINAL
    assert canonical(copy) == ORIGINAL
    assert normalise(copy) == normalise(ORIGINAL)
    assert similarity(copy, ORIGINAL) == 1.0
    index = DedupIndex([(1, ORIGINAL)])
    assert index.best_match(copy) == (1, 1.0)


@pytest.mark.parametrize("name", LOOKALIKES)
async def test_a_lookalike_reflected_again_merges_into_the_memory(db, clock, name):
    store = MemoryStore(db, clock=clock)
    original = await store.add("u", NewMemory(text=ORIGINAL, place="p"))
    parsed = parse_reflection(json.dumps({"memories": [{"text": LOOKALIKES[name], "type": "fact", "confidence": 0.9}]}))
    ctx = ReflectionContext(user_id="u", allowed_ids=frozenset(), character_name="Écho", place="p")
    report = await apply_reflection(db, parsed.reflection, ctx, problems=parsed.problems, clock=clock)
    assert [(d.action, d.memory_id) for d in report.decisions] in ([("absorbed", original)], [("merged", original)])
    assert [m.text for m in await store.list("u")] == [ORIGINAL]


async def test_a_zero_width_variant_merged_into_a_memory_leaves_no_invisible_character(db, clock):
    store = MemoryStore(db, clock=clock)
    original = await store.add("u", NewMemory(text="L'utilisateur aime les films de Miyazaki.", place="p"))
    # A richer wording merges and replaces the stored one: its zero-width spaces must not come along.
    richer = sprinkle("L'utilisateur aime les films de Hayao Miyazaki.", "\u200b")
    parsed = parse_reflection(json.dumps({"memories": [{"text": richer, "type": "fact", "confidence": 0.9}]}))
    ctx = ReflectionContext(user_id="u", allowed_ids=frozenset(), character_name="Écho", place="p")
    report = await apply_reflection(db, parsed.reflection, ctx, clock=clock)
    assert [(d.action, d.memory_id) for d in report.decisions] == [("merged", original)]
    [memory] = await store.list("u")
    assert memory.text == "L'utilisateur aime les films de Hayao Miyazaki."
    for text in (memory.text, report.decisions[0].text):
        assert "\u200b" not in text and not any(ord(c) in INVISIBLE for c in text)


@pytest.mark.parametrize("name", ["full-width", "soft hyphens", "zero-width spaces", "BOM"])
async def test_remember_stores_the_canonical_form(db, clock, name):
    store = MemoryStore(db, clock=clock)
    memory_id = await store.add("u", NewMemory(text=LOOKALIKES[name]))
    assert (await store.get("u", memory_id)).text == ORIGINAL


async def test_only_invisible_characters_is_not_a_memory(db, clock):
    with pytest.raises(InvalidMemory, match="visible text"):
        await MemoryStore(db, clock=clock).add("u", NewMemory(text="\u200b\u00ad\ufeff\u2066\u3164"))


@settings(max_examples=examples(200), deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60),
    st.lists(
        st.sampled_from(["\u00ad", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u202a", "\u202c", "\ufe0f"]),
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_property_inserting_invisible_characters_changes_nothing_compared(text, marks, rnd):
    chars = list(text)
    for mark in marks:
        chars.insert(rnd.randint(0, len(chars)), mark)
    noisy = "".join(chars)
    assert normalise(noisy) == normalise(text)
    assert canonical(canonical(noisy)) == canonical(noisy)
