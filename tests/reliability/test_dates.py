"""Dates that cannot be read back: every date written round-trips, out-of-range dates are refused
where they enter, and one bad date already on disk never locks a user out of their data."""

from __future__ import annotations

import json
import logging
import sqlite3
from datetime import UTC, datetime, timedelta, timezone

import pytest

import bot.clients.storage
from bot.clients.outage import Outage
from bot.clients.storage import UNREADABLE_DATE, from_db, to_db
from bot.errors import InvalidMemory
from bot.memory.model import EARLIEST_EXPIRY, LATEST_EXPIRY, NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.reflection import parse_reflection
from bot.terminal.commands import Session, run_command
from tests.builders import make_engine, msg

UTC = UTC
PLUS_14 = timezone(timedelta(hours=14))
MINUS_2359 = timezone(-timedelta(hours=23, minutes=59))

# Every kind of datetime the code can be handed: the ends of the calendar, years of 1 to 3 digits,
# naive and aware, the largest offsets Python allows.
ROUND_TRIP = [
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(1, 1, 1),
    datetime(99, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC),
    datetime(1000, 1, 1, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2026, 11, 2, 9, 0, 0, 123456, tzinfo=PLUS_14),
    datetime(2026, 11, 2, 9, 0, tzinfo=MINUS_2359),
    datetime(2026, 11, 2, 9, 0),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(9999, 12, 31, 9, 0, tzinfo=PLUS_14),
    datetime(1, 1, 2, 9, 0, tzinfo=MINUS_2359),
]


@pytest.mark.parametrize("dt", ROUND_TRIP, ids=lambda d: d.isoformat())
def test_every_storable_date_reads_back_as_the_same_instant(dt):
    stored = to_db(dt)
    assert stored is not None and len(stored) == len("2026-11-02T09:00:00.000000+00:00")
    back = from_db(stored)
    expected = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    assert back == expected and back.utcoffset() == timedelta(0)


def test_stored_text_order_is_time_order_across_the_calendar():
    instants = sorted(d if d.tzinfo else d.replace(tzinfo=UTC) for d in ROUND_TRIP)
    assert sorted(to_db(d) for d in instants) == [to_db(d) for d in instants]


@pytest.mark.parametrize(
    "dt",
    [datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), datetime(9999, 12, 31, 23, tzinfo=MINUS_2359)],
    ids=["0001+05:00", "9999-12-31T23-23:59"],
)
def test_a_date_without_a_utc_instant_is_refused_with_a_clear_error(dt):
    with pytest.raises(ValueError, match="no UTC instant"):
        to_db(dt)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # What strftime("%Y") wrote before: years of 1 to 3 digits.
        ("999-12-31T23:59:59.000000+00:00", datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("99-01-01T00:00:00.000000+00:00", datetime(99, 1, 1, tzinfo=UTC)),
        ("1-01-01T00:00:00.000000+00:00", datetime(1, 1, 1, tzinfo=UTC)),
        ("2026-11-02T09:00:00", datetime(2026, 11, 2, 9, tzinfo=UTC)),
        ("2026-11-02T09:00:00+02:00", datetime(2026, 11, 2, 7, tzinfo=UTC)),
        ("10000-01-01T00:00:00.000000+00:00", UNREADABLE_DATE),
        ("0-01-01T00:00:00.000000+00:00", UNREADABLE_DATE),
        ("0001-01-01T00:00:00+05:00", UNREADABLE_DATE),
        ("2026-02-30T00:00:00+00:00", UNREADABLE_DATE),
        ("pas une date", UNREADABLE_DATE),
        ("", UNREADABLE_DATE),
        (42, UNREADABLE_DATE),
        (b"\x00\xff", UNREADABLE_DATE),
    ],
)
def test_reading_a_stored_date_never_raises(raw, expected):
    assert from_db(raw) == expected


def test_unreadable_dates_are_counted_and_logged_once(monkeypatch, caplog):
    counter = Outage(logging.getLogger("bot.clients.storage"))
    monkeypatch.setattr(bot.clients.storage, "unreadable_dates", counter)
    with caplog.at_level(logging.WARNING, logger="bot.clients.storage"):
        for _ in range(5):
            assert from_db("10000-01-01T00:00:00+00:00") == UNREADABLE_DATE
    assert counter.failures == 5
    assert len([r for r in caplog.records if "cannot be read" in r.getMessage()]) == 1


