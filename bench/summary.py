"""The bench's summary: one row per figure of the run, with its target and whether it was met.

Every target `make bench` holds the worker to is here, once: `results["targets"]` (the value
each compares, and met or not), the table printed at the end of a run, `results["summary"]`
and the results page's table of the newest run (`bench.results_page`) are all made from
`TARGETS_AND_FIGURES`. A target is a number from the results held to a limit (a ratio of two
figures measured in the same run, most of them); a row without a target reports a figure.
Met is `yes`, `no`, or `–` when there is no target or the run did not measure it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from infra.generated_block import markdown_cell

__all__ = [
    "NOT_JUDGED",
    "TARGETS_AND_FIGURES",
    "Reported",
    "Target",
    "evaluate",
    "markdown_table",
    "summary_rows",
    "text_table",
]

Results = Mapping[str, Any]
NOT_JUDGED: Final = "–"
# The columns of a summary row, in order.
COLUMNS: Final = ("figure", "measured", "target", "met")


def _number(results: Results, key: str, sub: str | None = None) -> float | None:
    value = results.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _over(results: Results, numerator: str, denominator: str) -> float | None:
    top, bottom = _number(results, numerator), _number(results, denominator)
    return None if top is None or not bottom else top / bottom


def _show(value: float | None, unit: str = "") -> str:
    """A figure as the tables write it: three significant digits or so, `–` when missing."""
    if value is None:
        return NOT_JUDGED
    digits = 0 if abs(value) >= 100 else (1 if abs(value) >= 10 else 2)
    return f"{value:,.{digits}f}{unit}"


def _shows(results: Results, keys: Sequence[str], unit: str) -> str:
    """Several figures of one kind side by side, `a / b / c unit`."""
    values = [_number(results, key) for key in keys]
    if all(value is None for value in values):
        return NOT_JUDGED
    return " / ".join(_show(value) for value in values) + unit


def _quotient(results: Results, numerator: str, denominator: str, unit: str) -> str:
    """`a / b unit = ratio`: both figures, and what they make."""
    ratio = _over(results, numerator, denominator)
    if ratio is None:
        return NOT_JUDGED
    top, bottom = _show(_number(results, numerator)), _show(_number(results, denominator))
    return f"{top} / {bottom}{unit} = {ratio:.2f}"


def _rates_and_median(results: Results, rates: tuple[str, str], ratio: str) -> str:
    """`a / b calls/s = ratio`, where the ratio is the median of the rounds' (stored under
    `ratio`), not a / b."""
    if _number(results, ratio) is None:
        return NOT_JUDGED
    return f"{_shows(results, rates, ' calls/s')} = {_show(_number(results, ratio))}"


def _worker_cpu(prefix: str) -> Callable[[Results], str]:
    """`a / b / c ms (x, y, z)`: the tracing phase's CPU per call of each worker (its figures
    under `prefix`: in turns, or side by side), and each over the untraced worker's, the
    median of the rounds' ratios."""

    def measured(results: Results) -> str:
        per_call = _shows(
            results,
            tuple(f"{prefix}{label}_worker_cpu_ms" for label in ("off", "default", "on")),
            " ms",
        )
        if per_call == NOT_JUDGED:
            return NOT_JUDGED
        ratios = [
            _number(results, f"{prefix}{label}_worker_cpu_vs_off")
            for label in ("default", "on", "off_again")
        ]
        return f"{per_call} ({', '.join(_show(ratio) for ratio in ratios)})"

    return measured


def _rounds(results: Results, *path: str, contender: str | None = None) -> str:
    """`(rounds a, b, c)`: the round ratios a median comes from, under `details` at `path`;
    `contender`'s, where each round holds several contenders' ratios (`rounds_against`)."""
    found: Any = results.get("details", {})
    for step in path:
        found = found.get(step) if isinstance(found, Mapping) else None
    rounds = found if isinstance(found, list) else []
    picked = [r.get("ratio") for r in rounds]
    if contender is not None:
        picked = [ratio.get(contender) if isinstance(ratio, Mapping) else ratio for ratio in picked]
    ratios = [ratio for ratio in picked if isinstance(ratio, int | float)]
    return f" (rounds {', '.join(f'{ratio:.2f}' for ratio in ratios)})" if len(ratios) > 1 else ""


