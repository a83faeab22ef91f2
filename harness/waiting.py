"""Waiting on a condition with a deadline, never on time alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["eventually"]

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Polls `probe` until it returns something other than None or False; fails at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