# --- refused where they enter --------------------------------------------------------------------

GOOD = {"text": "L'utilisateur habite à Nantes.", "type": "fact", "confidence": 0.9}
OUT_OF_RANGE = [
    "0001-01-01",
    "0099-06-30",
    "0999-12-31",
    "1969-12-31",
    "9999-12-31",
    "9999-12-31T23:59:59-05:00",
    "0001-01-01T00:00:00+05:00",
    "10000-01-01",
    "0000-01-01",
]


@pytest.mark.parametrize("expiry", OUT_OF_RANGE)
async def test_a_reflection_item_with_an_out_of_range_expiry_drops_alone(db, clock, expiry):
    bad = {"text": "L'utilisateur part en congé.", "type": "fact", "confidence": 0.9, "expires_at": expiry}
    parsed = parse_reflection(json.dumps({"memories": [bad, GOOD]}))
    assert any(p.startswith("memories[0] dropped: expires_at") for p in parsed.problems)
    ctx = ReflectionContext(user_id="u", allowed_ids=frozenset(), character_name="Écho", place="p")
    report = await apply_reflection(db, parsed.reflection, ctx, problems=parsed.problems, clock=clock)
    assert [d.text for d in report.of("added")] == [GOOD["text"]]
    assert report.problems == parsed.problems
    assert [m.text for m in await MemoryStore(db, clock=clock).list("u")] == [GOOD["text"]]


@pytest.mark.parametrize("expiry", ["0999-12-31", "9999-12-31"])
async def test_a_replacement_with_an_out_of_range_expiry_drops_alone(db, clock, expiry):
    store = MemoryStore(db, clock=clock)
    old = await store.add("u", NewMemory(text="L'utilisateur fait partie de l'équipe Paiements.", place="p"))
    raw = {
        "replace": [{"id": old, "text": "L'utilisateur fait partie de l'équipe Logistique.", "expires_at": expiry}],
        "memories": [GOOD],
    }
    parsed = parse_reflection(json.dumps(raw))
    ctx = ReflectionContext(user_id="u", allowed_ids=frozenset({old}), character_name="Écho", place="p")
    report = await apply_reflection(db, parsed.reflection, ctx, problems=parsed.problems, clock=clock)
    assert any(p.startswith("replace[0] dropped: expires_at") for p in report.problems)
    assert sorted(m.text for m in await store.list("u")) == [
        "L'utilisateur fait partie de l'équipe Paiements.",
        GOOD["text"],
    ]


@pytest.mark.parametrize(
    "expiry",
    [
        datetime(999, 12, 31, tzinfo=UTC),
        datetime(1, 1, 1),
        EARLIEST_EXPIRY - timedelta(microseconds=1),
        LATEST_EXPIRY + timedelta(microseconds=1),
        datetime(9999, 12, 31, 23, tzinfo=MINUS_2359),
    ],
    ids=lambda d: d.isoformat(),
)
async def test_the_store_refuses_an_out_of_range_expiry_with_a_message(db, clock, expiry):
    store = MemoryStore(db, clock=clock)
    with pytest.raises(InvalidMemory, match="expiry date out of range"):
        await store.add("u", NewMemory(text="L'utilisateur part en congé.", expires_at=expiry))
    assert await store.list("u") == []


async def test_the_ends_of_the_expiry_range_are_stored_and_read_back(db, clock):
    store = MemoryStore(db, clock=clock)
    for n, expiry in enumerate([EARLIEST_EXPIRY, LATEST_EXPIRY, LATEST_EXPIRY.replace(tzinfo=None)]):
        memory_id = await store.add("u", NewMemory(text=f"L'utilisateur a le rendez-vous {n}.", expires_at=expiry))
        assert (await store.get("u", memory_id)).expires_at == expiry.replace(tzinfo=UTC)


# --- one bad row already on disk -------------------------------------------------------------------


