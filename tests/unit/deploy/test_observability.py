"""The dashboard and the alert rules ask only for metrics the service exports, by labels they
have; and the dashboard shows every metric of the service.

`make lint` runs this file, and `promtool check rules` / `promtool test rules` on the rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from gateway.metrics import GatewayMetrics
from worker.adapters.metrics import WorkerMetrics

OBSERVABILITY = Path(__file__).resolve().parents[3] / "deploy" / "observability"
DASHBOARD = OBSERVABILITY / "grafana" / "dashboards" / "tomori-ltm.json"
ALERTS = OBSERVABILITY / "alerts.yml"
PROMETHEUS = OBSERVABILITY / "prometheus.yml"

# Not the service's own: RabbitMQ's prometheus plugin (prometheus.yml's `rabbitmq` job, with
# the family queue_consumer_count), and the labels of each.
BROKER_METRICS = {"rabbitmq_detailed_queue_consumers": {"vhost", "queue"}}
# Labels Prometheus adds to every scraped series, and a histogram's bucket bound.
TARGET_LABELS = {"job", "instance"}

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_MATCHERS = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENTIFIER = re.compile(r"(?<![\w$.:])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")
_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


@dataclass(frozen=True)
class Query:
    where: str
    expression: str


@dataclass(frozen=True)
class Parsed:
    metrics: set[str]
    matched_labels: dict[str, set[str]]  # metric -> label names in its selector
    grouping_labels: set[str]


def parse(expression: str) -> Parsed:
    """The metric names, selector labels and grouping labels of a PromQL expression.

    Enough PromQL for these files: strings, ranges, selectors, grouping clauses, function
    calls and operators; Grafana's `$variables` are not names.
    """
    text = _STRING.sub('""', expression)
    text = _RANGE.sub("", text)
    matched: dict[str, set[str]] = {}
    for match in _MATCHERS.finditer(text):
        if match.group(1):
            names = set(_LABEL.findall(match.group(2)))
            matched.setdefault(match.group(1), set()).update(names)
    text = _MATCHERS.sub(lambda m: f" {m.group(1) or ''} ", text)
    grouping: set[str] = set()
    for match in _GROUPING.finditer(text):
        grouping.update(label.strip() for label in match.group(1).split(",") if label.strip())
    text = _GROUPING.sub(" ", text)
    metrics = {name for name in _IDENTIFIER.findall(text) if name.lower() not in _KEYWORDS}
    return Parsed(metrics=metrics, matched_labels=matched, grouping_labels=grouping)


def test_the_parser_finds_names_not_functions_labels_or_variables() -> None:
    parsed = parse(
        "histogram_quantile(0.99, sum by (le, tool) (rate(ltm_tool_call_seconds_bucket"
        '{job=~"$worker_job", status!="x{y}"}[$__rate_interval]))) / on (instance) '
        "group_left ltm_tool_calls_in_flight offset 5m > bool 0.5 and absent(up)"
    )
    assert parsed.metrics == {"ltm_tool_call_seconds_bucket", "ltm_tool_calls_in_flight", "up"}
    assert parsed.matched_labels == {"ltm_tool_call_seconds_bucket": {"job", "status"}}
    assert parsed.grouping_labels == {"le", "tool", "instance"}


def _dashboard_queries(dashboard: dict[str, Any]) -> Iterator[Query]:
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield Query(f"panel {panel['title']!r}", target["expr"])


def _rule_queries(rules: dict[str, Any]) -> Iterator[Query]:
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield Query(f"rule {rule.get('alert') or rule.get('record')}", rule["expr"])


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Every series name the worker and the gateway export, with the labels each may have."""
    names: dict[str, set[str]] = {}
    for metrics in (WorkerMetrics(), GatewayMetrics()):
        names.update(_series(metrics.registry, vars(metrics).values()))
    return names


def _series(registry: CollectorRegistry, owned: Any) -> dict[str, set[str]]:
    # A labelled counter has no sample before its first use: its label names come from the
    # metric object itself.
    labels = {
        metric._name: set(metric._labelnames)
        for metric in owned
        if isinstance(metric, MetricWrapperBase)
    }
    series: dict[str, set[str]] = {}
    for family in registry.collect():
        own = labels.get(family.name, set())
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("", "_sum", "_count"),
        }.get(family.type, ("",))
        for suffix in suffixes:
            series[family.name + suffix] = own | ({"le"} if suffix == "_bucket" else set())
    return series


def _queries(dashboard: dict[str, Any], rules: dict[str, Any]) -> list[Query]:
    return [*_dashboard_queries(dashboard), *_rule_queries(rules)]


def test_every_query_names_a_metric_the_service_exports(
    dashboard: dict[str, Any], rules: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    known = exported | BROKER_METRICS
    queries = _queries(dashboard, rules)
    assert len(queries) > 20
    unknown = [
        (query.where, name)
        for query in queries
        for name in parse(query.expression).metrics
        if name not in known
    ]
    assert not unknown, f"metrics no process exports: {unknown}"


def test_every_query_selects_and_groups_by_labels_its_metrics_have(
    dashboard: dict[str, Any], rules: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    known = exported | BROKER_METRICS
    wrong = []
    for query in _queries(dashboard, rules):
        parsed = parse(query.expression)
        for metric, labels in parsed.matched_labels.items():
            wrong += [
                (query.where, metric, label)
                for label in labels - known.get(metric, set()) - TARGET_LABELS
            ]
        available = set().union(*(known.get(m, set()) for m in parsed.metrics)) | TARGET_LABELS
        wrong += [(query.where, "by", label) for label in parsed.grouping_labels - available]
    assert not wrong, f"labels the metrics do not have: {wrong}"


def test_the_dashboard_shows_every_metric_of_the_service(
    dashboard: dict[str, Any], exported: dict[str, set[str]]
) -> None:
    shown = set().union(*(parse(q.expression).metrics for q in _dashboard_queries(dashboard)))
    families = {name.removesuffix("_total").removesuffix("_bucket") for name in shown}
    missing = {
        name
        for name in exported
        if name.startswith("ltm_")
        and not name.endswith(("_sum", "_count"))
        and name.removesuffix("_total").removesuffix("_bucket") not in families
    }
    assert not missing, f"on no panel: {sorted(missing)}"


def test_the_dashboard_reads_the_jobs_prometheus_scrapes(dashboard: dict[str, Any]) -> None:
    config = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    variables = {item["name"]: item for item in dashboard["templating"]["list"]}
    assert {variables["worker_job"]["query"], variables["gateway_job"]["query"]} <= jobs
    assert variables["datasource"]["type"] == "datasource"
    assert config["rule_files"] == ["alerts.yml"]
    # The rules select the same jobs.
    for query in _rule_queries(yaml.safe_load(ALERTS.read_text(encoding="utf-8"))):
        assert set(re.findall(r'job="([^"]+)"', query.expression)) <= jobs, query.where
