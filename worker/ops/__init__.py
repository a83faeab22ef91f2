"""Operators' tools: the dead-letter queue and the audit stream (`ltm dlq …`, `ltm audit tail`)."""

from worker.ops.audit_stream import parse_start, tail_audit
from worker.ops.dead_letters import (
    DeadLetter,
    inspect_dead_letters,
    list_dead_letters,
    purge_dead_letters,
    replay_dead_letters,
)

__all__ = [
    "DeadLetter",
    "inspect_dead_letters",
    "list_dead_letters",
    "parse_start",
    "purge_dead_letters",
    "replay_dead_letters",
    "tail_audit",
]