def _poison(path, user: str) -> dict[str, int]:
    """Rows as the old to_db wrote them (3-digit years) and as nothing should: written directly."""
    conn = sqlite3.connect(path)
    try:
        stamp = "2026-11-01T09:00:00.000000+00:00"
        ids = {}
        for name, created, expires in [
            ("short_year", stamp, "999-12-31T23:59:59.000000+00:00"),
            ("year_10000", stamp, "10000-01-01T00:00:00.000000+00:00"),
            ("garbage_created", "hier soir", None),
        ]:
            cur = conn.execute(
                "INSERT INTO memories (user_id, text, type, scope, confidence, pinned, created_at, updated_at,"
                " expires_at, content_hash) VALUES (?, ?, 'fact', 'global', 1.0, 0, ?, ?, ?, ?)",
                (user, f"L'utilisateur a une date abîmée ({name}).", created, created, expires, name),
            )
            ids[name] = int(cur.lastrowid)
        conn.execute(
            "INSERT INTO memory_history (user_id, memory_id, operation, text, type, scope, confidence, pinned,"
            " created_at, updated_at, expires_at, archived_at, cause) VALUES (?, ?, 'replace', ?, 'fact', 'global',"
            " 1.0, 0, ?, ?, ?, ?, 'test')",
            (
                user,
                ids["short_year"],
                "L'utilisateur avait une ancienne version.",
                "99-01-01T00:00:00.000000+00:00",
                "pas une date",
                "0999-01-01",
                "10000-01-01T00:00:00+00:00",
            ),
        )
        conn.execute(
            "INSERT INTO story_anchors (user_id, story_id, text, created_at, cause) VALUES (?, 'chan-1', ?, ?, 'test')",
            (user, "Le pacte est scellé.", "999-01-01T00:00:00.000000+00:00"),
        )
        conn.execute(
            "INSERT INTO story_summaries (user_id, story_id, summary, updated_at) VALUES (?, 'chan-1', ?, ?)",
            (user, "Alice et Écho ont scellé un pacte.", "n'importe quand"),
        )
        conn.execute(
            "INSERT INTO story_state (user_id, story_id, name, value, updated_at) VALUES (?, 'chan-1', 'mood', ?, ?)",
            (user, "beaucoup", "999-01-01T00:00:00.000000+00:00"),
        )
        conn.execute(
            "INSERT INTO story_history (user_id, story_id, operation, item_id, payload, reason, cause, at)"
            " VALUES (?, 'chan-1', 'anchor_removed', 1, '{}', 'une raison assez longue', 'test', ?)",
            (user, "10000-01-01T00:00:00+00:00"),
        )
        conn.commit()
    finally:
        conn.close()
    return ids


async def test_bad_dates_on_disk_never_lock_a_user_out(db, http, llm_server, tmp_path, clock, store):
    engine = make_engine(db, http, llm_server, tmp_path, clock=clock)
    ids = _poison(db.path, "alice")
    reflection = {"memories": [{"text": "L'utilisateur joue du violoncelle.", "type": "fact", "confidence": 0.9}]}
    llm_server.handler = lambda r: json.dumps(reflection) if r.json_schema is not None else "Avec plaisir."
    session = Session("alice", "Alice", "chan-1", "guild-1")

    result = await engine.conversation.turn(msg("Je joue du violoncelle depuis l'enfance."))
    assert result.reply == "Avec plaisir."
    engine.operator.schedule_reflection("alice")
    await engine.operator.wait_reflections("alice")
    assert [d.text for d in engine.operator.last_reflection("alice").of("added")] == [
        "L'utilisateur joue du violoncelle."
    ]

    listing = await run_command(engine, session, "/memories")
    assert "violoncelle" in listing and "date abîmée (short_year)" in listing and "(garbage_created)" in listing
    # The 3-digit year is read as what it meant: an expiry long past.
    assert (await store.get("alice", ids["short_year"])).expires_at == datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert (await store.get("alice", ids["garbage_created"])).created_at == UNREADABLE_DATE

    history = await run_command(engine, session, "/history")
    assert f"#{ids['short_year']} replace" in history and "une raison assez longue" in history

    export = tmp_path / "alice.json"
    assert "Written to" in await run_command(engine, session, f"/export {export}")
    data = json.loads(export.read_text(encoding="utf-8"))
    exported = {m["text"]: m for m in data["memories"]}
    assert exported["L'utilisateur a une date abîmée (short_year)."]["expires_at"] == "0999-12-31T23:59:59.000000+00:00"
    assert (await run_command(engine, session, "/stats")).startswith("4 memories of at most")
    assert "Le pacte est scellé." in (await run_command(engine, session, "/why"))

    # /restore of the history row with unreadable dates brings its text back.
    [entry] = [h for h in await store.history("alice") if h.operation == "replace"]
    assert await engine.memories.restore("alice", entry.id) == ids["short_year"]
    assert (await store.get("alice", ids["short_year"])).text == "L'utilisateur avait une ancienne version."
