"""What a dead-lettered tool call carries besides its original body, routing key and properties.

The worker republishes a call it gives up on to `<prefix>.dead_letter` with these headers; the
broker dead-letters a call at the work queue's delivery limit with its own `x-death` instead.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ATTEMPTS_HEADER",
    "ERROR_HEADER",
    "FAILED_AT_HEADER",
    "ORIGINAL_USER_ID_HEADER",
    "REASONS",
]

# Why the worker gave up: one of `REASONS`, then `: ` and the details.
ERROR_HEADER: Final = "x-ltm-error"
# When, RFC 3339 in UTC.
FAILED_AT_HEADER: Final = "x-ltm-failed-at"
# Deliveries of the call before it was given up on, this one included.
ATTEMPTS_HEADER: Final = "x-ltm-attempts"
# The broker user the call was first published as (its AMQP `user_id`). A copy the worker
# dead-letters, or `ltm dlq replay` republishes, goes out under the publisher's own user
# (the broker refuses any other), so the original is kept here.
ORIGINAL_USER_ID_HEADER: Final = "x-ltm-original-user-id"

# The beginnings of `x-ltm-error`, and when each applies.
REASONS: Final = {
    "too large": "the body is over LTM_MAX_MESSAGE_BYTES; it was not parsed",
    "untrusted publisher": "LTM_TRUSTED_PUBLISHERS is set and the call's user_id is missing "
    "or not in it; nothing was written or answered",
    "invalid envelope": "not JSON, the wrong shape, an unknown schema version, a missing "
    "envelope field, or over the bounds (nesting deeper than 64, more than 500 "
    "participants, more than 50 aliases for one participant)",
    "unsupported tool": "no pipeline of the worker takes this tool name",
    "database unavailable": "transient database faults past LTM_DB_RETRY_SECONDS; the call "
    "was answered memory_update_failed_db_error and can be replayed",
    "internal error": "the pipeline failed unexpectedly; the call was answered "
    "memory_update_failed_internal_error",
}
