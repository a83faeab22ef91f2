"""The transient-fault budget: which database faults are retried, and for how long.

A lost connection, a serialization failure, a deadlock, an admin shutdown or an exhausted
pool may pass: the transaction runs again, within `LTM_DB_RETRY_SECONDS` counted from its
first attempt. Anything else is the call's answer (an error result, a dead letter).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sized
from typing import Final, TypeVar

import aiormq.exceptions
import psycopg
from sqlalchemy import exc as sa_exc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

__all__ = [
    "is_transient_database_fault",
    "retried_for",
    "shared_by_the_batch",
    "waited_for_a_lock",
    "within_budget",
]

T = TypeVar("T")

# A lost or refused connection, an admin shutdown, …; and a server that takes no writes yet.
_TRANSIENT_DRIVER_ERRORS: Final = psycopg.OperationalError | psycopg.errors.ReadOnlySqlTransaction


def is_transient_database_fault(error: BaseException) -> bool:
    """Lost connection, serialization failure, deadlock, admin shutdown, pool exhaustion, and a
    server that does not take writes yet (a standby being promoted: SQLSTATE 25006)."""
    if isinstance(error, sa_exc.DBAPIError):
        return error.connection_invalidated or isinstance(error.orig, _TRANSIENT_DRIVER_ERRORS)
    if isinstance(error, aiormq.exceptions.AMQPError):
        # The broker's (aiormq's ConnectionClosed is a ConnectionError too): not the database.
        return False
    return isinstance(error, _TRANSIENT_DRIVER_ERRORS | sa_exc.TimeoutError | ConnectionError)


def waited_for_a_lock(error: BaseException) -> bool:
    """`lock_timeout` struck: a row of one call is locked from outside the worker."""
    cause = error.orig if isinstance(error, sa_exc.DBAPIError) else error
    return isinstance(cause, psycopg.errors.LockNotAvailable)


def shared_by_the_batch(error: BaseException) -> bool:
    """A fault every call of a batch shares. A lock wait is one call's: the batch runs again
    one call at a time, and only the call whose row is held fails (after its retries,
    `memory_update_failed_db_error`)."""
    return is_transient_database_fault(error) and not waited_for_a_lock(error)


def retried_for(calls: Sized) -> Callable[[BaseException], bool]:
    """A batch retries only what it shares; a call alone, any transient fault."""
    return is_transient_database_fault if len(calls) == 1 else shared_by_the_batch


async def within_budget(
    attempt: Callable[[], Awaitable[T]],
    *,
    retried: Callable[[BaseException], bool],
    budget_s: float,
    on_retry: Callable[[BaseException | None], None],
) -> T:
    """`attempt()`, then again after each fault `retried` accepts, until `budget_s` from the
    first attempt; the last fault is raised. The retry machinery is built only after a fault
    (most attempts succeed at once); the first retry comes at once (a lost connection is
    replaced by then), later ones back off."""
    started = time.monotonic()
    try:
        return await attempt()
    except Exception as error:
        if not retried(error):
            raise
        on_retry(error)
    left = max(0.0, budget_s - (time.monotonic() - started))

    def before_sleep(state: RetryCallState) -> None:
        outcome = state.outcome
        on_retry(outcome.exception() if outcome is not None else None)

    retrying = AsyncRetrying(
        retry=retry_if_exception(retried),
        stop=stop_after_delay(left),
        wait=wait_exponential_jitter(max=1.0, jitter=0.1, multiplier=0.05),
        before_sleep=before_sleep,
        reraise=True,
    )
    async for retry in retrying:
        with retry:
            return await attempt()
    raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover
