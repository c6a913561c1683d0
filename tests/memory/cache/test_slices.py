"""The split containers of a long job (bot/memory/cache/slices.py) hold what a dict and a set
would, through any mix of writes: they only change how each grows."""

from __future__ import annotations

import random

from bot.memory.cache.slices import SPLIT_AT, Posting, ShardedDict, ShardedSet, post


def test_a_sharded_dict_and_set_hold_what_a_dict_and_a_set_would() -> None:
    rng = random.Random(7)
    mapping, plain = ShardedDict[object, int](), dict[object, int]()
    items, same = ShardedSet[object](), set[object]()
    largest = 0
    for step in range(30_000):
        # Past SPLIT_AT entries, with removals before and after the split.
        key: object = rng.randrange(2 * SPLIT_AT) if step % 3 else ("text", rng.randrange(SPLIT_AT))
        action = rng.random()
        if action < 0.6:
            mapping[key] = plain[key] = step
            items.add(key)
            same.add(key)
        elif action < 0.8:
            assert mapping.pop_or(key) == plain.pop(key, None)
            items.discard(key)
            same.discard(key)
        else:
            assert mapping.get_or(key, -1) == plain.get(key, -1)
            assert (key in mapping, key in items) == (key in plain, key in same)
        largest = max(largest, len(plain))
    assert largest > SPLIT_AT
    assert mapping == plain and dict(mapping.items()) == plain and len(mapping) == len(plain)
    assert set(items) == same and len(items) == len(same)
    del mapping[next(iter(plain))]
    assert len(mapping) == len(plain) - 1


def test_a_posting_is_split_past_its_size_and_keeps_every_item() -> None:
    postings: dict[str, Posting] = {}
    for item in range(SPLIT_AT - 1):
        post(postings, "common", item)
        post(postings, "rare", item % 3)
    assert type(postings["common"]) is set and postings["rare"] == {0, 1, 2}
    for item in range(SPLIT_AT - 1, 3 * SPLIT_AT):
        post(postings, "common", item)
    common = postings["common"]
    assert isinstance(common, ShardedSet)
    assert set(common) == set(range(3 * SPLIT_AT)) and len(common) == 3 * SPLIT_AT
    common.discard(5)
    assert 5 not in common and 6 in common
