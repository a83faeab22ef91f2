"""Broker nodes and PostgreSQL instances of the test run's own (`harness.localnodes`).

Opt-in: only tests that name these fixtures start anything. A conftest brings them in with
`from tests.support.localnodes import rabbit_cluster, ...`. One cluster is shared by the whole
session (starting three nodes takes ~20 s); tests that break it for good start their own.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.localnodes import PostgresPair, RabbitCluster, TlsFiles
from harness.localnodes.host import new_base_dir, remove_if_empty
from harness.localnodes.running import MachineServices, started_cluster, started_pair

__all__ = [
    "localnodes_tls",
    "machine_services",
    "postgres_pair",
    "rabbit_cluster",
    "self_signed_tls",
    "tls_node",
    "tls_postgres",
]


def self_signed_tls(folder: Path) -> TlsFiles:
    """A CA and a server certificate it signed, for `localhost` and 127.0.0.1 (openssl)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    cert, key, request = folder / "server.crt", folder / "server.key", folder / "server.csr"
    extensions = folder / "server.ext"
    extensions.write_text(
        "subjectAltName = DNS:localhost, IP:127.0.0.1\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature, keyEncipherment\n"
        "extendedKeyUsage = serverAuth, clientAuth\n"
        "subjectKeyIdentifier = hash\n"
        "authorityKeyIdentifier = keyid, issuer\n"
    )
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", ca_key,
             "-out", ca, "-subj", "/CN=ltm test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", request,
             "-subj", "/CN=localhost")  # fmt: skip
    _openssl("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-days", "2", "-out", cert, "-extfile", extensions)  # fmt: skip
    # The PostgreSQL server (user postgres) reads the certificates; its key is copied.
    for path in (folder, ca, cert):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return TlsFiles(ca=ca, cert=cert, key=key)


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@pytest.fixture(scope="session")
def machine_services() -> Iterator[MachineServices]:
    """The machine's own services as they were before any node of ours started; checked again
    after every one of ours has stopped (a failure then is an error at teardown)."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("no RabbitMQ service on this machine: nothing of its own to protect")
    before = MachineServices.now()
    yield before
    after = MachineServices.now()
    assert after == before, "the machine's own broker or database changed"


@pytest.fixture(scope="session")
def localnodes_tls() -> Iterator[TlsFiles]:
    """A CA and a server certificate for our nodes' TLS listeners."""
    folder = new_base_dir()
    try:
        yield self_signed_tls(folder / "tls")
    finally:
        shutil.rmtree(folder / "tls", ignore_errors=True)
        remove_if_empty(folder)


@pytest.fixture(scope="session")
def rabbit_cluster(
    machine_services: MachineServices, localnodes_tls: TlsFiles
) -> Iterator[RabbitCluster]:
    """Three nodes of our own in one cluster, each with a TLS listener too, and a user and
    virtual host of the cluster's own (in its URLs); shared by the session. A test that kills
    a node restarts it before it ends."""
    with started_cluster(
        size=3, tls=localnodes_tls, user="ltm", password="ltm-secret", vhost="ltm"
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def postgres_pair(machine_services: MachineServices) -> Iterator[PostgresPair]:
    """A primary with a synchronous standby, shared by the session: tests that fail it over
    start their own (`started_pair`)."""
    with started_pair() as pair:
        yield pair


@pytest.fixture(scope="session")
def tls_node(
    machine_services: MachineServices, localnodes_tls: TlsFiles
) -> Iterator[RabbitCluster]:
    """One node whose TLS listener asks every client for a certificate of the CA, with a user
    and virtual host of its own; shared by the session's TLS tests."""
    with started_cluster(
        size=1,
        tls=localnodes_tls,
        require_client_cert=True,
        user="ltm-tls",
        password="tls-secret",
        vhost="ltm",
    ) as single:
        yield single


@pytest.fixture(scope="session")
def tls_postgres(
    machine_services: MachineServices, localnodes_tls: TlsFiles
) -> Iterator[PostgresPair]:
    """One PostgreSQL instance with `ssl = on` and the CA's server certificate."""
    with started_pair(standby=False, tls=localnodes_tls) as single:
        yield single
