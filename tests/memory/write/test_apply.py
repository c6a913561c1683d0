"""The write path end to end on a real SQLite file: one reflection, one transaction, a report."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from bot.memory.model import Cause, NewMemory
from bot.memory.stores.memory_store import MemoryStore
from bot.memory.write.apply import apply_reflection
from bot.memory.write.decisions import ReflectionContext
from bot.memory.write.reflection import parse_reflection

pytestmark = pytest.mark.both_stores


@pytest.fixture
def store(db, clock) -> MemoryStore:
    return MemoryStore(db, clock=clock)


def reflection(**fields):
    return parse_reflection(json.dumps(fields)).reflection


def fact(text: str, confidence: float = 0.95, **extra) -> dict:
    return {"text": text, "type": "fact", "scope": "global", "confidence": confidence, **extra}


def ctx(allowed=(), message: str = "", **extra) -> ReflectionContext:
    return ReflectionContext(
        user_id="camille",
        allowed_ids=frozenset(allowed),
        character_name="Écho",
        user_message=message,
        user_name="Camille",
        story_id="chan-1",
        place="guild-1",
        source="msg-1",
        **extra,
    )


async def texts(store: MemoryStore, user: str = "camille") -> list[str]:
    return [m.text for m in await store.list(user)]


async def test_seed_001_session_adds_two_separate_facts(db, store, clock):
    r = reflection(memories=[fact("L'utilisateur habite à Nantes."), fact("L'utilisateur vient au bureau en vélo.")])
    report = await apply_reflection(db, r, ctx(message="J'habite à Nantes et je viens au bureau en vélo."), clock=clock)
    assert [d.action for d in report.decisions] == ["added", "added"]
    assert await texts(store) == ["L'utilisateur habite à Nantes.", "L'utilisateur vient au bureau en vélo."]
    m = (await store.list("camille"))[0]
    assert (m.place, m.story_id, m.source) == ("guild-1", "chan-1", "msg-1")


async def test_seed_001_wrong_replacement_is_applied_as_an_add_and_the_old_fact_stays(db, store, clock):
    velo = await store.add("camille", NewMemory(text="L'utilisateur vient au bureau en vélo.", place="guild-1"))
    r = reflection(replace=[{"id": velo, "text": "L'utilisateur n'est jamais disponible le mercredi."}])
    report = await apply_reflection(
        db, r, ctx({velo}, "Je ne suis jamais disponible le mercredi, c'est mon jour de sport."), clock=clock
    )
    [decision] = report.decisions
    assert decision.action == "replace_as_add" and f"#{velo} kept" in decision.detail
    assert await texts(store) == [
        "L'utilisateur vient au bureau en vélo.",
        "L'utilisateur n'est jamais disponible le mercredi.",
    ]
    assert await store.history("camille") == []


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("The user's sister lives in Paris.", "The user's brother lives in Paris.", "My brother just moved to Paris."),
        (
            "La sœur de l'utilisateur habite à Paris.",
            "Le frère de l'utilisateur habite à Paris.",
            "Mon frère a déménagé à Paris.",
        ),
    ],
)
async def test_another_persons_fact_never_replaces_the_first_ones(db, store, clock, old, new, message):
    sister = await store.add("camille", NewMemory(text=old, place="guild-1"))
    r = reflection(replace=[{"id": sister, "text": new}])
    report = await apply_reflection(db, r, ctx({sister}, message), clock=clock)
    [decision] = report.decisions
    assert decision.action == "replace_as_add" and f"#{sister} kept" in decision.detail
    assert await texts(store) == [old, new]
    assert await store.history("camille") == []


async def test_a_true_correction_replaces_and_archives(db, store, clock):
    team = await store.add(
        "camille", NewMemory(text="L'utilisateur fait partie de l'équipe Paiements.", place="guild-1")
    )
    clock.advance(days=3)
    r = reflection(replace=[{"id": team, "text": "L'utilisateur fait partie de l'équipe Logistique."}])
    report = await apply_reflection(
        db, r, ctx({team}, "J'ai quitté l'équipe Paiements pour la Logistique."), clock=clock
    )
    assert [d.action for d in report.decisions] == ["replaced"]
    assert await texts(store) == ["L'utilisateur fait partie de l'équipe Logistique."]
    [old] = await store.history("camille")
    assert old.operation == "replace" and old.text == "L'utilisateur fait partie de l'équipe Paiements."
    assert old.cause == Cause.reflection("msg-1")


async def test_operations_only_touch_ids_that_were_shown(db, store, clock):
    shown = await store.add("camille", NewMemory(text="L'utilisateur aime le jazz.", place="guild-1"))
    hidden = await store.add("camille", NewMemory(text="L'utilisateur a un chat nommé Pixel.", place="guild-1"))
    r = reflection(delete=[hidden, 424242], replace=[{"id": hidden, "text": "L'utilisateur a un chat nommé Biscuit."}])
    report = await apply_reflection(db, r, ctx({shown}), clock=clock)
    assert [(d.action, d.detail) for d in report.decisions] == [
        ("delete_refused", "id not shown to the model"),
        ("delete_refused", "id not shown to the model"),
        ("replace_refused", "id not shown to the model"),
    ]
    assert len(await texts(store)) == 2


async def test_another_users_id_behaves_like_an_id_that_does_not_exist(db, store, clock):
    bob = await store.add("bob", NewMemory(text="L'utilisateur aime le rock."))
    # Even if a bug showed Bob's id to Camille's reflection, nothing of Bob's moves.
    r = reflection(delete=[bob], replace=[{"id": bob, "text": "L'utilisateur aime le jazz."}])
    report = await apply_reflection(db, r, ctx({bob, 999_999}), clock=clock)
    assert [(d.action, d.detail) for d in report.decisions] == [
        ("delete_refused", "no such memory"),
        ("replace_refused", "no such memory"),
    ]
    missing = await apply_reflection(db, reflection(delete=[999_999]), ctx({999_999}), clock=clock)
    assert [(d.action, d.detail) for d in missing.decisions] == [("delete_refused", "no such memory")]
    assert (await store.get("bob", bob)).text == "L'utilisateur aime le rock."
    assert await store.history("bob") == []


async def test_delete_archives_and_can_be_restored(db, store, clock):
    team = await store.add(
        "camille", NewMemory(text="L'utilisateur fait partie de l'équipe Paiements.", place="guild-1")
    )
    report = await apply_reflection(db, reflection(delete=[team]), ctx({team}), clock=clock)
    assert [d.action for d in report.decisions] == ["deleted"]
    [entry] = await store.history("camille")
    assert await store.restore("camille", entry.id) == team
    assert await texts(store) == ["L'utilisateur fait partie de l'équipe Paiements."]


async def test_filters_drop_with_the_filters_name(db, store, clock):
    r = reflection(
        memories=[
            fact("L'utilisateur aime peut-être le thé.", confidence=0.6),
            fact("Écho aime le thé au jasmin."),
            fact("Écho trouve l'utilisateur attachant."),
            fact("L'utilisateur aime le thé vert."),
        ]
    )
    report = await apply_reflection(db, r, ctx(), clock=clock)
    dropped = {d.text: d.detail.split(":")[0] for d in report.of("dropped")}
    assert dropped == {
        "L'utilisateur aime peut-être le thé.": "low_confidence",
        "Écho aime le thé au jasmin.": "not_about_user",
        "Écho trouve l'utilisateur attachant.": "character_attitude",
    }
    assert await texts(store) == ["L'utilisateur aime le thé vert."]


async def test_a_negation_flipped_while_copying_is_dropped(db, store, clock):
    await store.add("camille", NewMemory(text="L'utilisateur n'aime pas les épinards.", place="guild-1"))
    r = reflection(memories=[fact("L'utilisateur aime les épinards.")])
    report = await apply_reflection(db, r, ctx(message="Ce soir on mange des épinards, bof."), clock=clock)
    assert [d.action for d in report.decisions] == ["dropped"]
    assert report.decisions[0].detail.startswith("flipped_negation")
    assert await texts(store) == ["L'utilisateur n'aime pas les épinards."]


async def test_a_rewording_is_absorbed_without_refreshing_the_date(db, store, clock):
    original = await store.add(
        "camille", NewMemory(text="L'utilisateur est allergique aux arachides.", place="guild-1")
    )
    before = (await store.get("camille", original)).updated_at
    clock.advance(days=10)
    r = reflection(memories=[fact("L'utilisateur est allergique aux arachides")])
    report = await apply_reflection(db, r, ctx(), clock=clock)
    [d] = report.decisions
    assert d.action == "absorbed" and d.memory_id == original
    m = await store.get("camille", original)
    assert m.updated_at == before and len(await texts(store)) == 1


async def test_a_swapped_allergy_is_a_second_memory_not_a_merge(db, store, clock):
    await store.add("camille", NewMemory(text="L'utilisateur est allergique aux arachides.", place="guild-1"))
    r = reflection(memories=[fact("L'utilisateur est allergique aux crustacés.")])
    report = await apply_reflection(db, r, ctx(), clock=clock)
    assert [d.action for d in report.decisions] == ["added"]
    assert len(await texts(store)) == 2


async def test_a_different_number_is_a_different_fact(db, store, clock):
    await store.add(
        "camille", NewMemory(text="Le contrat de l'utilisateur prévoit 10 séances à 200 € chacune.", place="guild-1")
    )
    r = reflection(memories=[fact("Le contrat de l'utilisateur prévoit 3 séances à 50 € chacune.")])
    report = await apply_reflection(db, r, ctx(), clock=clock)
    assert [d.action for d in report.decisions] == ["added"]
    assert len(await texts(store)) == 2


async def test_dedup_does_not_cross_places(db, store, clock):
    await store.add("camille", NewMemory(text="L'utilisateur est allergique aux arachides.", place="dm"))
    r = reflection(memories=[fact("L'utilisateur est allergique aux arachides.")])
    report = await apply_reflection(db, r, ctx(), clock=clock)
    assert [d.action for d in report.decisions] == ["added"]


async def test_dated_facts_keep_their_expiry(db, store, clock):
    r = reflection(memories=[fact("L'utilisateur est en congé tout le mois d'août.", expires_at="2027-08-31")])
    await apply_reflection(db, r, ctx(), clock=clock)
    [m] = await store.list("camille")
    assert m.expires_at is not None and m.expires_at.date().isoformat() == "2027-08-31"
    clock.now = m.expires_at + timedelta(seconds=1)
    assert await store.list("camille", include_expired=False) == []
    assert len(await store.list("camille")) == 1


async def test_an_expired_memory_does_not_absorb_its_renewal(db, store, clock):
    await store.add(
        "camille",
        NewMemory(
            text="L'utilisateur est en congé en août.", place="guild-1", expires_at=clock.now - timedelta(days=1)
        ),
    )
    report = await apply_reflection(
        db, reflection(memories=[fact("L'utilisateur est en congé en août.")]), ctx(), clock=clock
    )
    assert [d.action for d in report.decisions] == ["added"]


async def test_a_crash_mid_reflection_lands_nothing(db, store, clock):
    team = await store.add(
        "camille", NewMemory(text="L'utilisateur fait partie de l'équipe Paiements.", place="guild-1")
    )
    r = reflection(
        delete=[team],
        memories=[fact("L'utilisateur habite à Nantes.")],
    )

    async def crash(conn):
        raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        await apply_reflection(db, r, ctx({team}), clock=clock, finalize=crash)
    assert await texts(store) == ["L'utilisateur fait partie de l'équipe Paiements."]
    assert await store.history("camille") == []


async def test_the_report_lists_every_decision(db, store, clock):
    r = reflection(memories=[fact("L'utilisateur habite à Nantes."), fact("L'utilisateur habite à Nantes.")])
    report = await apply_reflection(db, r, ctx(), clock=clock, problems=["memories[2] dropped: type"])
    assert [d.action for d in report.decisions] == ["added", "absorbed"]
    assert report.problems == ["memories[2] dropped: type"]
    assert report.summary() == "1 absorbed, 1 added"


async def test_operations_on_an_expired_shown_memory_work(db, store, clock):
    old = await store.add(
        "camille",
        NewMemory(
            text="L'utilisateur est en congé en août.", place="guild-1", expires_at=clock.now - timedelta(days=1)
        ),
    )
    report = await apply_reflection(db, reflection(delete=[old]), ctx({old}), clock=clock)
    assert [d.action for d in report.decisions] == ["deleted"]


async def test_a_reflection_never_edits_a_memory_of_another_place(db, store, clock):
    dm = await store.add("camille", NewMemory(text="L'utilisateur est en congé en juillet.", place="dm"))
    r = reflection(delete=[dm], replace=[{"id": dm, "text": "L'utilisateur est en congé en juillet et août."}])
    report = await apply_reflection(db, r, ctx({dm}, "Je suis en congé en juillet et août."), clock=clock)
    assert {(d.action, d.detail) for d in report.decisions} == {
        ("delete_refused", "memory of another place"),
        ("replace_refused", "memory of another place"),
    }
    assert (await store.get("camille", dm)).text == "L'utilisateur est en congé en juillet."


async def test_pinned_memories_change_only_by_the_users_hand(db, store, clock):
    pinned = await store.add(
        "camille", NewMemory(text="L'utilisateur aime les films de Miyazaki.", place="guild-1", pinned=True)
    )
    r = reflection(
        delete=[pinned],
        replace=[{"id": pinned, "text": "L'utilisateur aime les films de Ghibli."}],
        memories=[fact("L'utilisateur aime les films de Hayao Miyazaki.")],
    )
    report = await apply_reflection(
        db, r, ctx({pinned}, "Je n'aime plus Miyazaki, maintenant c'est Ghibli."), clock=clock
    )
    assert [(d.action, d.detail.split(":")[-1].strip()) for d in report.decisions] == [
        ("delete_refused", "pinned by the user"),
        ("replace_refused", "pinned by the user"),
        ("absorbed", "kept as written"),
    ]
    assert (await store.get("camille", pinned)).text == "L'utilisateur aime les films de Miyazaki."


async def test_a_richer_rewording_merges_archives_the_old_wording_and_refreshes_the_date(db, store, clock):
    memory_id = await store.add("camille", NewMemory(text="L'utilisateur aime les films de Miyazaki.", place="guild-1"))
    clock.advance(days=5)
    report = await apply_reflection(
        db, reflection(memories=[fact("L'utilisateur aime les films de Hayao Miyazaki.")]), ctx(), clock=clock
    )
    [d] = report.decisions
    assert (d.action, d.memory_id) == ("merged", memory_id)
    m = await store.get("camille", memory_id)
    assert m.text == "L'utilisateur aime les films de Hayao Miyazaki." and m.updated_at == clock.now
    [old] = await store.history("camille")
    assert (old.operation, old.text, old.cause) == (
        "merge",
        "L'utilisateur aime les films de Miyazaki.",
        Cause.reflection("msg-1"),
    )


@pytest.mark.parametrize(
    "old, new, message",
    [
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
    ],
)
async def test_a_neighbouring_fact_sharing_the_verb_does_not_overwrite_the_old_one(db, store, clock, old, new, message):
    old_id = await store.add("camille", NewMemory(text=old, place="guild-1"))
    report = await apply_reflection(
        db, reflection(replace=[{"id": old_id, "text": new}]), ctx({old_id}, message), clock=clock
    )
    assert [d.action for d in report.decisions] == ["replace_as_add"]
    assert sorted(await texts(store)) == sorted([old, new])


async def test_a_replacement_carries_its_own_expiry(db, store, clock):
    leave = await store.add(
        "camille",
        NewMemory(
            text="L'utilisateur est en congé en août.", place="guild-1", expires_at=clock.now + timedelta(days=30)
        ),
    )
    r = reflection(
        replace=[{"id": leave, "text": "L'utilisateur est en congé en septembre.", "expires_at": "2027-09-30"}]
    )
    await apply_reflection(db, r, ctx({leave}, "Finalement mon congé, c'est en septembre, pas en août."), clock=clock)
    m = await store.get("camille", leave)
    assert m.text == "L'utilisateur est en congé en septembre." and m.expires_at.date().isoformat() == "2027-09-30"
    r = reflection(replace=[{"id": leave, "text": "L'utilisateur ne prend plus de congés."}])
    await apply_reflection(db, r, ctx({leave}, "Finalement je ne prends plus de congés."), clock=clock)
    assert (await store.get("camille", leave)).expires_at is None


async def test_an_absorbed_repeat_keeps_its_date_but_takes_a_new_expiry(db, store, clock):
    memory_id = await store.add("camille", NewMemory(text="L'utilisateur part au Japon en avril.", place="guild-1"))
    before = (await store.get("camille", memory_id)).updated_at
    clock.advance(days=2)
    r = reflection(memories=[fact("L'utilisateur part au Japon en avril.", expires_at="2027-04-30")])
    report = await apply_reflection(db, r, ctx(), clock=clock)
    assert [d.action for d in report.decisions] == ["absorbed"]
    m = await store.get("camille", memory_id)
    assert m.updated_at == before and m.expires_at.date().isoformat() == "2027-04-30"


async def test_an_impossible_expiry_drops_its_item_alone(db, store, clock):
    r = reflection(
        memories=[
            fact("L'utilisateur habite à Nantes."),
            fact("L'utilisateur part en vacances.", expires_at="9999-12-31T23:59:59-05:00"),
        ]
    )
    await apply_reflection(db, r, ctx(), clock=clock)
    assert await texts(store) == ["L'utilisateur habite à Nantes."]
