"""`amqps://` against a broker node of the test's own with a TLS listener that asks for a
client certificate (the machine's broker is never touched): the right CA, host name and
client certificate connect; an unknown CA, another host name or no client certificate fail
with an error that says which."""

from __future__ import annotations

import ssl
from pathlib import Path

import aio_pika
import pytest

from harness.localnodes import RabbitCluster, TlsFiles
from infra.messaging import amqp
from infra.settings import Settings
from ltm.main import main
from tests.support.localnodes import self_signed_tls

pytestmark = [pytest.mark.localnodes, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def node(tls_node: RabbitCluster) -> RabbitCluster:
    return tls_node


def _settings(
    node: RabbitCluster, tls: TlsFiles, *, host: str = "localhost", **files: object
) -> Settings:
    url = node.amqp_url(node.first.name, tls=True).replace("127.0.0.1", host, 1)
    given = {"amqp_ca_file": tls.ca, "amqp_cert_file": tls.cert, "amqp_key_file": tls.key}
    given.update(files)  # type: ignore[arg-type]
    return Settings(amqp_url=url, **given)  # type: ignore[arg-type]


def test_an_amqp_url_has_no_tls_context() -> None:
    assert amqp.tls_context(Settings(amqp_url="amqp://guest:guest@127.0.0.1:5672/")) is None


def test_an_amqps_url_checks_the_certificate_and_the_host(localnodes_tls: TlsFiles) -> None:
    context = amqp.tls_context(
        Settings(amqp_url="amqps://u:p@localhost:5671/", amqp_ca_file=localnodes_tls.ca)
    )
    assert context is not None
    assert context.check_hostname and context.verify_mode is ssl.CERT_REQUIRED


async def test_the_right_ca_host_and_client_certificate_connect(
    node: RabbitCluster, localnodes_tls: TlsFiles
) -> None:
    connection = await amqp.connect(_settings(node, localnodes_tls))
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(exclusive=True)
        await channel.default_exchange.publish(aio_pika.Message(b"over tls"), queue.name)
        message = await queue.get(timeout=5)
        assert message.body == b"over tls"


async def test_a_certificate_of_an_unknown_ca_is_refused(
    node: RabbitCluster, localnodes_tls: TlsFiles, tmp_path: Path
) -> None:
    other = self_signed_tls(tmp_path / "other")
    with pytest.raises(aio_pika.exceptions.AMQPConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        await amqp.connect(_settings(node, localnodes_tls, amqp_ca_file=other.ca))


async def test_a_certificate_of_another_host_is_refused(
    node: RabbitCluster, localnodes_tls: TlsFiles
) -> None:
    # 127.1 reaches the node (it is 127.0.0.1) under a name its certificate does not hold.
    with pytest.raises(aio_pika.exceptions.AMQPConnectionError, match="Hostname mismatch"):
        await amqp.connect(_settings(node, localnodes_tls, host="127.1"))


async def test_without_a_client_certificate_a_broker_that_asks_for_one_refuses(
    node: RabbitCluster, localnodes_tls: TlsFiles
) -> None:
    with pytest.raises(aio_pika.exceptions.AMQPConnectionError):
        connection = await amqp.connect(
            _settings(node, localnodes_tls, amqp_cert_file=None, amqp_key_file=None)
        )
        async with connection:
            await connection.channel()


def test_a_command_says_so_in_one_line_without_the_password(
    node: RabbitCluster,
    localnodes_tls: TlsFiles,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = self_signed_tls(tmp_path / "other")
    settings = _settings(node, localnodes_tls)
    monkeypatch.setenv("LTM_AMQP_URL", settings.amqp_url)
    monkeypatch.setenv("LTM_AMQP_CA_FILE", str(other.ca))
    assert main(["dlq", "list"]) == 1
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("ltm dlq:")]
    assert "CERTIFICATE_VERIFY_FAILED" in line
    assert "tls-secret" not in err and "Traceback" not in err
