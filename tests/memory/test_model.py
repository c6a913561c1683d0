"""The memory vocabulary's closed sets: the history causes read back exactly as they were
written, and what no version of Écho writes stays as stored."""

from __future__ import annotations

import pytest

from bot.memory.model import Cause

WRITTEN = [
    (Cause.reflection(), "reflection"),
    (Cause.reflection("987654321"), "reflection of message 987654321"),
    (Cause.reflection("exchange 4"), "reflection of message exchange 4"),
    (Cause("message_deleted"), "message deleted"),
    (Cause("forget"), "user: /forget"),
    (Cause("edit"), "user: edit"),
    (Cause("restore"), "user: /restore"),
    (Cause.consolidated(12), "consolidated into #12"),
]


@pytest.mark.parametrize(("cause", "stored"), WRITTEN)
def test_each_cause_is_stored_as_every_version_wrote_it_and_read_back(cause: Cause, stored: str) -> None:
    assert cause.stored() == stored
    assert Cause.from_stored(stored) == cause


def test_every_kind_a_writer_uses_has_its_stored_text() -> None:
    assert {cause.kind for cause, _ in WRITTEN} == {
        "reflection",
        "message_deleted",
        "forget",
        "edit",
        "restore",
        "consolidated",
    }


@pytest.mark.parametrize(
    "stored", ["", "test", "consolidated into #", "consolidated into #12a", "consolidated into #１２", "user: /erase"]
)
def test_a_text_no_version_writes_is_other_and_kept_as_stored(stored: str) -> None:
    cause = Cause.from_stored(stored)
    assert (cause.kind, cause.stored()) == ("other", stored)


def test_the_restore_an_older_store_wrote_reads_as_a_restore() -> None:
    assert Cause.from_stored("restore") == Cause("restore")
