"""Which database faults the worker's retry budget covers (`is_transient_database_fault`)."""

from __future__ import annotations

import aiormq.exceptions
import psycopg
from sqlalchemy import exc as sa_exc

from worker.runtime import is_transient_database_fault


def _wrapped(error: Exception, *, invalidated: bool = False) -> sa_exc.DBAPIError:
    wrapped = sa_exc.DBAPIError.instance(
        "UPDATE memories", {}, error, psycopg.Error, connection_invalidated=invalidated
    )
    assert isinstance(wrapped, sa_exc.DBAPIError)
    return wrapped


def test_a_standby_not_yet_promoted_is_transient() -> None:
    read_only = psycopg.errors.ReadOnlySqlTransaction(
        "cannot execute UPDATE in a read-only transaction"
    )
    assert is_transient_database_fault(read_only)
    assert is_transient_database_fault(_wrapped(read_only))


def test_a_connection_lost_to_a_dying_primary_is_transient() -> None:
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    assert is_transient_database_fault(lost)
    assert is_transient_database_fault(_wrapped(lost))
    assert is_transient_database_fault(
        _wrapped(psycopg.errors.AdminShutdown("terminating connection"))
    )
    assert is_transient_database_fault(ConnectionRefusedError())


def test_a_fault_of_the_statement_is_not() -> None:
    assert not is_transient_database_fault(psycopg.errors.UniqueViolation("duplicate key"))
    assert not is_transient_database_fault(
        _wrapped(psycopg.errors.UniqueViolation("duplicate key"))
    )
    assert not is_transient_database_fault(psycopg.errors.InFailedSqlTransaction("aborted"))
    assert not is_transient_database_fault(ValueError())


def test_a_broker_connection_closed_is_not_a_database_fault() -> None:
    # A ConnectionError as well: an erasure's dead-letter pass that met it went back to the
    # queue only by chance (its dead-lettering failed on the same closed channel).
    assert isinstance(aiormq.exceptions.ConnectionClosed(320, "closed"), ConnectionError)
    assert not is_transient_database_fault(aiormq.exceptions.ConnectionClosed(320, "closed"))
    assert is_transient_database_fault(ConnectionResetError())
