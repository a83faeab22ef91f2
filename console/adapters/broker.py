"""The console's one broker connection: queue counts, and the audit stream from an offset.

A plain connection, opened again when lost: `connect_robust` has been seen not to come back
after the broker closed every connection, and the console must keep working through that.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from aio_pika.abc import AbstractConnection, AbstractIncomingMessage
from aio_pika.exceptions import ChannelNotFoundEntity

from console.core.overview import QueueReading
from contracts import Topology
from infra.messaging import amqp
from infra.observability.logs import get_logger
from infra.settings import Settings
from operators.audit_stream import StreamStart, open_stream

__all__ = ["BrokerLink"]

log = get_logger("ltm.console")


class BrokerLink:
    def __init__(self, settings: Settings, topology: Topology) -> None:
        self._settings = settings
        self.topology = topology
        self._connection: AbstractConnection | None = None
        # A connection found closed is opened again on the next node that answers.
        self._nodes = amqp.BrokerNodes.of(settings)
        self._opening = asyncio.Lock()

    async def connection(self) -> AbstractConnection:
        async with self._opening:
            if self._connection is None or self._connection.is_closed:
                self._connection = await self._nodes.connect()
                log.info("console.broker_connected")
            return self._connection

    async def close(self) -> None:
        if self._connection is not None and not self._connection.is_closed:
            await self._connection.close()

    async def queue_readings(self, names: Sequence[str]) -> dict[str, QueueReading]:
        """Messages ready and consumers of each queue that exists (a passive declare each;
        the broker closes the channel for a missing one, so each gets a channel of its own
        once one is missing)."""
        connection = await self.connection()
        readings: dict[str, QueueReading] = {}
        channel = await connection.channel()
        try:
            for name in names:
                if channel.is_closed:
                    channel = await connection.channel()
                try:
                    queue = await channel.declare_queue(name, passive=True)
                except ChannelNotFoundEntity:
                    continue
                result = queue.declaration_result
                readings[name] = QueueReading(
                    int(result.message_count or 0), int(result.consumer_count or 0)
                )
        finally:
            if not channel.is_closed:
                await channel.close()
        return readings

    @asynccontextmanager
    async def audit_stream(
        self, origin: StreamStart
    ) -> AsyncIterator[asyncio.Queue[AbstractIncomingMessage]]:
        """Deliveries of the audit stream from `origin`, on a channel of their own (closed,
        with its consumer, when the block ends)."""
        connection = await self.connection()
        async with open_stream(connection, self.topology, origin) as (deliveries, _):
            yield deliveries
