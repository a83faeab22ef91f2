"""The long-running worker, split by job.

- `worker`: `Worker`, which supervises the connection's life with the parts
  `ltm.composition` built;
- `connection`: reaching the broker with a backoff, and setting a connection up;
- `delivery`: one tool call from its delivery to its settlement (`infra.messaging.settlement`),
  with `hooks` for its metrics, tracing and failpoints;
- `batch_runner`: a batch's unit of work; `retry`: the transient-fault budget around it;
- `outbox_relay`: the sweep of what was committed and left unpublished;
- `ports`: what the runtime needs from the broker and the outbox.
"""

from worker.runtime.retry import is_transient_database_fault
from worker.runtime.worker import Worker

__all__ = ["Worker", "is_transient_database_fault"]
