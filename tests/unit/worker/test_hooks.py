"""The points of a delivery where the worker's metrics, tracing and failpoints hang: handed
to every hook in order, and counted as the metrics have always counted them."""

from __future__ import annotations

from contracts import UPDATE_LONG_TERM_MEMORY, MemoryStatus, ResultData, ToolCallRequested
from infra.messaging.settlement import Outcome
from tests.unit.worker.given import context
from worker.adapters.metrics import WorkerMetrics
from worker.runtime.hooks import Hooks, MetricsHooks, NoHooks
from worker.service import Processed
from worker.tools.base import result_for


class Recorded(NoHooks):
    def __init__(self, name: str, seen: list[tuple[str, str]]) -> None:
        self._name = name
        self._seen = seen

    def after_mark(self, processed: Processed) -> None:
        self._seen.append((self._name, "after_mark"))

    def before_dead_letter(self, cause: str, reason: str) -> None:
        self._seen.append((self._name, f"before_dead_letter {cause}"))


def _processed(*, replayed: bool = False) -> Processed:
    call = ToolCallRequested(
        tool_call_id="call-hooks-1",
        tool_name=UPDATE_LONG_TERM_MEMORY,
        arguments={},
        context=context(),
    )
    result = result_for(call, MemoryStatus.UPDATED, "updated", ResultData())
    return Processed(result=result, outbox=[], replayed=replayed)


def test_each_point_goes_to_every_hook_in_order() -> None:
    seen: list[tuple[str, str]] = []
    hooks = Hooks(Recorded("first", seen), Recorded("second", seen))
    hooks.before_dead_letter("invalid_envelope", "invalid envelope: x")
    hooks.after_mark(_processed())
    assert seen == [
        ("first", "before_dead_letter invalid_envelope"),
        ("second", "before_dead_letter invalid_envelope"),
        ("first", "after_mark"),
        ("second", "after_mark"),
    ]


def test_a_call_is_counted_once_acked_and_an_unrecorded_answer_once_published() -> None:
    metrics = MetricsHooks(counted := WorkerMetrics())
    processed = _processed(replayed=True)
    metrics.after_publish(processed.result, processed, 0.0)
    assert _calls(counted, "true") == 0.0
    metrics.after_ack(Outcome.HANDLED, 0.0, processed, None)
    assert _calls(counted, "true") == 1.0
    metrics.after_publish(processed.result, None, 0.0)
    assert _calls(counted, "false") == 1.0
    registry = counted.registry
    assert registry.get_sample_value("ltm_tool_call_seconds_count") == 2.0
    assert registry.get_sample_value("ltm_tool_call_ack_seconds_count") == 1.0


def _calls(metrics: WorkerMetrics, replayed: str) -> float:
    labels = {
        "tool": UPDATE_LONG_TERM_MEMORY,
        "status": MemoryStatus.UPDATED.value,
        "replayed": replayed,
    }
    return metrics.registry.get_sample_value("ltm_tool_calls_total", labels) or 0.0
