"""A PostgreSQL primary with a synchronous standby of our own: streaming, failover, TLS."""

from __future__ import annotations

import psycopg
import pytest

from harness.localnodes import PostgresPair, TlsFiles
from harness.localnodes.host import wait_until
from harness.localnodes.running import started_pair

pytestmark = pytest.mark.localnodes


def _server(url: str) -> tuple[int, bool]:
    """The port of the instance a connection reached, and whether it is a standby."""
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT inet_server_port(), pg_is_in_recovery()").fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


def test_the_standby_streams_synchronously(postgres_pair: PostgresPair) -> None:
    assert postgres_pair.standby is not None

    assert postgres_pair.sync_state() == "sync"
    with postgres_pair.primary.connect() as primary:
        # A commit returns only once the standby has its WAL: the standby is named as the
        # synchronous one, not merely connected.
        setting = primary.execute("SHOW synchronous_standby_names").fetchone()
    assert setting == ("FIRST 1 (standby1)",)
    assert _server(postgres_pair.standby.conninfo()) == (postgres_pair.standby.port, True)


def test_the_url_reaches_the_instance_that_takes_writes(postgres_pair: PostgresPair) -> None:
    assert _server(postgres_pair.url()) == (postgres_pair.primary.port, False)


@pytest.mark.timeout(120)
def test_a_committed_row_survives_killing_the_primary_and_promoting_the_standby() -> None:
    with started_pair() as pair:
        assert pair.standby is not None
        with psycopg.connect(pair.url(), autocommit=True) as connection:
            connection.execute("CREATE TABLE memories (id int PRIMARY KEY, content text)")
            connection.execute("INSERT INTO memories VALUES (1, 'likes tea')")
        postmaster = pair.primary.pid

        pair.kill_primary()

        assert not pair.primary.is_running
        # Until promotion the standby only reads: the URL finds no instance that takes writes.
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pair.url()).close()
        pair.promote_standby()

        def writable() -> tuple[int, bool] | None:
            try:
                return _server(pair.url())
            except psycopg.OperationalError:
                return None

        assert wait_until(writable, timeout=30, what="the promoted standby") == (
            pair.standby.port,
            False,
        )
        with psycopg.connect(pair.url(), autocommit=True) as connection:
            kept = connection.execute("SELECT id, content FROM memories").fetchall()
            connection.execute("INSERT INTO memories VALUES (2, 'after the failover')")
        assert kept == [(1, "likes tea")]
        assert postmaster is not None
        assert pair.primary.pid is None


@pytest.mark.timeout(120)
def test_one_instance_with_tls_proves_itself_with_the_ca(localnodes_tls: TlsFiles) -> None:
    with started_pair(standby=False, tls=localnodes_tls) as single:
        assert single.standby is None
        url = single.url(params={"sslmode": "verify-full", "sslrootcert": str(localnodes_tls.ca)})

        with psycopg.connect(url) as connection:
            row = connection.execute(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
            ).fetchone()
            assert row == (True,)
            assert connection.execute("SHOW synchronous_standby_names").fetchone() == ("",)
