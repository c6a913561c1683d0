"""The bot's Prometheus metrics, in one registry per process (per test), never the global one.

The engine counts turns, reflections and tokens as they happen; the embedder is timed by a
wrapper; the database's failed writes and the reflection backlog are read when /metrics is
scraped, so they cannot drift from what the database and its Outage say.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bot.clients import backup
from bot.clients.embeddings import Embedder
from bot.clients.model_queue import ModelQueue
from bot.clients.responsiveness import Recent, watch_loop

TURN_OUTCOMES = ("answered", "degraded", "failed")
# The chat model's budget's priorities (bot/clients/model_queue.py `Priority`), most urgent first.
QUEUE_PRIORITIES = ("live", "follow_up", "reflection", "consolidation", "import")
# A call that finds a free place waits microseconds; behind another call, seconds to minutes.
_QUEUE_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
# Waits kept per priority for the owner's page's percentiles.
RECENT_WAITS = 1000
REFLECTION_OUTCOMES = ("applied", "llm_failed", "rejected", "set_aside", "crashed")
LLM_CALLS = ("reply", "reflection")
# A reply takes seconds on a GPU, tens on a CPU; a reflection up to minutes.
_LLM_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
# A local query embedding takes milliseconds; a remote one or a batch, up to seconds.
_EMBED_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The event loop's lag and a model queue's wait: milliseconds when all is well, seconds when not.
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_TOKEN_BUCKETS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


class _FailureCount(Collector):
    """A counter whose value lives elsewhere (an Outage's `failures`), read at scrape time."""

    def __init__(self, name: str, documentation: str, read: Callable[[], int]) -> None:
        self._name = name
        self._documentation = documentation
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._documentation)
        family.add_metric([], float(self._read()))
        yield family


class _Cache(Collector):
    """The memory cache's figures, kept by the cache, read at scrape time."""

    def __init__(self, reads: Callable[[], Mapping[str, int]], held: Callable[[], tuple[int, int]]) -> None:
        self._reads = reads
        self._held = held

    def collect(self) -> Iterator[Metric]:
        reads = CounterMetricFamily(
            "echo_memory_cache_reads",
            "Reads of a person's memories by how the cache served them: hit, catch_up (the changes since), load (whole)",
            labels=["how"],
        )
        for how, count in self._reads().items():
            reads.add_metric([how], float(count))
        yield reads
        people, nbytes = self._held()
        held = GaugeMetricFamily("echo_memory_cache_people", "People whose memories the cache holds")
        held.add_metric([], float(people))
        yield held
        size = GaugeMetricFamily("echo_memory_cache_bytes", "Bytes the cache holds (at most 1 GiB)")
        size.add_metric([], float(nbytes))
        yield size


class _Foreground(Collector):
    """The turns doing memory work now, and how long long jobs stepped aside for them, kept by
    the memory cache (bot/memory/cache/slices.py: Foreground), read at scrape time."""

    def __init__(self, figures: Callable[[], tuple[int, float]]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        turns, stepped_aside = self._figures()
        now = GaugeMetricFamily(
            "echo_turns_memory_work", "Turns doing their memory work now (not waiting for the model)"
        )
        now.add_metric([], float(turns))
        yield now
        aside = CounterMetricFamily(
            "echo_background_stepped_aside_seconds",
            "Seconds a long job for one person (a cold load, a write index, a series scan) waited for others' turns",
        )
        aside.add_metric([], stepped_aside)
        yield aside


class _Backups(Collector):
    """The scheduled backups' figures, kept by bot.clients.backup, read at scrape time."""

    def collect(self) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "echo_backup_failures", "Scheduled backups that failed (the previous ones are kept)"
        )
        failures.add_metric([], float(backup.scheduled_failures.failures))
        yield failures
        last = GaugeMetricFamily(
            "echo_backup_last_success_timestamp_seconds",
            "Unix time of the last scheduled backup that succeeded (0: none yet)",
        )
        last.add_metric([], backup.last_success)
        yield last