def _setting(results: Results, key: str, default: float, spec: str = "g") -> str:
    """A setting of the run (its `config`), formatted by `spec`: a rate, a count."""
    value = results.get("config", {}).get(key, default)
    return f"{value:{spec}}"


def _per_count(results: Results, key: str, pick: Callable[[Any], float | None]) -> str:
    """`a / b / c` over the worker counts of a figure keyed by them."""
    by_count = results.get(key) or {}
    if not isinstance(by_count, Mapping) or not by_count:
        return NOT_JUDGED
    return " / ".join(_show(pick(value)) for value in by_count.values())


def _counts(results: Results, key: str) -> str:
    by_count = results.get(key) or {}
    return " / ".join(by_count) if isinstance(by_count, Mapping) and by_count else "1 / 2 / 4"


@dataclass(frozen=True, slots=True)
class Target:
    """A figure held to a limit: `value(results) holds limit`."""

    key: str  # its entry in results["targets"]
    figure: Callable[[Results], str]
    target: str  # the limit as written in the tables
    value: Callable[[Results], float | None]  # what is compared; None: not measured
    limit: float
    holds: Callable[[float, float], bool]  # operator.ge, le or lt
    measured: Callable[[Results], str]  # the measured cell, the figures it comes from

    def met(self, results: Results) -> bool | None:
        value = self.value(results)
        return None if value is None else bool(self.holds(value, self.limit))


@dataclass(frozen=True, slots=True)
class Reported:
    """A figure reported beside the targets, held to none."""

    figure: Callable[[Results], str]
    measured: Callable[[Results], str]


def _fixed_cost(count: str) -> Target:
    return Target(
        key=f"scaling_fixed_rate_cost_vs_1.{count}",
        figure=lambda r: (
            f"broker + database CPU per call at {_setting(r, 'scaling_rate', 150)} calls/s,"
            f" {count} workers over 1"
        ),
        target="≤ 1.2 ×",
        value=lambda r: _number(r, "scaling_fixed_rate_cost_vs_1", count),
        limit=1.2,
        holds=operator.le,
        measured=lambda r: _show(_number(r, "scaling_fixed_rate_cost_vs_1", count), " ×"),
    )


def _side_by_side(label: str, setting: str, limit: float) -> Target:
    """The tracing phase's side-by-side rate of the worker traced as `label` over the
    untraced worker's (`bench.shared_queue`), held to `limit` as the same rate in turns."""
    ratio = f"tracing_shared_{label}_vs_off"
    return Target(
        key=ratio,
        figure=lambda r: (
            f"side by side on one queue: {setting} / off"
            + _rounds(r, "tracing_shared_rounds", contender=label)
        ),
        target=f"≥ {limit:g}",
        value=lambda r: _number(r, ratio),
        limit=limit,
        holds=operator.ge,
        measured=lambda r: _rates_and_median(
            r, (f"tracing_shared_{label}_tps", "tracing_shared_off_tps"), ratio
        ),
    )


def _shared(split: Any) -> float | None:
    return float(split["shared"]) if isinstance(split, Mapping) and "shared" in split else None


def _total(split: Any) -> float | None:
    return float(split["total"]) if isinstance(split, Mapping) and "total" in split else None


def _broker_and_database(split: Any) -> float | None:
    if not isinstance(split, Mapping) or "broker" not in split or "database" not in split:
        return None
    return float(split["broker"]) + float(split["database"])


def _cpu_text(results: Results, key: str, shared: Callable[[Any], float | None]) -> str:
    totals = _per_count(results, key, _total)
    if totals == NOT_JUDGED:
        return NOT_JUDGED
    return f"{totals} ms; broker + database {_per_count(results, key, shared)} ms"


