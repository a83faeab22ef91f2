"""The transient-fault budget: what is retried, and for how long (the logic alone)."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import exc as sa_exc

from worker.runtime.retry import (
    is_transient_database_fault,
    retried_for,
    shared_by_the_batch,
    waited_for_a_lock,
    within_budget,
)


class Attempts:
    """Fails with each of `faults` in turn, then answers how many attempts it took."""

    def __init__(self, *faults: BaseException) -> None:
        self._faults = list(faults)
        self.count = 0

    async def __call__(self) -> int:
        self.count += 1
        if self._faults:
            raise self._faults.pop(0)
        return self.count


def _lock_timeout() -> sa_exc.DBAPIError:
    return sa_exc.DBAPIError("UPDATE", None, psycopg.errors.LockNotAvailable("lock timeout"))


def test_what_may_pass_is_transient_and_a_lock_wait_is_one_calls() -> None:
    assert is_transient_database_fault(psycopg.OperationalError("server closed the connection"))
    assert is_transient_database_fault(ConnectionError())
    assert not is_transient_database_fault(ValueError())
    assert waited_for_a_lock(_lock_timeout())
    assert is_transient_database_fault(_lock_timeout()) and not shared_by_the_batch(_lock_timeout())
    assert retried_for(["one call"])(_lock_timeout())
    assert not retried_for(["a", "batch"])(_lock_timeout())


async def test_a_success_at_once_counts_no_retry() -> None:
    retries: list[BaseException | None] = []
    attempt = Attempts()
    assert (
        await within_budget(
            attempt, retried=is_transient_database_fault, budget_s=5, on_retry=retries.append
        )
        == 1
    )
    assert retries == []


async def test_transient_faults_are_retried_and_each_counted() -> None:
    retries: list[BaseException | None] = []
    attempt = Attempts(ConnectionError("one"), ConnectionError("two"))
    answer = await within_budget(
        attempt, retried=is_transient_database_fault, budget_s=5, on_retry=retries.append
    )
    assert answer == 3
    assert [str(error) for error in retries] == ["one", "two"]


async def test_a_fault_not_retried_is_raised_at_once() -> None:
    attempt = Attempts(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        await within_budget(
            attempt, retried=is_transient_database_fault, budget_s=5, on_retry=lambda _: None
        )
    assert attempt.count == 1


async def test_the_last_fault_is_raised_once_the_budget_is_spent() -> None:
    attempt = Attempts(*(ConnectionError(f"fault {n}") for n in range(1000)))
    started = time.monotonic()
    with pytest.raises(ConnectionError):
        await within_budget(
            attempt, retried=is_transient_database_fault, budget_s=0.3, on_retry=lambda _: None
        )
    assert attempt.count >= 2
    assert time.monotonic() - started < 3.0
