"""The audit record of a replay: the calls sent back, and how many the broker did not take."""

from __future__ import annotations

from contracts import ReplayedCall
from operators.dead_letters import DeadLetter, Replayed, ReplayReport
from operators.operator_records import replay_record


def _letter(event_id: str) -> DeadLetter:
    return DeadLetter(
        event_id=event_id,
        tool_call_id=f"tc-{event_id}",
        routing_key="update_long_term_memory",
        source="worker",
        reason="internal error: boom",
        failed_at=None,
        attempts=1,
    )


def test_a_replay_record_names_what_went_back_and_counts_what_did_not() -> None:
    report = ReplayReport(
        [Replayed(_letter("e-1")), Replayed(_letter("e-2"), error="not confirmed")],
        total=3,
        whole_queue=True,
    )

    record = replay_record(report, actor="console:ann", queue="p.tool_calls.dead")

    assert record.actor == "console:ann"
    assert record.queue == "p.tool_calls.dead"
    assert record.replayed == (
        ReplayedCall(event_id="e-1", tool_call_id="tc-e-1", routing_key="update_long_term_memory"),
    )
    assert record.failed == 1
    assert (report.not_reached, report.complete) == (1, False)
