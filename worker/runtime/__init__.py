"""The long-running worker, split by job.

- `worker`: `Worker`, which puts the parts together and supervises the connection's life;
- `connection`: reaching the broker with a backoff, and setting a connection up;
- `delivery`: one tool call from its delivery to its settlement (`infra.messaging.settlement`);
- `pipeline`: a batch's transaction; `retry`: the transient-fault budget around it;
- `outbox_relay`: the sweep of what was committed and left unpublished.
"""

from worker.runtime.retry import is_transient
from worker.runtime.worker import Worker

__all__ = ["Worker", "is_transient"]
