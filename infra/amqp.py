"""Connecting to the broker, one way for every process: the URL, and for `amqps://` the
certificate checks (docs/security.md, "Encryption in transit").

An `amqps://` URL verifies the broker's certificate against `LTM_AMQP_CA_FILE` (the system's
store when unset) and its host name against the URL's host; `LTM_AMQP_CERT_FILE` and
`LTM_AMQP_KEY_FILE` present a client certificate to a broker that asks for one.
"""

from __future__ import annotations

import ssl
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection, AbstractRobustConnection

from infra.settings import Settings

__all__ = ["connect", "connect_robust", "tls_context"]


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of an `amqps://` URL; None for `amqp://`."""
    if not settings.amqp_url.lower().startswith("amqps://"):
        return None
    # Certificate and host name both checked: the defaults, said here so that they stay.
    context = ssl.create_default_context(
        cafile=None if settings.amqp_ca_file is None else str(settings.amqp_ca_file)
    )
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    if settings.amqp_cert_file is not None:
        context.load_cert_chain(
            str(settings.amqp_cert_file),
            None if settings.amqp_key_file is None else str(settings.amqp_key_file),
        )
    return context


async def connect(settings: Settings, **options: Any) -> AbstractConnection:
    """A plain connection (`aio_pika.connect` options pass through)."""
    connection: AbstractConnection = await aio_pika.connect(
        settings.amqp_url, ssl_context=tls_context(settings), **options
    )
    return connection


async def connect_robust(settings: Settings, **options: Any) -> AbstractRobustConnection:
    """A connection that comes back after a broker restart (`aio_pika.connect_robust`)."""
    connection: AbstractRobustConnection = await aio_pika.connect_robust(
        settings.amqp_url, ssl_context=tls_context(settings), **options
    )
    return connection
