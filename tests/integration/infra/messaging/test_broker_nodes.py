"""Several broker URLs: a node that does not answer is passed over for the next, by plain
connections and by `ltm` commands; TLS checks each node's own host name; none answering
fails with the last node's error."""

from __future__ import annotations

import aio_pika
import aiormq
import pytest

from harness.localnodes import RabbitCluster, TlsFiles
from harness.processes import free_port
from harness.services import TestServices
from infra.messaging import amqp
from infra.settings import Settings
from tests.support.commands import run_ltm


def _dead(settings: Settings) -> str:
    """A URL like the test run's, on a port where nothing listens."""
    return settings.amqp_url.replace(":5672/", f":{free_port()}/", 1)


async def test_a_dead_first_node_is_passed_over(settings: Settings) -> None:
    assert ":5672/" in settings.amqp_url
    listed = Settings(amqp_url=f"{_dead(settings)},{settings.amqp_url}")
    connection = await amqp.connect(listed)
    async with connection:
        assert str(connection.url.port) == "5672"  # type: ignore[attr-defined]
        channel = await connection.channel()
        assert not channel.is_closed


async def test_when_no_node_answers_the_last_ones_error_is_raised(settings: Settings) -> None:
    last = _dead(settings)
    listed = Settings(amqp_url=f"{_dead(settings)},{last}")
    port = last.split(":")[-1].split("/")[0]
    with pytest.raises((OSError, aiormq.exceptions.AMQPConnectionError), match=port):
        await amqp.connect(listed)


async def test_a_robust_connection_starts_on_the_node_that_answers(settings: Settings) -> None:
    listed = Settings(amqp_url=f"{_dead(settings)},{settings.amqp_url}")
    connection = await amqp.connect_robust(listed)
    async with connection:
        assert connection.url.port == 5672  # type: ignore[attr-defined]
        queue = await (await connection.channel()).declare_queue(exclusive=True)
        assert queue.name


async def test_an_ltm_command_takes_the_node_that_answers(
    services: TestServices, settings: Settings
) -> None:
    listed = f"{_dead(settings)},{settings.amqp_url}"
    done = await run_ltm(services, "topology", LTM_AMQP_URL=listed)
    assert done.code == 0, done.stderr
    assert "topology declared" in done.stdout


@pytest.mark.localnodes
async def test_each_tls_node_is_checked_against_its_own_host_name(
    tls_node: RabbitCluster, localnodes_tls: TlsFiles
) -> None:
    url = tls_node.amqp_url(tls_node.first.name, tls=True)
    # 127.1 is 127.0.0.1 under a name the certificate does not hold; localhost it holds.
    wrong, right = url.replace("127.0.0.1", "127.1", 1), url.replace("127.0.0.1", "localhost", 1)
    settings = Settings(
        amqp_url=f"{wrong},{right}",
        amqp_ca_file=localnodes_tls.ca,
        amqp_cert_file=localnodes_tls.cert,
        amqp_key_file=localnodes_tls.key,
    )
    connection = await amqp.connect(settings)
    async with connection:
        assert connection.url.host == "localhost"  # type: ignore[attr-defined]
    with pytest.raises(aio_pika.exceptions.AMQPConnectionError, match="Hostname mismatch"):
        await amqp.connect(settings.model_copy(update={"amqp_url": wrong}))


async def test_a_process_that_reconnects_moves_on_from_the_node_it_lost(
    settings: Settings,
) -> None:
    # Two names of the same broker stand for two nodes.
    other = settings.amqp_url.replace("127.0.0.1", "localhost", 1)
    assert other != settings.amqp_url
    nodes = amqp.BrokerNodes.of(Settings(amqp_url=f"{settings.amqp_url},{other}"))
    first = await nodes.connect()
    assert first.url.host == "127.0.0.1"  # type: ignore[attr-defined]
    await first.close()  # as a lost connection leaves it

    second = await nodes.connect()
    async with second:
        assert second.url.host == "localhost"  # type: ignore[attr-defined]
        # Still open: another connection (a second one of the process) starts there too.
        third = await nodes.connect()
        async with third:
            assert third.url.host == "localhost"  # type: ignore[attr-defined]
