"""Outage: one line when a dependency starts failing, one when it is back, a count between."""

from __future__ import annotations

import logging

from bot.clients.outage import QUIET_SECONDS, Outage

LOGGER = "tests.outage"


class Ticks:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_an_outage_logs_its_start_and_its_end_once_and_counts_every_failure(caplog):
    outage = Outage(logging.getLogger(LOGGER), clock=Ticks())
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for n in range(5):
            outage.failed("down: %s", f"error {n}")
        assert outage.down and (outage.failures, outage.current) == (5, 5)
        outage.recovered("back after %d failure(s)")
        outage.recovered("back after %d failure(s)")  # nothing under way: nothing logged
    assert lines(caplog) == [(logging.WARNING, "down: error 0"), (logging.INFO, "back after 5 failure(s)")]
    assert not outage.down and outage.failures == 5


def test_a_flapping_dependency_logs_once_per_quiet_period(caplog):
    ticks = Ticks()
    outage = Outage(logging.getLogger(LOGGER), level=logging.ERROR, clock=ticks)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(10):  # fails, works, fails, works…
            outage.failed("down")
            outage.recovered("back after %d failure(s)")
            ticks.now += 1
        ticks.now += QUIET_SECONDS
        outage.failed("down again")
    assert lines(caplog) == [
        (logging.ERROR, "down"),
        (logging.INFO, "back after 1 failure(s)"),
        (logging.ERROR, "down again"),
    ]
    assert outage.failures == 11
