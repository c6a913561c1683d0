"""What each page shows, read through the engine and the stores at every request.

Nothing is cached here: a user erased a moment ago is gone from the next page, and the page
never changes memory (the stores it reads are read-only queries on the reader connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

import numpy as np
from markupsafe import Markup

from bot.clients.health import Check, Health
from bot.clients.metrics import QUEUE_PRIORITIES, RECENT_WAITS, Metrics
from bot.clients.responsiveness import Recently
from bot.engine import NEVER_SURFACED_AFTER, Engine
from bot.engine.llm_calls import ModelFigures, TooSmall
from bot.i18n import DEFAULT_LANGUAGE, text, use_locale
from bot.memory.choice import Slot, TurnSelection
from bot.memory.model import Memory, OwnerKey
from bot.memory.reports.page import Backlog, SetAside, TurnHeader, TurnLogEntry, UserSummary
from bot.memory.reports.stats import MemoryStats
from bot.presenting import groups, lore_rows, slot_score
from bot.presenting.why import LoreRow
from bot.web import charts

if TYPE_CHECKING:
    from bot.memory.stores.consolidations import Consolidation

RECENT_TURNS = 20
NEVER_SURFACED_SHOWN = 20
MEMORIES_SHOWN = 300
SET_ASIDE_SHOWN = 20


@dataclass(frozen=True, slots=True)
class Window:
    key: str
    label: str
    span: timedelta
    bucket: timedelta
    tick: str  # strftime of a bucket's label


WINDOWS = {
    "24h": Window("24h", "last 24 hours", timedelta(hours=24), timedelta(hours=1), "%H:00"),
    "7d": Window("7d", "last 7 days", timedelta(days=7), timedelta(hours=6), "%m-%d %Hh"),
    "30d": Window("30d", "last 30 days", timedelta(days=30), timedelta(days=1), "%m-%d"),
}
DEFAULT_WINDOW = "7d"


class TurnFigures(TypedDict):
    """A window of turns: totals, percentiles and the three time charts."""

    total: int
    by_outcome: dict[str, int]
    reply_p50: str
    reply_p95: str
    memory_p50: str
    memory_p95: str
    prompt_median: int | None
    prompt_max: int | None
    context: int | None
    context_full: int
    turns_chart: Markup
    latency_chart: Markup
    prompt_chart: Markup


class CallRow(TypedDict):
    """One kind of call's prompts since start-up, as the page shows them."""

    call: str
    calls: int
    prompt_tokens: int | None
    read_tokens: int | None
    reused_tokens: int | None
    reused_share: str | None
    read_seconds: str


class ModelCard(TypedDict):
    """The language model's card on the overview."""

    server: str
    context: int | None
    context_source: str
    too_small: TooSmall | None
    calls: list[CallRow]


class QueueRow(TypedDict):
    """One priority's waits for the chat model, as the page shows them."""

    priority: str
    calls: int
    p50: str
    p95: str
    max: str


class Overview(TypedDict):
    """The whole bot's page."""

    window: Window
    windows: dict[str, Window]
    checks: dict[str, Check]
    model: ModelCard
    figures: TurnFigures
    backlog: Backlog
    types_chart: Markup
    memory_total: int
    users: list[UserSummary]
    recent: list[TurnHeader]
    never_surfaced: list[Memory]
    never_after: int
    model_queue: list[QueueRow]
    recent_waits: int
    now: datetime
    # The event loop's lag and the embedding model's waits (None without the metrics).
    responsiveness: dict[str, Recently] | None


class UserPage(TypedDict):
    """One user's page."""

    user_id: OwnerKey
    window: Window
    windows: dict[str, Window]
    stats: MemoryStats
    figures: TurnFigures
    backlog: Backlog
    set_aside: list[SetAside]
    consolidations: list[Consolidation]
    types_chart: Markup
    memories: list[Memory]
    memory_total: int
    recent: list[TurnHeader]
    never_after: int
    now: datetime


class TurnPage(TypedDict):
    """One turn's selection, told as /why tells it: its slots by reason, each with its closeness,
    and the lore that fired."""

    user_id: OwnerKey
    turn: TurnSelection
    chosen: str
    legend: str
    groups: list[tuple[str, list[tuple[Slot, str]]]]
    lore: list[LoreRow]


def window(key: str | None) -> Window:
    return WINDOWS.get(key or DEFAULT_WINDOW, WINDOWS[DEFAULT_WINDOW])


