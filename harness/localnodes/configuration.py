"""What our own nodes are told: configuration file contents and the URLs that reach them.

Pure: the same inputs give the same text, so that the choices are testable without a node.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

__all__ = [
    "STANDBY_NAME",
    "TlsFiles",
    "amqp_url",
    "enabled_plugins",
    "postgres_settings",
    "postgres_url",
    "rabbit_config",
    "rabbit_node_name",
]

# The standby's application name: the primary waits for this one to confirm each commit.
STANDBY_NAME = "standby1"


class TlsFiles(BaseModel):
    """A server's certificate and key, and the CA its peers' certificates are checked against."""

    model_config = ConfigDict(frozen=True)

    ca: Path
    cert: Path
    key: Path


def rabbit_node_name(prefix: str, index: int) -> str:
    """`ltmc1@localhost` for prefix `ltmc`, index 1: `localhost` resolves the same everywhere."""
    return f"{prefix}{index}@localhost"


def rabbit_config(
    *,
    tls_port: int | None = None,
    tls: TlsFiles | None = None,
    require_client_cert: bool = False,
    management_port: int | None = None,
) -> str:
    """`rabbitmq.conf` of one node. The AMQP port and address come from the environment."""
    lines = [
        "# Written by harness.localnodes: a node of our own, on 127.0.0.1 only.",
        "log.console = false",
        "log.file.level = info",
        # Leaders of new quorum queues and streams on the node leading fewest: spread over a
        # cluster (a node setting: as a queue argument it would take part in every redeclare).
        "queue_leader_locator = balanced",
    ]
    if (tls_port is None) != (tls is None):
        raise ValueError("a TLS listener needs both its port and its files")
    if tls_port is not None and tls is not None:
        lines += [
            f"listeners.ssl.default = 127.0.0.1:{tls_port}",
            f"ssl_options.cacertfile = {tls.ca}",
            f"ssl_options.certfile = {tls.cert}",
            f"ssl_options.keyfile = {tls.key}",
            "ssl_options.verify = verify_peer",
            f"ssl_options.fail_if_no_peer_cert = {str(require_client_cert).lower()}",
        ]
    if management_port is not None:
        lines += ["management.tcp.ip = 127.0.0.1", f"management.tcp.port = {management_port}"]
    return "\n".join(lines) + "\n"


def enabled_plugins(*, management: bool) -> str:
    """The node's enabled-plugins file: none unless asked, so that a node starts in seconds."""
    return "[rabbitmq_management].\n" if management else "[].\n"


def amqp_url(
    port: int,
    *,
    user: str = "guest",
    password: str = "guest",
    vhost: str = "/",
    tls: bool = False,
) -> str:
    quote = urllib.parse.quote
    scheme = "amqps" if tls else "amqp"
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{port}/" + (
        "" if vhost == "/" else quote(vhost, safe="")
    )


def postgres_settings(
    *,
    port: int,
    socket_dir: Path,
    synchronous_standby: str | None,
    tls: bool = False,
) -> str:
    """Lines appended to an instance's `postgresql.conf`; a later line wins over an earlier one.

    `synchronous_standby` is None on the standby itself: it copied the primary's settings, and
    once promoted it would otherwise wait for a standby that does not exist.
    """
    names = f"FIRST 1 ({synchronous_standby})" if synchronous_standby else ""
    lines = [
        "# Written by harness.localnodes: an instance of our own, on 127.0.0.1 only.",
        f"port = {port}",
        "listen_addresses = '127.0.0.1'",
        f"unix_socket_directories = '{socket_dir}'",
        "wal_level = replica",
        "max_wal_senders = 4",
        "max_replication_slots = 4",
        "hot_standby = on",
        f"synchronous_standby_names = '{names}'",
    ]
    if tls:
        # Copied into the data folder: PostgreSQL wants its key owned by itself, mode 0600.
        lines += [
            "ssl = on",
            "ssl_cert_file = 'server.crt'",
            "ssl_key_file = 'server.key'",
            "ssl_ca_file = 'ca.crt'",
        ]
    return "\n".join(lines) + "\n"


def postgres_url(
    ports: Sequence[int],
    dbname: str = "postgres",
    params: Mapping[str, str] | None = None,
) -> str:
    """A libpq URL over every given instance; psycopg picks the one that accepts writes."""
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    query = {"target_session_attrs": "read-write", "connect_timeout": "2", **(params or {})}
    return (
        f"postgresql://postgres@{hosts}/{urllib.parse.quote(dbname, safe='')}?"
        + urllib.parse.urlencode(query)
    )
