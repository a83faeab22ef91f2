"""Counting the deliveries being handled, so that a stop can wait for them to finish."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["InFlight"]


class InFlight:
    """Tracks handler tasks; `drain` waits for them, and cancels those left at the deadline."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._tasks)

    @contextmanager
    def track(self) -> Iterator[None]:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - handlers always run in a task
            yield
            return
        self._tasks.add(task)
        self._idle.clear()
        try:
            yield
        finally:
            self._tasks.discard(task)
            if not self._tasks:
                self._idle.set()

    async def drain(self, grace_s: float) -> int:
        """Waits up to `grace_s` for the tracked handlers; returns how many had to be cancelled."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=grace_s)
            return 0
        except TimeoutError:
            left = [task for task in self._tasks if not task.done()]
            for task in left:
                task.cancel()
            if left:
                await asyncio.wait(left, timeout=1.0)
            return len(left)
