"""What our own nodes are told: configuration texts and URLs."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from harness.localnodes.configuration import (
    TlsFiles,
    amqp_url,
    enabled_plugins,
    postgres_settings,
    postgres_url,
    rabbit_config,
    rabbit_node_name,
)

TLS = TlsFiles(ca=Path("/x/ca.crt"), cert=Path("/x/server.crt"), key=Path("/x/server.key"))


def _settings(text: str) -> dict[str, str]:
    """The effective settings of a `key = value` file: a later line wins, as in both servers."""
    pairs = (line.partition("=") for line in text.splitlines() if not line.startswith("#"))
    return {key.strip(): value.strip() for key, _, value in pairs if key.strip()}


def test_node_names_carry_the_prefix_and_localhost() -> None:
    assert rabbit_node_name("ltmc", 2) == "ltmc2@localhost"


def test_a_plain_node_has_no_tls_listener_and_no_management() -> None:
    settings = _settings(rabbit_config())

    assert not any(
        key.startswith(("listeners.ssl", "ssl_options", "management")) for key in settings
    )
    assert enabled_plugins(management=False) == "[].\n"


def test_leaders_of_new_queues_spread_over_the_nodes() -> None:
    assert _settings(rabbit_config())["queue_leader_locator"] == "balanced"


def test_a_tls_listener_names_its_files_and_checks_peers() -> None:
    settings = _settings(rabbit_config(tls_port=25671, tls=TLS))

    assert settings["listeners.ssl.default"] == "127.0.0.1:25671"
    assert settings["ssl_options.cacertfile"] == "/x/ca.crt"
    assert settings["ssl_options.certfile"] == "/x/server.crt"
    assert settings["ssl_options.keyfile"] == "/x/server.key"
    assert settings["ssl_options.verify"] == "verify_peer"
    assert settings["ssl_options.fail_if_no_peer_cert"] == "false"
    required = _settings(rabbit_config(tls_port=25671, tls=TLS, require_client_cert=True))
    assert required["ssl_options.fail_if_no_peer_cert"] == "true"


@pytest.mark.parametrize(
    ("tls_port", "tls"), [(25671, None), (None, TLS)], ids=["port only", "files only"]
)
def test_half_a_tls_listener_is_refused(tls_port: int | None, tls: TlsFiles | None) -> None:
    with pytest.raises(ValueError, match="both its port and its files"):
        rabbit_config(tls_port=tls_port, tls=tls)


def test_management_listens_on_loopback_at_its_port() -> None:
    settings = _settings(rabbit_config(management_port=25680))

    assert settings["management.tcp.ip"] == "127.0.0.1"
    assert settings["management.tcp.port"] == "25680"
    assert enabled_plugins(management=True) == "[rabbitmq_management].\n"


def test_amqp_urls_quote_credentials_and_name_the_vhost() -> None:
    assert amqp_url(25001) == "amqp://guest:guest@127.0.0.1:25001/"
    url = amqp_url(25001, user="ltm", password="p@ss/word", vhost="ltm/test", tls=True)
    parts = urllib.parse.urlsplit(url)
    assert parts.scheme == "amqps"
    assert urllib.parse.unquote(parts.password or "") == "p@ss/word"
    assert urllib.parse.unquote(parts.path[1:]) == "ltm/test"


def test_the_primary_waits_for_its_standby_and_the_standby_for_nobody() -> None:
    primary = _settings(
        postgres_settings(port=25432, socket_dir=Path("/s"), synchronous_standby="standby1")
    )
    # The standby's file is the primary's with its own lines appended: the later ones win.
    standby = _settings(
        postgres_settings(port=25432, socket_dir=Path("/s"), synchronous_standby="standby1")
        + postgres_settings(port=25433, socket_dir=Path("/s"), synchronous_standby=None)
    )

    assert primary["synchronous_standby_names"] == "'FIRST 1 (standby1)'"
    assert primary["listen_addresses"] == "'127.0.0.1'"
    assert primary["wal_level"] == "replica"
    assert standby["synchronous_standby_names"] == "''"
    assert standby["port"] == "25433"


def test_tls_turns_ssl_on_with_files_in_the_data_folder() -> None:
    settings = _settings(
        postgres_settings(port=1, socket_dir=Path("/s"), synchronous_standby=None, tls=True)
    )

    assert settings["ssl"] == "on"
    assert settings["ssl_key_file"] == "'server.key'"
    assert "ssl" not in _settings(
        postgres_settings(port=1, socket_dir=Path("/s"), synchronous_standby=None)
    )


def test_the_database_url_lists_every_instance_and_asks_for_the_writable_one() -> None:
    url = postgres_url([25432, 25433], "ltm")

    assert url == (
        "postgresql://postgres@127.0.0.1:25432,127.0.0.1:25433/ltm"
        "?target_session_attrs=read-write&connect_timeout=2"
    )
    with_tls = postgres_url([25432], params={"sslmode": "verify-ca"})
    assert with_tls.endswith(
        "/postgres?target_session_attrs=read-write&connect_timeout=2&sslmode=verify-ca"
    )
