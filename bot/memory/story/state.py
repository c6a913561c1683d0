"""A story's bounded state (mood, trust…): the character file declares each value's range and
largest step, the reflection proposes deltas, and the code clamps both. Pure, no I/O.

Without the clamps, mood and trust drift a little further every reflection; a delta is clamped
to ±max_delta per turn and a value to the declared range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.errors import StateSpecError


@dataclass(frozen=True, slots=True)
class StateSpec:
    name: str
    minimum: float
    maximum: float
    default: float
    max_delta: float
    description: str = ""

    def clamp(self, value: float) -> float:
        return min(self.maximum, max(self.minimum, value))


# --- state specs (character file) ------------------------------------------------------------


_SPEC_FIELDS = frozenset({"min", "max", "default", "max_delta", "description"})


def is_finite_number(value: Any) -> bool:
    """A real number a float can hold. bool is an int in Python, but `max_delta: yes` or a delta
    of `true` is a mistake, not a number; an int past the float range (10**400) is not finite."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _spec_number(name: str, raw: Mapping[str, Any], key: str) -> float:
    if key not in raw:
        raise StateSpecError(f"state.{name}.{key}: missing")
    value = raw[key]
    if not is_finite_number(value):
        raise StateSpecError(f"state.{name}.{key}: must be a finite number, got {value!r}")
    return float(value)


def parse_state_specs(raw: Mapping[str, Any] | None) -> dict[str, StateSpec]:
    """Read the character file's `state:` mapping: {name: {min, max, default, max_delta}}."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise StateSpecError(f"state: must be a mapping of name -> spec, got {type(raw).__name__}")
    specs: dict[str, StateSpec] = {}
    for name, body in raw.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise StateSpecError(f"state.{name}: the name must be an identifier like mood_2")
        if not isinstance(body, Mapping):
            raise StateSpecError(f"state.{name}: must map min, max, default and max_delta")
        unknown = sorted(set(map(str, body)) - _SPEC_FIELDS)
        if unknown:
            raise StateSpecError(f"state.{name}: unknown field(s) {', '.join(unknown)}")
        minimum = _spec_number(name, body, "min")
        maximum = _spec_number(name, body, "max")
        default = _spec_number(name, body, "default")
        max_delta = _spec_number(name, body, "max_delta")
        if minimum >= maximum:
            raise StateSpecError(f"state.{name}: min ({minimum:g}) must be below max ({maximum:g})")
        if not minimum <= default <= maximum:
            raise StateSpecError(f"state.{name}.default: {default:g} is outside [{minimum:g}, {maximum:g}]")
        if max_delta <= 0:
            raise StateSpecError(f"state.{name}.max_delta: must be positive, got {max_delta:g}")
        description = body.get("description", "")
        if not isinstance(description, str):
            raise StateSpecError(f"state.{name}.description: must be text")
        specs[name] = StateSpec(name, minimum, maximum, default, max_delta, description.strip())
    return specs


# --- bounded state ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateChange:
    name: str
    before: float
    after: float
    proposed: float
    applied: float


@dataclass(slots=True)
class StatePlan:
    values: dict[str, float] = field(default_factory=dict)
    changes: list[StateChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def state_values(specs: Mapping[str, StateSpec], stored: Mapping[str, float]) -> dict[str, float]:
    """Every declared state at its stored value (default when absent), within its range.

    A stored value outside a range that the character file has since narrowed is clamped; a
    stored name no longer declared is left out.
    """
    values: dict[str, float] = {}
    for name, spec in specs.items():
        value = stored.get(name, spec.default)
        if not is_finite_number(value):
            value = spec.default
        values[name] = spec.clamp(float(value))
    return values


def apply_state_deltas(
    specs: Mapping[str, StateSpec], current: Mapping[str, float], deltas: Mapping[str, Any] | None
) -> StatePlan:
    """Clamp each proposed delta to ±max_delta and each value to [min, max].

    Unknown keys and deltas that are not finite numbers (NaN, inf, text, booleans) are ignored
    with a note each. A change is recorded whenever the value after the delta differs from the
    value before it (the stored one, or the default).
    """
    plan = StatePlan(values=state_values(specs, current))
    for key, delta in (deltas or {}).items():
        spec = specs.get(key) if isinstance(key, str) else None
        if spec is None:
            plan.notes.append(f"state key {key!r} is not declared: ignored")
            continue
        if not is_finite_number(delta):
            plan.notes.append(f"state delta for {key!r} is not a finite number: {delta!r} ignored")
            continue
        proposed = float(delta)
        applied = max(-spec.max_delta, min(spec.max_delta, proposed))
        if applied != proposed:
            plan.notes.append(f"state {key}: delta {proposed:+g} clamped to {applied:+g}")
        before = plan.values[key]
        # Rounded so that repeated small steps do not store 0.30000000000000004.
        after = round(spec.clamp(before + applied), 6)
        if after != round(before + applied, 6):
            plan.notes.append(f"state {key}: {before + applied:g} clamped to [{spec.minimum:g}, {spec.maximum:g}]")
        plan.values[key] = after
        if after != before:
            plan.changes.append(StateChange(key, before, after, proposed, applied))
    return plan