TARGETS_AND_FIGURES: Final[tuple[Target | Reported, ...]] = (
    Reported(
        lambda r: "database limit, 1 / 4 / 16 clients; batches of 32 on 2",
        lambda r: (
            NOT_JUDGED
            if _number(r, "db_limit_tps") is None
            else _shows(r, ("db_limit_tps", "db_limit_tps_4", "db_limit_tps_16"), "")
            + f"; {_show(_number(r, 'db_limit_batched_tps'))} calls/s"
        ),
    ),
    Reported(
        lambda r: "broker loop (aio-pika) / on aiormq with `wait=False`",
        lambda r: _shows(r, ("broker_limit_tps", "broker_limit_aiormq_tps"), " calls/s"),
    ),
    Target(
        key="ratio_vs_broker",
        figure=lambda r: (
            "steady throughput: worker / broker loop" + _rounds(r, "throughput_rounds")
        ),
        target="≥ 0.75",
        value=lambda r: _number(r, "ratio_vs_broker"),
        limit=0.75,
        holds=operator.ge,
        measured=lambda r: _rates_and_median(
            r, ("throughput", "broker_limit_tps"), "ratio_vs_broker"
        ),
    ),
    Target(
        key="ratio_vs_peer",
        figure=lambda r: "throughput vs the FastStream peer",
        target="≥ 2 ×",
        value=lambda r: _number(r, "ratio_vs_peer"),
        limit=2.0,
        holds=operator.ge,
        measured=lambda r: _quotient(r, "throughput", "peer_tps", " calls/s"),
    ),
    Target(
        key="ratio_vs_broker_prepublished",
        figure=lambda r: (
            "on a full queue (a backlog): worker / broker loop"
            + _rounds(r, "backlog_rounds", contender="worker")
        ),
        target="≥ 0.85",
        value=lambda r: _number(r, "ratio_vs_broker_prepublished"),
        limit=0.85,
        holds=operator.ge,
        measured=lambda r: _rates_and_median(
            r,
            ("throughput_prepublished", "broker_limit_prepublished_tps"),
            "ratio_vs_broker_prepublished",
        ),
    ),
    Target(
        key="ratio_vs_broker_replay",
        figure=lambda r: (
            f"a replay of {_setting(r, 'replay_letters', 10_000, ',')} dead letters at"
            " `--rate 0`: worker / broker loop on a full queue"
            + _rounds(r, "backlog_rounds", contender="replay")
        ),
        target="≥ 0.85",
        value=lambda r: _number(r, "ratio_vs_broker_replay"),
        limit=0.85,
        holds=operator.ge,
        measured=lambda r: _rates_and_median(
            r, ("replay_tps", "broker_limit_prepublished_tps"), "ratio_vs_broker_replay"
        ),
    ),
    Target(
        key="p99_ms",
        figure=lambda r: f"latency at {_setting(r, 'latency_rate', 200)} calls/s, p50 / p95 / p99",
        target="p99 ≤ 15 ms",
        value=lambda r: _number(r, "p99_ms"),
        limit=15.0,
        holds=operator.le,
        measured=lambda r: _shows(r, ("p50_ms", "p95_ms", "p99_ms"), " ms"),
    ),
    Reported(
        lambda r: (
            f"the floor (the broker loop at {_setting(r, 'latency_rate', 200)} calls/s),"
            " p50 / p95 / p99"
        ),
        lambda r: _shows(
            r, ("latency_floor_p50_ms", "latency_floor_p95_ms", "latency_floor_p99_ms"), " ms"
        ),
    ),
    Target(
        key="p99_vs_floor",
        figure=lambda r: "the tail: worker's p99 / the floor's",
        target="≤ 2 ×",
        value=lambda r: _over(r, "p99_ms", "latency_floor_p99_ms"),
        limit=2.0,
        holds=operator.le,
        measured=lambda r: _quotient(r, "p99_ms", "latency_floor_p99_ms", " ms"),
    ),
    Reported(
        lambda r: (
            "the committing floor (the loop committing each call's update first, batched as"
            " the worker batches), p50 / p95 / p99"
        ),
        lambda r: _shows(
            r,
            (
                "latency_committed_floor_p50_ms",
                "latency_committed_floor_p95_ms",
                "latency_committed_floor_p99_ms",
            ),
            " ms",
        ),
    ),
    Reported(
        lambda r: "the tail over the committing floor: worker's p99 / the committing floor's",
        lambda r: _quotient(r, "p99_ms", "latency_committed_floor_p99_ms", " ms"),
    ),
    Target(
        key="p99_vs_create_p99",
        figure=lambda r: "the update's p99 / the create's",
        target="≤ 1 × (no worse)",
        value=lambda r: _over(r, "p99_ms", "create_p99_ms"),
        limit=1.0,
        holds=operator.le,
        measured=lambda r: _quotient(r, "p99_ms", "create_p99_ms", " ms"),
    ),
    Target(
        key="create_ratio_vs_broker",
        figure=lambda r: (
            "creations: worker / their broker loop" + _rounds(r, "create_throughput_rounds")
        ),
        target="≥ 0.75",
        value=lambda r: _number(r, "create_ratio_vs_broker"),
        limit=0.75,
        holds=operator.ge,
        measured=lambda r: _rates_and_median(
            r, ("create_throughput", "create_broker_limit_tps"), "create_ratio_vs_broker"
        ),
    ),
    Target(
        key="create_p99_ms",
        figure=lambda r: (
            f"creations' latency at {_setting(r, 'latency_rate', 200)} calls/s, p50 / p95 / p99"
        ),
        target="p99 ≤ 15 ms",
        value=lambda r: _number(r, "create_p99_ms"),
        limit=15.0,
        holds=operator.le,
        measured=lambda r: _shows(r, ("create_p50_ms", "create_p95_ms", "create_p99_ms"), " ms"),
    ),
    Target(
        key="tracing_default_vs_off",
        figure=lambda r: "tracing at the default sampling / off",
        target="≥ 0.95",
        value=lambda r: _number(r, "tracing_default_vs_off"),
        limit=0.95,
        holds=operator.ge,
        measured=lambda r: _rates_and_median(
            r, ("tracing_default_tps", "tracing_off_tps"), "tracing_default_vs_off"
        ),
    ),
    Target(
        key="tracing_on_vs_off",
        figure=lambda r: "tracing with every call sampled / off",
        target="≥ 0.8",
        value=lambda r: _number(r, "tracing_on_vs_off"),
        limit=0.8,
        holds=operator.ge,
        measured=lambda r: _rates_and_median(
            r, ("tracing_on_tps", "tracing_off_tps"), "tracing_on_vs_off"
        ),
    ),
    Reported(
        lambda r: "the same untraced worker again / off (how far the phase's rounds move)",
        lambda r: _rates_and_median(
            r, ("tracing_off_again_tps", "tracing_off_tps"), "tracing_off_again_vs_off"
        ),
    ),
    Reported(
        lambda r: (
            "the worker's CPU per call, tracing off / default / every call sampled"
            " (default / off, every call / off, untraced again / off)"
        ),
        _worker_cpu("tracing_"),
    ),
    _side_by_side("default", "tracing at the default sampling", 0.95),
    _side_by_side("on", "tracing with every call sampled", 0.8),
    Reported(
        lambda r: (
            "side by side on one queue: the same untraced worker again / off"
            + _rounds(r, "tracing_shared_rounds", contender="off_again")
        ),
        lambda r: _rates_and_median(
            r,
            ("tracing_shared_off_again_tps", "tracing_shared_off_tps"),
            "tracing_shared_off_again_vs_off",
        ),
    ),
    Reported(
        lambda r: (
            "side by side on one queue: the worker's CPU per call, tracing off / default /"
            " every call sampled (default / off, every call / off, untraced again / off)"
        ),
        _worker_cpu("tracing_shared_"),
    ),
    Target(
        key="tracing_off_p99_ms",
        figure=lambda r: "p99, tracing off / default / every call sampled",
        target="off ≤ 15 ms",
        value=lambda r: _number(r, "tracing_off_p99_ms"),
        limit=15.0,
        holds=operator.le,
        measured=lambda r: _shows(
            r, ("tracing_off_p99_ms", "tracing_default_p99_ms", "tracing_on_p99_ms"), " ms"
        ),
    ),
    Reported(
        lambda r: f"{_counts(r, 'scaling_tps')} workers at saturation",
        lambda r: (
            NOT_JUDGED
            if not r.get("scaling_tps")
            else _per_count(r, "scaling_tps", float) + " calls/s"
        ),
    ),
    Reported(
        lambda r: f"machine CPU per call at saturation, {_counts(r, 'cpu_ms_per_call')} workers",
        lambda r: _cpu_text(r, "cpu_ms_per_call", _broker_and_database),
    ),
    Reported(
        lambda r: (
            f"machine CPU per call at {_setting(r, 'scaling_rate', 150)} calls/s,"
            f" {_counts(r, 'scaling_fixed_rate_cpu_ms_per_call')} workers"
        ),
        lambda r: _cpu_text(r, "scaling_fixed_rate_cpu_ms_per_call", _shared),
    ),
    _fixed_cost("2"),
    _fixed_cost("4"),
    Target(
        key="idle_worker_core_share",
        figure=lambda r: "one idle worker (ready, no calls), share of a core",
        target="< 1 % of a core",
        value=lambda r: _number(r, "idle_worker_core_share"),
        limit=0.01,
        holds=operator.lt,
        measured=lambda r: (
            NOT_JUDGED
            if (share := _number(r, "idle_worker_core_share")) is None
            else f"{share:.2%}"
        ),
    ),
    Reported(
        lambda r: "one worker on three nodes / on one node" + _rounds(r, "cluster", "rounds"),
        lambda r: _rates_and_median(r, ("cluster_tps", "single_node_tps"), "cluster_ratio"),
    ),
    Target(
        key="cluster_p99_vs_single_at_100",
        figure=lambda r: "p99 at 100 calls/s: three-node cluster / single node",
        target="≤ 3 ×",
        value=lambda r: _over(r, "cluster_p99_ms_at_100", "single_node_p99_ms_at_100"),
        limit=3.0,
        holds=operator.le,
        measured=lambda r: _quotient(
            r, "cluster_p99_ms_at_100", "single_node_p99_ms_at_100", " ms"
        ),
    ),
    Reported(
        lambda r: (
            f"p99 at {_setting(r, 'latency_rate', 200)} calls/s: three-node cluster / single node"
        ),
        lambda r: _shows(r, ("cluster_p99_ms", "single_node_p99_ms"), " ms"),
    ),
    Target(
        key="cost_1m_vs_10k",
        figure=lambda r: "time per call, 1M memories / 10k" + _rounds(r, "cost", "rounds"),
        target="≤ 1.10 ×",
        value=lambda r: _number(r, "cost_1m_vs_10k"),
        limit=1.10,
        holds=operator.le,
        measured=lambda r: _show(_number(r, "cost_1m_vs_10k"), " ×"),
    ),
    Target(
        key="rss_mb",
        figure=lambda r: "worker peak RSS, untraced (traced)",
        target="untraced ≤ 120 MB",
        value=lambda r: _number(r, "rss_mb"),
        limit=120.0,
        holds=operator.le,
        measured=lambda r: (
            NOT_JUDGED
            if _number(r, "rss_mb") is None
            else f"{_show(_number(r, 'rss_mb'), ' MB')}"
            + (
                ""
                if _number(r, "tracing_on_rss_mb") is None
                else f" ({_show(_number(r, 'tracing_on_rss_mb'), ' MB')})"
            )
        ),
    ),
)


