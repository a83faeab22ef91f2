"""The audit records of the console's replays and purges (`operator.dead_letters_replayed`,
`operator.dead_letters_purged`), written once the action is done: the console's and the
`ltm dlq` commands'."""

from __future__ import annotations

from contracts import (
    DeadLettersPurged,
    DeadLettersReplayed,
    ReplayedCall,
    operator_routing_key,
)
from infra.settings import Settings
from operators.dead_letters import DeadLetterFilter, Purge, ReplayReport
from operators.recording import record_events
from worker.core.outgoing import OutgoingEvent

__all__ = ["record_purge", "record_replay", "replay_record"]


def replay_record(
    report: ReplayReport, *, actor: str, queue: str, reason: str | None = None
) -> DeadLettersReplayed:
    """What a replay did, as the audit stream keeps it: the calls sent back, and how many
    the broker did not take; why (the operator's reason) and by what filter."""
    chosen_by = report.dead_letter_filter
    return DeadLettersReplayed(
        actor=actor,
        queue=queue,
        replayed=tuple(
            ReplayedCall(
                event_id=entry.event_id,
                tool_call_id=entry.tool_call_id,
                routing_key=entry.routing_key,
            )
            for entry in report.replayed
        ),
        failed=len(report.failed),
        reason=reason,
        filter={} if chosen_by is None else chosen_by.as_record(),
        count=len(report.replayed),
    )


async def record_replay(
    settings: Settings, report: ReplayReport, *, actor: str, reason: str | None = None
) -> None:
    """Records a replay that sent (or tried to send) something back; nothing for one that
    found nothing to replay."""
    if not report.replays:
        return
    queue = settings.topology.dead_letter_queue
    record = replay_record(report, actor=actor, queue=queue, reason=reason)
    await record_events(settings, [OutgoingEvent(record, operator_routing_key("replayed"))])


async def record_purge(
    settings: Settings,
    purge: Purge,
    *,
    actor: str,
    dead_letter_filter: DeadLetterFilter | None = None,
) -> None:
    """Records a purge: how many were removed, and the filter of a purge by filter."""
    record = DeadLettersPurged(
        actor=actor,
        queue=purge.queue,
        removed=purge.removed,
        filter={} if dead_letter_filter is None else dead_letter_filter.as_record(),
    )
    await record_events(settings, [OutgoingEvent(record, operator_routing_key("purged"))])
