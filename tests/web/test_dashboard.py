"""docs/grafana-dashboard.json queries only what the real /metrics serves, and covers what an
operator watches: turns by outcome, reply and memory latency, the reflection backlog, tokens,
prompts that filled the context, storage failures and scheduled backups."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.web.conftest import Page
from tests.web.test_metrics import scrape

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# A metric name in PromQL: echo_… not followed by "(" (that would be a function).
METRIC = re.compile(r"\b(echo_[a-z_]+)\b(?!\s*\()")
WATCHED = {
    "echo_turns_total",
    "echo_llm_seconds_bucket",
    "echo_memory_seconds_bucket",
    "echo_reflection_backlog",
    "echo_prompt_tokens_sum",
    "echo_completion_tokens_total",
    "echo_prompt_context_full_total",
    "echo_storage_failures_total",
    "echo_backup_failures_total",
    "echo_backup_last_success_timestamp_seconds",
}


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_dashboard_is_importable_json_with_one_prometheus_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys() and panel["targets"]
    for expr in queries():
        assert (
            expr.count("(") == expr.count(")")
            and expr.count("[") == expr.count("]")
            and expr.count("{") == expr.count("}")
        )


async def test_every_metric_the_dashboard_queries_is_served_by_metrics(page: Page) -> None:
    await page.play("Bonjour, je m'appelle Alice.")
    served = {name for name, _ in await scrape(page)}
    queried = {name for expr in queries() for name in METRIC.findall(expr)}
    assert queried - served == set()
    assert queried >= WATCHED
