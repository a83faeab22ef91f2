"""Connecting to the broker, one way for every process: the node to connect to, and for
`amqps://` the certificate checks (docs/security.md, "Encryption in transit").

`LTM_AMQP_URL` names one node, or every node of a cluster separated by commas. `BrokerNodes`
holds that list and chooses the node: the first that answers, trying them in turn from the
one after the node that last failed (a refused connection or a lost one), round-robin.
aio-pika's own `connect_robust` reconnects to the one URL it was given; `connect_robust` here
reconnects to the next node instead, and restores channels and consumers the same way.

Importing this module sets aiormq's buffer for every connection the process opens: up to
`FRAME_BUFFER` frames queued for the connection's writer, not ten (below).

An `amqps://` URL verifies the broker's certificate against `LTM_AMQP_CA_FILE` (the system's
store when unset) and its host name against that node's own host in the URL;
`LTM_AMQP_CERT_FILE` and `LTM_AMQP_KEY_FILE` present a client certificate to a broker that
asks for one.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import aio_pika
import aiormq
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage, AbstractRobustConnection
from aio_pika.robust_channel import RobustChannel
from aio_pika.robust_connection import RobustConnection
from yarl import URL

from infra.observability.logs import get_logger
from infra.redaction import mask_passwords
from infra.settings import Settings

__all__ = [
    "FRAME_BUFFER",
    "BrokerNode",
    "BrokerNodes",
    "FailoverChannel",
    "FailoverConnection",
    "connect",
    "connect_robust",
    "copy_of",
    "tls_context",
]

log = get_logger("ltm.amqp")

T = TypeVar("T")

# aiormq queues at most ten frames per connection for its writer task; the eleventh publish
# (or ack) waits for the writer, holding its channel's lock, so a batch's events (four per
# call) went out ten per turn of the event loop (bench/RESULTS.md has the rates before and
# after). Bounded all the same: in flight a worker holds at most its prefetch's deliveries,
# each with its events and its ack (1,280 frames at the default).
FRAME_BUFFER: Final = 4096
aiormq.Connection.FRAME_BUFFER_SIZE = FRAME_BUFFER

# What a node that does not answer raises: refused, reset, timed out, or closed at the
# handshake (a node shutting down, or not yet started).
UNREACHABLE: Final = (OSError, TimeoutError, aiormq.exceptions.AMQPError)


def tls_context(settings: Settings, url: str | None = None) -> ssl.SSLContext | None:
    """The TLS context of an `amqps://` URL (`url`, else the settings' first); None for
    `amqp://`. The host name it checks is the one each connection is made to."""
    if not (url or settings.amqp_urls[0]).lower().startswith("amqps://"):
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


@dataclass(frozen=True, slots=True)
class BrokerNode:
    """One node: its URL and, for `amqps://`, the TLS context its connections use."""

    url: str
    tls: ssl.SSLContext | None = None

    @property
    def shown(self) -> str:
        """The URL without its password, for logs and errors."""
        return mask_passwords(self.url)


class BrokerNodes:
    """The nodes of one broker and which one to try next.

    `candidates()` yields every node once, starting after the one that failed last (the
    first node until one fails); `failed(node)` records a refused or lost connection. A
    connection handed out by `connect` that has since closed counts as lost at the next
    `connect`, so a process that reconnects moves on to the next node by itself.
    """

    def __init__(self, nodes: Sequence[BrokerNode]) -> None:
        if not nodes:
            raise ValueError("a broker has at least one node")
        self.nodes = tuple(nodes)
        self._start = 0
        self._current: tuple[BrokerNode, AbstractConnection] | None = None

    @classmethod
    def of(cls, settings: Settings) -> BrokerNodes:
        return cls([BrokerNode(url, tls_context(settings, url)) for url in settings.amqp_urls])

    def candidates(self) -> Iterator[BrokerNode]:
        start = self._start
        for offset in range(len(self.nodes)):
            yield self.nodes[(start + offset) % len(self.nodes)]

    def failed(self, node: BrokerNode) -> None:
        """The next round starts with the node after this one."""
        self._start = (self.nodes.index(node) + 1) % len(self.nodes)

    async def connect(self, **options: Any) -> AbstractConnection:
        """A plain connection to the first node that answers (`aio_pika.connect` options
        pass through); the last node's error when none does."""
        if self._current is not None and self._current[1].is_closed:
            self.failed(self._current[0])
        self._current = None

        async def attempt(node: BrokerNode) -> tuple[BrokerNode, AbstractConnection]:
            connection = aio_pika.Connection(URL(node.url), ssl_context=node.tls, **options)
            try:
                await connection.connect()
            except BaseException:
                # Closed here: aio-pika would close it once collected, outside any event loop
                # ("coroutine 'Connection.close' was never awaited").
                await connection.close()
                raise
            return node, connection

        self._current = await self.first_answering(attempt)
        return self._current[1]

    async def first_answering(self, attempt: Callable[[BrokerNode], Awaitable[T]]) -> T:
        """`await attempt(node)` for each candidate until one returns; the last error when
        every node failed."""
        nodes = list(self.candidates())
        for number, node in enumerate(nodes, start=1):
            try:
                return await attempt(node)
            except UNREACHABLE as error:
                self.failed(node)
                if number == len(nodes):
                    raise
                log.warning(
                    "amqp.node_unreachable",
                    url=node.shown,
                    error=mask_passwords(repr(error)),
                )
        raise AssertionError("unreachable: a broker has at least one node")


class FailoverChannel(RobustChannel):
    """aio-pika's robust channel, restored only on a connection that is up.

    aio-pika reopens a robust channel as soon as it closes; when the whole connection went
    (a node killed), that reopening runs on the transport just lost, fails, and is logged
    as an error, though the connection restores every channel once it is back on a node.
    Here it waits for that.
    """

    async def restore(self, channel: Any = None) -> None:
        transport = self._connection.transport
        if transport is None or transport.connection.is_closed:
            return  # the connection restores it when it has reconnected
        await super().restore(channel)


class FailoverConnection(RobustConnection):
    """aio-pika's robust connection, over several nodes: every (re)connection attempt tries
    the nodes in turn, from the one after the node lost or refused last.

    aio-pika's robust connection reads `url` and the TLS context (`kwargs["context"]`) at
    each attempt; each attempt here sets them to the node it tries.
    """

    CHANNEL_CLASS = FailoverChannel

    def __init__(self, nodes: BrokerNodes, **options: Any) -> None:
        first = next(nodes.candidates())
        super().__init__(URL(first.url), ssl_context=first.tls, **options)
        self.nodes = nodes
        self.node: BrokerNode | None = None

    async def _on_connection_close(self, closing: Any) -> None:
        if self.node is not None and not self.close_called:
            self.nodes.failed(self.node)
            log.warning("amqp.node_connection_lost", url=self.node.shown)
        await super()._on_connection_close(closing)

    async def _RobustConnection__connect_transport(self) -> None:  # noqa: N802
        # The one step of aio-pika's reconnection loop that connects (a private name:
        # the failover tests prove that it is still the one called).
        connect_once = getattr(super(), "_RobustConnection__connect_transport")  # noqa: B009

        async def attempt(node: BrokerNode) -> None:
            self.url, self.kwargs["context"], self.node = URL(node.url), node.tls, node
            await connect_once()

        await self.nodes.first_answering(attempt)
        if self.node is not None:
            log.info("amqp.node_connected", url=self.node.shown)


async def connect(settings: Settings, **options: Any) -> AbstractConnection:
    """A plain connection to the first node that answers (`aio_pika.connect` options pass
    through). A process that reconnects keeps a `BrokerNodes` and calls its `connect`."""
    return await BrokerNodes.of(settings).connect(**options)


async def connect_robust(
    settings: Settings, *, timeout: float | None = None, **options: Any
) -> AbstractRobustConnection:
    """A connection that comes back, to the next node that answers, whenever it is lost
    (`aio_pika.connect_robust` options pass through)."""
    connection = FailoverConnection(BrokerNodes.of(settings), **options)
    await connection.connect(timeout=timeout)
    return connection


def copy_of(
    message: AbstractIncomingMessage,
    *,
    headers: Mapping[str, Any],
    user_id: str | None,
    expiration: bool = True,
) -> aio_pika.Message:
    """A received message to publish again: its body and properties as they came, with these
    headers and this `user_id` (the broker refuses any user but the connection's own);
    without `expiration`, none."""
    return aio_pika.Message(
        message.body,
        headers=dict(headers),
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        delivery_mode=message.delivery_mode or aio_pika.DeliveryMode.PERSISTENT,
        priority=message.priority,
        correlation_id=message.correlation_id,
        reply_to=message.reply_to,
        expiration=message.expiration if expiration else None,
        message_id=message.message_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
        user_id=user_id,
    )
