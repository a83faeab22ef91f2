"""A TCP proxy in front of RabbitMQ, for the network faults a broker restart cannot make.

`stall()` stops forwarding in both directions, as a dead network path does (the sockets stay
open; only heartbeats can tell); `resume()` lets the held bytes through. `cut_at(method)`
closes the next connection that sends that AMQP method, before the broker sees it, and
`stall_at(method)` stalls there: a connection lost halfway through a client's setup.
`drop()` closes every connection at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from types import TracebackType
from typing import Literal, Self

import yarl

__all__ = ["BASIC_QOS", "AmqpProxy"]

# (class id, method id) of the AMQP 0-9-1 methods a test may cut at.
BASIC_QOS = (60, 10)

_PROTOCOL_HEADER = 8  # b"AMQP\x00\x00\x09\x01"
_FRAME_HEADER = struct.Struct(">BHI")  # type, channel, payload size
_METHOD_FRAME = 1
_FRAME_END = 1


class AmqpProxy:
    """Listens on 127.0.0.1 (random port) and forwards each connection to the broker."""

    def __init__(self, amqp_url: str) -> None:
        self._amqp_url = yarl.URL(amqp_url)
        assert self._amqp_url.host is not None
        self._broker = (self._amqp_url.host, self._amqp_url.port or 5672)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._fault: tuple[tuple[int, int], Literal["cut", "stall"]] | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.connections = 0
        self.faults = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, *, heartbeat_s: int) -> str:
        """The broker's URL (user, virtual host) through the proxy, with a short heartbeat:
        aiormq gives up a connection that sent no frame for 3 x (heartbeat + 1) s."""
        through = self._amqp_url.with_host("127.0.0.1").with_port(self.port)
        return str(through % {"heartbeat": heartbeat_s})

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    def drop(self) -> None:
        """Closes every connection now, as a broker that went away would."""
        for task in self._connections:
            task.cancel()

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def cut_at(self, method: tuple[int, int]) -> None:
        """The next connection to send `method` is closed instead (once)."""
        self._fault = (method, "cut")

    def stall_at(self, method: tuple[int, int]) -> None:
        """`stall()` when the next connection sends `method`, before forwarding it (once)."""
        self._fault = (method, "stall")

    async def _accept(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.connections += 1
        try:
            broker_in, broker_out = await asyncio.open_connection(*self._broker)
        except OSError:
            client_out.close()
            self._connections.discard(task)
            return
        upstream = asyncio.create_task(self._client_to_broker(client_in, broker_out))
        downstream = asyncio.create_task(self._pipe(broker_in, client_out))
        try:
            await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in (upstream, downstream):
                pipe.cancel()
            await asyncio.gather(upstream, downstream, return_exceptions=True)
            for writer in (client_out, broker_out):
                writer.close()
                with contextlib.suppress(OSError, asyncio.CancelledError):
                    await writer.wait_closed()
            self._connections.discard(task)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            await self._forward(sink, data)

    async def _client_to_broker(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        """Forwards frame by frame, so that a cut falls before the method it names."""
        header = await source.readexactly(_PROTOCOL_HEADER)
        await self._forward(sink, header)
        while True:
            frame_header = await source.readexactly(_FRAME_HEADER.size)
            kind, _, size = _FRAME_HEADER.unpack(frame_header)
            rest = await source.readexactly(size + _FRAME_END)
            fault = self._fault
            if kind == _METHOD_FRAME and fault and fault[0] == struct.unpack(">HH", rest[:4]):
                self._fault = None
                self.faults += 1
                if fault[1] == "cut":
                    return
                self.stall()
            await self._forward(sink, frame_header + rest)

    async def _forward(self, sink: asyncio.StreamWriter, data: bytes) -> None:
        await self._flowing.wait()
        sink.write(data)
        await sink.drain()