class _QueueWaiting(Collector):
    """The model calls waiting for a place in the chat model's budget, by priority, read at
    scrape time."""

    def __init__(self) -> None:
        self.read: Callable[[str], int] = lambda priority: 0

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "echo_llm_queue_waiting",
            "LLM calls waiting for a place in the model's budget, by priority",
            labels=["priority"],
        )
        for priority in QUEUE_PRIORITIES:
            family.add_metric([priority], float(self.read(priority)))
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter(
            "echo_turns",
            "Turns by outcome: answered, degraded (answered without semantic recall), failed (no reply)",
            ["outcome"],
            registry=r,
        )
        self.reflections = Counter("echo_reflections", "Reflection attempts by outcome", ["outcome"], registry=r)
        self.consolidations = Counter(
            "echo_consolidations",
            "Series consolidation decisions: applied, or the reason it was refused",
            ["outcome"],
            registry=r,
        )
        self.reflection_backlog = Gauge(
            "echo_reflection_backlog", "Answered exchanges waiting for their reflection", registry=r
        )
        self.reflection_set_aside = Gauge(
            "echo_reflection_set_aside", "Exchanges whose reflection was given up after repeated failures", registry=r
        )
        self.llm_seconds = Histogram(
            "echo_llm_seconds",
            "Duration of LLM calls, failed ones included",
            ["call"],
            buckets=_LLM_BUCKETS,
            registry=r,
        )
        self.memory_seconds = Histogram(
            "echo_memory_seconds",
            "Duration of a turn's memory selection, embedding included",
            buckets=_EMBED_BUCKETS,
            registry=r,
        )
        self.embedding_seconds = Histogram(
            "echo_embedding_seconds", "Duration of embedder calls", ["call"], buckets=_EMBED_BUCKETS, registry=r
        )
        self.prompt_tokens = Histogram(
            "echo_prompt_tokens",
            "Prompt tokens per LLM call, as the server counted them",
            ["call"],
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.completion_tokens = Counter("echo_completion_tokens", "Tokens generated by the LLM", ["call"], registry=r)
        self.context_full = Counter(
            "echo_prompt_context_full",
            "LLM calls whose prompt reached the context size: the server cut its start",
            ["call"],
            registry=r,
        )
        # The server's own figures: of each prompt, what it read and what it took from its cache
        # (llama.cpp's timings, OpenAI's cached_tokens, Ollama's counts and durations).
        self.prompt_tokens_read = Counter(
            "echo_prompt_tokens_read",
            "Prompt tokens the LLM server read (not taken from its cache), as it counted them",
            ["call"],
            registry=r,
        )
        self.prompt_tokens_reused = Counter(
            "echo_prompt_tokens_reused",
            "Prompt tokens the LLM server took from its prompt cache, where it says so",
            ["call"],
            registry=r,
        )
        self.prompt_read_seconds = Counter(
            "echo_prompt_read_seconds",
            "Seconds the LLM server spent reading prompts, where it says so",
            ["call"],
            registry=r,
        )
        self.context_too_small = Counter(
            "echo_prompt_context_too_small",
            "Turns not answered because even their smallest prompt does not fit the model's context",
            registry=r,
        )
        self.llm_queue_seconds = Histogram(
            "echo_llm_queue_seconds",
            "Time an LLM call waited for a place in the model's budget (LLM_CONCURRENCY), by priority",
            ["priority"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        # The last RECENT_WAITS waits of each priority, for the owner's page.
        self.recent_waits: dict[str, deque[float]] = {p: deque(maxlen=RECENT_WAITS) for p in QUEUE_PRIORITIES}
        self._queue_waiting: _QueueWaiting | None = None
        self.lore_keys_disabled = Counter(
            "echo_lore_keys_disabled", "Lorebook regular expressions disabled for running out of time", registry=r
        )
        self.loop_lag = Histogram(
            "echo_event_loop_lag_seconds",
            "How late the event loop ran a timer that was due (work holding it, or a busy machine)",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.embedding_queue_wait = Histogram(
            "echo_embedding_queue_wait_seconds",
            "Time a request waited for the local embedding model before it took its first text",
            ["kind"],
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        # The same, over the last minutes, for the owner's page.
        self.recent_lag = Recent()
        self.recent_queue_wait = {"query": Recent(), "passages": Recent()}
        for outcome in TURN_OUTCOMES:
            self.turns.labels(outcome)
        for outcome in REFLECTION_OUTCOMES:
            self.reflections.labels(outcome)
        for call in LLM_CALLS:
            self.llm_seconds.labels(call)
            self.prompt_tokens.labels(call)
            self.completion_tokens.labels(call)
            self.context_full.labels(call)
            self.prompt_tokens_read.labels(call)
            self.prompt_tokens_reused.labels(call)
            self.prompt_read_seconds.labels(call)
        for call in ("query", "passages"):
            self.embedding_seconds.labels(call)
            self.embedding_queue_wait.labels(call)
        for priority in QUEUE_PRIORITIES:
            self.llm_queue_seconds.labels(priority)
        r.register(_Backups())

    def queue_waited(self, priority: str) -> Callable[[float], None]:
        """What records how long a call of `priority` waited for the chat model."""

        def waited(seconds: float) -> None:
            self.llm_queue_seconds.labels(priority).observe(seconds)
            self.recent_waits[priority].append(seconds)

        return waited

    def watch_model_queue(self, waiting: Callable[[str], int]) -> None:
        """Show how many model calls wait, by priority (the budget's count, read at scrape time)."""
        if self._queue_waiting is None:
            self._queue_waiting = _QueueWaiting()
            self.registry.register(self._queue_waiting)
        self._queue_waiting.read = waiting

    def watch_storage(self, read_failures: Callable[[], int]) -> None:
        """Count the database's failed writes (its Outage's `failures`)."""
        self.registry.register(
            _FailureCount(
                "echo_storage_failures", "Database writes that failed (disk full, read-only, I/O error)", read_failures
            )
        )

    def watch_cache(self, reads: Callable[[], Mapping[str, int]], held: Callable[[], tuple[int, int]]) -> None:
        """The memory cache's reads by how it served them, and the people and bytes it holds."""
        self.registry.register(_Cache(reads, held))

    def watch_foreground(self, figures: Callable[[], tuple[int, float]]) -> None:
        """The turns doing memory work now, and the seconds long jobs stepped aside for them."""
        self.registry.register(_Foreground(figures))

    def timed(self, embedder: Embedder) -> Embedder:
        queue = getattr(embedder, "queue", None)
        if isinstance(queue, ModelQueue):
            queue.on_wait = self._queue_waited
        return TimedEmbedder(embedder, self.embedding_seconds)

    def _queue_waited(self, kind: str, seconds: float) -> None:
        self.embedding_queue_wait.labels(kind).observe(seconds)
        self.recent_queue_wait[kind].add(seconds)

    def loop_lagged(self, seconds: float) -> None:
        self.loop_lag.observe(seconds)
        self.recent_lag.add(seconds)

    async def watch_loop(self) -> None:
        """Note the event loop's lag until cancelled (the composition root runs it)."""
        await watch_loop(self.loop_lagged)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class TimedEmbedder:
    """An Embedder that observes the duration of each call of the one it wraps."""

    def __init__(self, inner: Embedder, seconds: Histogram) -> None:
        self.inner = inner
        self._seconds = seconds

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dim(self) -> int | None:
        return self.inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        started = time.perf_counter()
        try:
            return await self.inner.embed_passages(texts)
        finally:
            self._seconds.labels("passages").observe(time.perf_counter() - started)

    async def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = (await self.embed_queries([text]))[0]
        return vector

    async def embed_queries(self, texts: Sequence[str], *, background: bool = False) -> np.ndarray:
        started = time.perf_counter()
        try:
            return await self.inner.embed_queries(texts, background=background)
        finally:
            self._seconds.labels("lines" if background else "query").observe(time.perf_counter() - started)