def _buckets(now: datetime, w: Window) -> list[datetime]:
    """Bucket starts, oldest first, the last one holding `now`."""
    epoch = datetime(2000, 1, 1, tzinfo=now.tzinfo)
    last = epoch + ((now - epoch) // w.bucket) * w.bucket
    count = int(w.span / w.bucket)
    return [last - w.bucket * i for i in range(count - 1, -1, -1)]


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _seconds(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms / 1000:.2f} s" if ms >= 100 else f"{ms:.0f} ms"


def turn_figures(entries: Sequence[TurnLogEntry], now: datetime, w: Window) -> TurnFigures:
    """Totals, percentiles and the three time charts of a window of turns."""
    starts = _buckets(now, w)
    first = starts[0]
    shown = [e for e in entries if e.created_at >= first]
    per: list[list[TurnLogEntry]] = [[] for _ in starts]
    for e in shown:
        i = int((e.created_at - first) // w.bucket)
        if i < len(per):
            per[i].append(e)
    labels = [s.strftime(w.tick) for s in starts]
    counts = {o: [sum(e.outcome == o for e in bucket) for bucket in per] for o in charts.OUTCOME_COLOURS}
    replies = [float(e.reply_ms) for e in shown if e.reply_ms is not None and e.outcome != "failed"]
    memory = [float(e.memory_ms) for e in shown if e.memory_ms is not None]
    prompts = [e.prompt_tokens for e in shown if e.prompt_tokens is not None]
    contexts = [e.context_tokens for e in shown if e.context_tokens]

    def per_bucket(q: float, field: str) -> list[float | None]:
        out: list[float | None] = []
        for bucket in per:
            values = [getattr(e, field) for e in bucket if getattr(e, field) is not None and e.outcome != "failed"]
            value = _percentile(values, q)
            out.append(None if value is None else value / 1000 if field.endswith("_ms") else value)
        return out

    prompt_series = [
        charts.Series("largest prompt", per_bucket(100, "prompt_tokens"), charts.SERIES_COLOURS[0]),
        charts.Series("median prompt", per_bucket(50, "prompt_tokens"), charts.SERIES_COLOURS[1]),
    ]
    if contexts:
        prompt_series.append(
            charts.Series(
                f"context size ({max(contexts):,})",
                [float(max(contexts))] * len(starts),
                charts.SERIES_COLOURS[2],
                dashed=True,
            )
        )
    return {
        "total": len(shown),
        "by_outcome": {o: sum(counts[o]) for o in counts},
        "reply_p50": _seconds(_percentile(replies, 50)),
        "reply_p95": _seconds(_percentile(replies, 95)),
        "memory_p50": _seconds(_percentile(memory, 50)),
        "memory_p95": _seconds(_percentile(memory, 95)),
        "prompt_median": int(np.median(prompts)) if prompts else None,
        "prompt_max": max(prompts) if prompts else None,
        "context": max(contexts) if contexts else None,
        "context_full": sum(e.context_full for e in shown),
        "turns_chart": charts.stacked_bars("Turns", labels, counts, charts.OUTCOME_COLOURS),
        "latency_chart": charts.lines(
            "Reply and memory latency",
            labels,
            [
                charts.Series("reply p50", per_bucket(50, "reply_ms"), charts.SERIES_COLOURS[0]),
                charts.Series("reply p95", per_bucket(95, "reply_ms"), charts.SERIES_COLOURS[1]),
                charts.Series("memory p95", per_bucket(95, "memory_ms"), charts.SERIES_COLOURS[3]),
            ],
            "seconds",
        ),
        "prompt_chart": charts.lines("Prompt size", labels, prompt_series, "tokens"),
    }


def model_queue(figures: ModelFigures) -> list[QueueRow]:
    """How long model calls waited for a place in the model's budget, by priority, over the
    last waits of each (since start-up): the live row always, the others once they waited."""
    rows: list[QueueRow] = []
    for priority in QUEUE_PRIORITIES:
        waits = [w * 1000 for w in figures.waits[priority]]
        if waits or priority == "live":
            rows.append(
                {
                    "priority": priority.replace("_", "-"),
                    "calls": len(waits),
                    "p50": _seconds(_percentile(waits, 50)),
                    "p95": _seconds(_percentile(waits, 95)),
                    "max": _seconds(max(waits) if waits else None),
                }
            )
    return rows


def model_figures(engine: Engine) -> ModelCard:
    """The language model as the bot knows it: its context and where it was read, the last turn
    that could not fit even its smallest prompt, and each kind of call's prompts since start-up
    as the server counted them (read, and taken from its cache where it says)."""
    figures = engine.operator.model_figures()
    kinds: list[CallRow] = []
    for call, totals in figures.totals.items():
        share = totals.reused_tokens / totals.prompt_tokens if totals.cache_counted and totals.prompt_tokens else None
        kinds.append(
            {
                "call": call,
                "calls": totals.calls,
                "prompt_tokens": totals.prompt_tokens if totals.counted else None,
                "read_tokens": totals.read_tokens if totals.counted else None,
                "reused_tokens": totals.reused_tokens if totals.cache_counted else None,
                "reused_share": None if share is None else f"{share:.0%}",
                "read_seconds": f"{totals.read_seconds:.1f} s" if totals.read_seconds else "—",
            }
        )
    return {
        "server": figures.server,
        "context": figures.context,
        "context_source": figures.context_source,
        "too_small": figures.too_small,
        "calls": kinds,
    }


async def overview(engine: Engine, health: Health, key: str | None, metrics: Metrics | None = None) -> Overview:
    now = engine.clock()
    w = window(key)
    report = engine.operator.report
    entries = await report.bot_turn_log(now - w.span)
    types = await report.bot_memory_types()
    return {
        "window": w,
        "windows": WINDOWS,
        "checks": await health.checks(),
        "model": model_figures(engine),
        "figures": turn_figures(entries, now, w),
        "backlog": await report.bot_backlog(),
        "types_chart": charts.hbars("Memories per type", types),
        "memory_total": sum(types.values()),
        "users": await report.user_summaries(),
        "recent": await report.bot_recent_turns(RECENT_TURNS),
        "never_surfaced": await report.bot_never_surfaced(NEVER_SURFACED_AFTER, NEVER_SURFACED_SHOWN),
        "never_after": NEVER_SURFACED_AFTER,
        "model_queue": model_queue(engine.operator.model_figures()),
        "recent_waits": RECENT_WAITS,
        "now": now,
        "responsiveness": responsiveness(metrics) if metrics is not None else None,
    }


def responsiveness(metrics: Metrics) -> dict[str, Recently]:
    """The event loop's lag and the local embedding model's queue waits, last minutes."""
    return {
        "event loop lag": metrics.recent_lag.figures(),
        "turn query's wait for the embedding model": metrics.recent_queue_wait["query"].figures(),
        "background passages' wait for the embedding model": metrics.recent_queue_wait["passages"].figures(),
    }


async def user(engine: Engine, user_id: OwnerKey, key: str | None) -> UserPage | None:
    """The user's page, or None when the bot holds nothing about them (never seen, or erased)."""
    now = engine.clock()
    w = window(key)
    report = engine.operator.report
    stats = await engine.memories.stats(user_id)
    memories = await engine.memories.list(user_id)
    recent = await report.user_recent_turns(user_id, RECENT_TURNS)
    entries = await report.user_turn_log(user_id, now - w.span)
    backlog = await report.user_backlog(user_id)
    if not (memories or recent or entries or stats.turns or backlog.pending or backlog.set_aside):
        return None
    return {
        "user_id": user_id,
        "window": w,
        "windows": WINDOWS,
        "stats": stats,
        "figures": turn_figures(entries, now, w),
        "backlog": backlog,
        "set_aside": await report.user_set_aside(user_id, SET_ASIDE_SHOWN),
        "consolidations": await engine.memories.consolidations(user_id),
        "types_chart": charts.hbars("Memories per type", dict(sorted(stats.by_type.items()))),
        "memories": memories[-MEMORIES_SHOWN:][::-1],
        "memory_total": len(memories),
        "recent": recent,
        "never_after": NEVER_SURFACED_AFTER,
        "now": now,
    }


async def turn(engine: Engine, user_id: OwnerKey, turn_id: int) -> TurnPage | None:
    """One turn's selection, told as /why tells it (the same reasons, the same closeness, the
    same lore), in the page's language, English."""
    await engine.conversation.wait_recorded(user_id)
    selection = await engine.operator.report.user_turn(user_id, turn_id)
    if selection is None:
        return None
    with use_locale(DEFAULT_LANGUAGE):
        return {
            "user_id": user_id,
            "turn": selection,
            "chosen": text(
                "why_chosen",
                chosen=text("n_chosen", n=len(selection.slots)),
                candidates=text("n_candidates", n=selection.candidates),
            ),
            "legend": text("why_legend"),
            "groups": [(g.title, [(s, slot_score(s)) for s in g.slots]) for g in groups(selection)],
            "lore": lore_rows(selection.lore),
        }
