"""Pure helpers of the Discord front end, with plain data: splitting, addressing, rate limit."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.config import load_settings
from bot.memory.model import DM_PLACE, Cause, HistoryEntry, Memory
from cogs.utils.answering import (
    DISCORD_LIMIT,
    AnswerPolicy,
    MessageFacts,
    clean_incoming,
    decide,
    history_choices,
    memory_choices,
    place_of,
    split_message,
    user_refusal,
)
from cogs.utils.ratelimit import RateLimiter, Verdict
from tests.lanes import examples

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def words(text: str) -> list[str]:
    return text.split()


# --- split_message ------------------------------------------------------------------------


def test_short_text_is_one_chunk_and_empty_text_none() -> None:
    assert split_message("hello") == ["hello"]
    assert split_message("  \n ") == []


def test_exactly_the_limit_is_one_chunk_one_more_is_two() -> None:
    exact = ("abcd " * 400)[: DISCORD_LIMIT - 1] + "z"
    assert len(exact) == DISCORD_LIMIT
    assert split_message(exact) == [exact]
    over = exact + "y"
    chunks = split_message(over)
    assert len(chunks) == 2
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    assert words(" ".join(chunks)) == words(over)


def test_cuts_between_paragraphs_first() -> None:
    paragraphs = [f"Paragraph {n}. " + "word " * 60 for n in range(20)]  # ~ 320 chars each
    text = "\n\n".join(p.strip() for p in paragraphs)
    chunks = split_message(text)
    assert len(chunks) > 1
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    whole = [p.strip() for p in paragraphs]
    for chunk in chunks:
        # every chunk is made of whole paragraphs
        assert all(part in whole for part in chunk.split("\n\n"))
    assert "\n\n".join(chunks) == text


def test_one_paragraph_is_cut_between_lines() -> None:
    lines = [f"line {n} " + "x" * 70 for n in range(60)]
    text = "\n".join(lines)
    chunks = split_message(text)
    assert len(chunks) > 1 and all(len(c) <= DISCORD_LIMIT for c in chunks)
    for chunk in chunks:
        assert all(line in lines for line in chunk.split("\n"))


def test_one_line_is_cut_between_words() -> None:
    text = " ".join(f"mot{n}" for n in range(1200))
    chunks = split_message(text)
    assert len(chunks) > 1 and all(len(c) <= DISCORD_LIMIT for c in chunks)
    assert words(" ".join(chunks)) == words(text)  # no word was cut


def test_a_single_huge_word_is_cut_hard() -> None:
    text = "intro " + "a" * 4500 + " outro"
    chunks = split_message(text)
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")
    assert len(chunks) == 4  # "intro", then 4500 a's in three pieces (the last with "outro")


def test_code_block_cut_in_two_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"print({n})  # {'c' * 40}" for n in range(120))
    text = "Here is the script:\n\n```python\n" + code + "\n```\n\nThat's all."
    chunks = split_message(text)
    assert len(chunks) >= 3
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    for chunk in chunks:
        assert chunk.count("```") % 2 == 0, chunk[-80:]  # every chunk renders its fences
    for chunk in chunks[1:-1]:
        assert chunk.startswith("```python\n") and chunk.endswith("\n```")
    assert chunks[-1].startswith("```python\n") and chunks[-1].endswith("That's all.")
    # Removing the added fences gives back every line of code, in order.
    inner = [line for c in chunks for line in c.split("\n") if line.startswith("print(")]
    assert inner == code.split("\n")


def test_code_block_without_language_reopens_bare() -> None:
    text = "```\n" + "\n".join("z" * 50 for _ in range(60)) + "\n```"
    chunks = split_message(text)
    assert len(chunks) == 2
    assert chunks[0].endswith("\n```") and chunks[1].startswith("```\n")


def test_closed_code_block_adds_no_fence() -> None:
    text = "```js\nlet a = 1;\n```\n\n" + "\n\n".join("word " * 50 for _ in range(12))
    chunks = split_message(text)
    assert len(chunks) == 2
    assert chunks[0].startswith("```js\nlet a = 1;\n```")
    assert "```" not in chunks[1]


def test_counts_code_points_like_discord() -> None:
    emoji = "😀" * DISCORD_LIMIT
    assert split_message(emoji) == [emoji]


def test_hard_cut_never_separates_an_accent_from_its_letter() -> None:
    decomposed = unicodedata.normalize("NFD", "é") * 2500  # 5000 code points, one "word"
    chunks = split_message(decomposed)
    assert len(chunks) == 3
    assert all(len(c) <= DISCORD_LIMIT for c in chunks)
    assert all(unicodedata.category(c[0]) != "Mn" for c in chunks)
    assert "".join(chunks) == decomposed


def test_hard_cut_never_splits_a_fence_marker() -> None:
    room = DISCORD_LIMIT - len("\n```")  # a chunk keeps room to close a block
    text = "x" * (room - 1) + "``````" + "y" * 100  # no space: a hard cut, right inside the marker
    chunks = split_message(text)
    assert chunks[0] == "x" * (room - 1)
    assert chunks[1] == "``````" + "y" * 100


@settings(max_examples=examples(150), deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab é\n😀")), min_size=0, max_size=600))
def test_property_chunks_fit_and_keep_every_character(text: str) -> None:
    chunks = split_message(text, limit=80)
    assert all(0 < len(c) <= 80 for c in chunks)
    assert "".join(text.split()) == "".join("".join(chunks).split())


@settings(max_examples=examples(150), deadline=None)
@given(st.text(alphabet=st.sampled_from(list("`ab\n py")), min_size=0, max_size=600))
def test_property_chunks_with_fences_fit_and_balance(text: str) -> None:
    chunks = split_message(text, limit=64)
    assert all(0 < len(c) <= 64 for c in chunks)
    if len(chunks) > 1:  # a text that fits is sent as written; a cut one is balanced everywhere
        assert all(c.count("```") % 2 == 0 for c in chunks)


def test_a_block_left_open_by_the_text_is_closed_in_the_last_chunk_too() -> None:
    text = "```\n" + "\n".join("z" * 50 for _ in range(60))  # the model never closed it
    chunks = split_message(text)
    assert len(chunks) == 2
    assert chunks[1].startswith("```\n") and chunks[1].endswith("z\n```")
    assert split_message("Use ``` to open a block.") == ["Use ``` to open a block."]  # fits: as written


def test_hard_cut_never_splits_a_flag_nor_a_subdivision_flag() -> None:
    room = DISCORD_LIMIT - len("\n```")
    flags = "a" + "🇫🇷" * room  # regional indicators pair up from the start of their run
    assert all(len(c) % 2 == 0 for c in split_message(flags)[1:])
    scotland = "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    chunks = split_message(scotland * 600)
    assert all(c.startswith("🏴") and len(c) % len(scotland) == 0 for c in chunks)


# --- clean_incoming -----------------------------------------------------------------------


def test_bot_mention_removed_other_mentions_named() -> None:
    names = {42: "Alice"}
    assert clean_incoming("<@7> hello <@42>, ça va ?", 7, names) == "hello @Alice, ça va ?"
    assert clean_incoming("hey <@!7> you", 7, names) == "hey you"
    assert clean_incoming("<@7>", 7, names) == ""
    assert clean_incoming("ask <@99>", 7, names) == "ask <@99>"  # unknown: left as is


# --- who the bot answers ------------------------------------------------------------------

ME = 1000
ALICE = 1
CHANNEL = 500
OPEN = 600


def policy(**kw: object) -> AnswerPolicy:
    base = {
        "allowed_channel_ids": frozenset({OPEN}),
        "answer_dms": True,
        "allowed_user_ids": frozenset(),
        "allowed_role_ids": frozenset(),
        "blocked_user_ids": frozenset(),
    }
    base.update(kw)
    return AnswerPolicy(**base)  # type: ignore[arg-type]


def facts(**kw: object) -> MessageFacts:
    base: dict[str, object] = {"author_id": ALICE, "author_is_bot": False, "is_dm": False, "channel_id": CHANNEL}
    base.update(kw)
    return MessageFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("message", "answer", "why"),
    [
        (facts(mentions_bot=True), True, "mention"),
        (facts(replies_to_bot=True), True, "reply"),
        (facts(is_dm=True), True, "dm"),
        (facts(channel_id=OPEN), True, "channel"),
        (facts(channel_id=777, parent_id=OPEN), True, "channel"),  # thread of an allowed channel
        (facts(), False, "not addressed to the bot"),
        (facts(channel_id=777, parent_id=CHANNEL), False, "not addressed to the bot"),
        (facts(mentions_bot=True, author_is_bot=True), False, "author is a bot"),
        (facts(author_id=ME, author_is_bot=True, is_dm=True), False, "author is a bot"),
        (facts(channel_id=OPEN, system=True), False, "system message"),
    ],
)
def test_addressing(message: MessageFacts, answer: bool, why: str) -> None:
    decision = decide(message, policy())
    assert (decision.answer, decision.why) == (answer, why)


def test_dms_off_ignores_even_a_mention_in_a_dm() -> None:
    assert not decide(facts(is_dm=True, mentions_bot=True), policy(answer_dms=False)).answer


def test_blocked_user_is_never_answered() -> None:
    blocked = policy(blocked_user_ids=frozenset({ALICE}), allowed_user_ids=frozenset({ALICE}))
    assert decide(facts(mentions_bot=True), blocked).why == "blocked"
    assert not decide(facts(is_dm=True), blocked).answer


def test_allowed_users_restrict_who_is_answered() -> None:
    only_bob = policy(allowed_user_ids=frozenset({2}))
    assert not decide(facts(mentions_bot=True), only_bob).answer
    assert decide(facts(mentions_bot=True, author_id=2), only_bob).answer


def test_allowed_roles_in_a_guild_and_dms_refused_under_a_role_restriction() -> None:
    roles = policy(allowed_role_ids=frozenset({9}))
    assert decide(facts(mentions_bot=True, role_ids=frozenset({3, 9})), roles).answer
    assert decide(facts(mentions_bot=True, role_ids=frozenset({3})), roles).why == "no role of ALLOWED_ROLE_IDS"
    # Nobody has roles in a DM: the restriction cannot be checked, so it holds.
    assert not decide(facts(is_dm=True), roles).answer
    assert user_refusal(roles, ALICE, is_dm=True) is not None


def test_policy_from_settings(tmp_path) -> None:
    s = load_settings(
        _env_file=None,
        allowed_channel_ids="5,6",
        blocked_user_ids="7",
        answer_dms=False,
        database_path=tmp_path / "x.db",
    )
    p = AnswerPolicy.from_settings(s.discord)
    assert p.allowed_channel_ids == {5, 6} and p.blocked_user_ids == {7} and not p.answer_dms


def test_place_is_dm_or_the_servers_id() -> None:
    assert place_of(None) == DM_PLACE
    assert place_of(123456789012345678) == "123456789012345678"


# --- rate limit -----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_30_messages_in_10_seconds_gets_6_answers_and_one_notice() -> None:
    clock = FakeClock()
    limiter = RateLimiter(6, 30.0, clock=clock)
    verdicts = []
    for _ in range(30):
        verdicts.append(limiter.hit("alice"))
        clock.now += 10 / 30
    assert verdicts.count(Verdict.ALLOWED) == 6
    assert verdicts.count(Verdict.LIMITED) == 1
    assert verdicts[6] is Verdict.LIMITED
    assert verdicts.count(Verdict.LIMITED_AGAIN) == 23


def test_window_slides_and_the_notice_comes_again_for_a_new_burst() -> None:
    clock = FakeClock()
    limiter = RateLimiter(2, 10.0, clock=clock)
    assert [limiter.hit("a") for _ in range(3)] == [Verdict.ALLOWED, Verdict.ALLOWED, Verdict.LIMITED]
    assert limiter.hit("b") is Verdict.ALLOWED  # per user
    clock.now += 10.0
    assert [limiter.hit("a") for _ in range(4)] == [
        Verdict.ALLOWED,
        Verdict.ALLOWED,
        Verdict.LIMITED,
        Verdict.LIMITED_AGAIN,
    ]


def test_zero_means_no_limit() -> None:
    limiter = RateLimiter(0, 30.0, clock=FakeClock())
    assert all(limiter.hit("a") is Verdict.ALLOWED for _ in range(100))


def test_users_whose_window_emptied_are_forgotten() -> None:
    clock = FakeClock()
    limiter = RateLimiter(3, 5.0, clock=clock)
    for n in range(200):
        limiter.hit(f"user{n}")
    clock.now += 6.0
    for _ in range(100):
        limiter.hit("active")
    assert len(limiter) <= 2


# --- autocomplete -------------------------------------------------------------------------


def memory(id_: int, text: str, minutes: int = 0) -> Memory:
    at = T0 + timedelta(minutes=minutes)
    return Memory(
        id=id_,
        user_id="u",
        text=text,
        type="fact",
        scope="global",
        pinned=False,
        confidence=1.0,
        created_at=at,
        updated_at=at,
    )


def test_memory_choices_filter_order_and_clip() -> None:
    memories = [memory(1, "Aime le vélo", 1), memory(2, "Travaille à Lyon", 3), memory(3, "Fait du vélo le mardi", 2)]
    assert memory_choices(memories, "vélo") == [("#3 Fait du vélo le mardi", 3), ("#1 Aime le vélo", 1)]
    assert [v for _, v in memory_choices(memories, "")] == [2, 3, 1]
    assert memory_choices(memories, "#2") == [("#2 Travaille à Lyon", 2)]
    long = [memory(n, "mot " * 60, n) for n in range(40)]
    choices = memory_choices(long, "mot")
    assert len(choices) == 25 and all(len(name) <= 100 for name, _ in choices)


def test_history_choices_name_the_archived_version() -> None:
    entry = HistoryEntry(
        id=12,
        user_id="u",
        memory_id=3,
        operation="delete",
        text="Aime le vélo",
        type="fact",
        scope="global",
        pinned=False,
        confidence=1.0,
        created_at=T0,
        updated_at=T0,
        archived_at=T0,
        cause=Cause("forget"),
    )
    other = dataclasses.replace(entry, id=13, text="Vit à Paris")
    assert history_choices([entry, other], "vélo") == [("h12 #3 forgotten Jan 1, 2026: Aime le vélo", 12)], (
        "the operation and the date in the reader's words"
    )
    assert [v for _, v in history_choices([entry, other], "h13")] == [13]
    assert re.fullmatch(r"h\d+ .*", history_choices([entry], "")[0][0])
