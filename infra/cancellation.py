"""Telling a task's own cancellation from a CancelledError that reached it from elsewhere.

aiormq gives up a connection that stopped sending frames (no heartbeats) by failing every
pending confirm and RPC on it with a CancelledError: the task awaiting one was not cancelled,
and must take it as a lost connection, not as its own end.
"""

from __future__ import annotations

import asyncio

__all__ = ["being_cancelled"]


def being_cancelled() -> bool:
    """True when the running task itself has been asked to stop (`Task.cancel`)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