def _verdict(met: bool | None) -> str:
    return NOT_JUDGED if met is None else ("yes" if met else "no")


def summary_rows(results: Results) -> list[dict[str, str]]:
    """The summary: figure, measured, target and met (`yes`, `no`, `–`) of each row."""
    rows = []
    for row in TARGETS_AND_FIGURES:
        cells = (
            row.figure(results),
            row.measured(results),
            row.target if isinstance(row, Target) else "",
            _verdict(row.met(results)) if isinstance(row, Target) else NOT_JUDGED,
        )
        rows.append(dict(zip(COLUMNS, cells, strict=True)))
    return rows


def evaluate(results: Results) -> dict[str, dict[str, Any]]:
    """`results["targets"]`: each target's limit as written, the value compared, and whether
    it was met (None: not measured)."""
    return {
        row.key: {
            "target": row.target,
            "measured": None if (value := row.value(results)) is None else round(value, 3),
            "met": row.met(results),
        }
        for row in TARGETS_AND_FIGURES
        if isinstance(row, Target)
    }


def text_table(rows: Sequence[Mapping[str, str]]) -> str:
    """The summary as the bench prints it: aligned columns."""
    header = dict(zip(COLUMNS, COLUMNS, strict=True))
    widths = {column: max(len(row[column]) for row in (*rows, header)) for column in COLUMNS}

    def line(row: Mapping[str, str]) -> str:
        return "  ".join(row[column].ljust(widths[column]) for column in COLUMNS).rstrip()

    return "\n".join(
        [line(header), "  ".join("-" * widths[column] for column in COLUMNS)]
        + [line(row) for row in rows]
    )


def markdown_table(rows: Sequence[Mapping[str, str]]) -> str:
    """The summary as the results page shows it."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|---|---|"]
    lines += [
        "| " + " | ".join(markdown_cell(row[column]) for column in COLUMNS) + " |" for row in rows
    ]
    return "\n".join(lines)
