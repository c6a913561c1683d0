"""Which of the entries that fired are kept: one per inclusion group, those that pass their
probability draw, and those that fit the budget (bot/characters/lorebook.py says the rules).
Draws come from the turn's seed: the same message draws the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from bot.characters.lore import Fired, Left, LoreEntry
from bot.characters.lore_keys import Found
from bot.characters.lore_timing import LoreClock


def inclusion_groups(
    entries: Sequence[LoreEntry], new: list[Fired], fired: dict[int, Fired], left: Left, seed: str
) -> list[Fired]:
    """One entry per inclusion group among those that fired in this step."""
    groups: dict[str, list[Fired]] = {}
    for f in new:
        for group in entries[f.index].groups:
            groups.setdefault(group, []).append(f)
    losers: set[int] = set()
    winners: set[int] = set()
    taken = {g for f in fired.values() for g in entries[f.index].groups}
    for group, members in groups.items():
        members = [m for m in members if m.index not in losers]
        if group in taken:
            losers.update(m.index for m in members)
            continue
        # An entry kept for one of its groups leaves out the others of all its groups.
        won = [m for m in members if m.index in winners]
        if won:
            losers.update(m.index for m in members if m is not won[0])
            continue
        sticky = [m for m in members if m.how == "sticky"]
        if sticky:
            losers.update(m.index for m in members if m not in sticky)
            winners.update(m.index for m in sticky)
            continue
        if any(entries[m.index].group_scoring for m in members):
            best = max(m.score for m in members)
            scored = [m for m in members if entries[m.index].group_scoring and m.score < best]
            losers.update(m.index for m in scored)
            members = [m for m in members if m not in scored]
        if len(members) <= 1:
            winners.update(m.index for m in members)
            continue
        first = [m for m in members if entries[m.index].group_override]
        if first:
            winner = max(first, key=lambda m: (entries[m.index].order, -m.index))
        else:
            weights = [max(0, entries[m.index].group_weight) for m in members]
            roll = draw(seed, f"group:{group}") * sum(weights)
            winner, total = members[-1], 0.0
            for member, weight in zip(members, weights):
                total += weight
                if roll < total:
                    winner = member
                    break
        losers.update(m.index for m in members if m is not winner)
        winners.add(winner.index)
    for f in new:
        if f.index in losers:
            left[f.index] = ("group", f.key, f.how)
    return [f for f in new if f.index not in losers]


def passes_probability(entries: Sequence[LoreEntry], f: Fired, seed: str, left: Left) -> bool:
    entry = entries[f.index]
    if entry.probability >= 100 or f.how == "sticky":
        return True
    if draw(seed, f"probability:{entry.uid}") * 100 < entry.probability:
        return True
    left[f.index] = ("probability", f.key, f.how)
    return False


def within_budget(entries: Sequence[LoreEntry], fired: dict[int, Fired], budget: int, clock: LoreClock) -> set[int]:
    """The entries kept: the constant ones, then the most relevant that fit."""
    kept = {i for i in fired if entries[i].constant or entries[i].ignore_budget}
    # Constant entries take their part of the budget; those that ignore it take none.
    used = sum(entries[i].cost for i in kept if not entries[i].ignore_budget)

    def relevance(f: Fired) -> tuple[int, ...]:
        e = entries[f.index]
        return (f.how != "sticky", f.level, -e.priority, f.distance, -f.score, -e.order, f.index)

    for f in sorted((f for f in fired.values() if f.index not in kept), key=relevance):
        cost = entries[f.index].cost
        if used + cost <= budget:
            kept.add(f.index)
            used += cost
    for index in kept:
        entry = entries[index]
        clock.fired(entry.uid, sticky=entry.sticky, cooldown=entry.cooldown)
    return kept


def score(entry: LoreEntry, found: Found) -> int:
    """Keys matched, as SillyTavern's group scoring counts them."""
    score = len(found.primary)
    wanted = len(entry.secondary) + len(entry.secondary_regexes)
    if entry.logic == "and_any" or (entry.logic == "and_all" and len(found.secondary) >= wanted):
        score += len(found.secondary)
    return score


def draw(seed: str, what: str) -> float:
    """A number in [0, 1) drawn from the turn's seed: the same turn draws the same."""
    digest = hashlib.blake2b(f"{seed}\x00{what}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
