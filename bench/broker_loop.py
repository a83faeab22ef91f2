"""The broker limit: consume a call, publish the worker's events for it (confirmed), ack.

`python -m bench.broker_loop --amqp-url URL --prefix P --sample SAMPLE.json
[--prefetch N] [--ready-file PATH] [--publish aio-pika|aiormq]
[--database-url URL]`

No database and no decoding: the least Python a consumer of this message shape can run,
connected as the services connect (`infra.messaging.amqp`, its frame buffer included).
The queue is declared by `infra.messaging.topology.declare_topology`, as the worker does; each
delivery's events (the captured sample: same count, bodies, routing keys, time-to-live)
are published at once on a confirming channel, so up to prefetch × events confirms are
outstanding, and the delivery is acked after its confirms, as the worker does. It runs
like the worker, until SIGTERM, and touches `--ready-file` once it consumes; the bench
counts its results exactly as it counts the worker's.

`--publish aio-pika` (the limit the targets are set against) publishes with
`Exchange.publish`, the least code; `--publish aiormq` publishes, consumes and acks on the
underlying aiormq channel with `wait=False`, as the worker itself does, so that the worker
can also be compared with a loop whose AMQP path is as lean as its own.

`--database-url` makes it the committing loop: before publishing, each delivery's call is
decoded and its update committed by the worker's own statements in the worker's pipelined
transaction (`bench.db_limit.CommittingConnection`), the calls that arrive together sharing a
transaction through the worker's own `CallBatcher`, at the worker's batch size and as many
transactions at a time as the worker runs: what committing before answering costs, with none
of the worker's checks, pipeline or hooks.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import uuid
from pathlib import Path

import aiormq
from aio_pika.abc import AbstractIncomingMessage
from aiormq.abc import DeliveredMessage

from bench.db_limit import CommittingConnection
from bench.samples import Sample, message_for, properties_for
from contracts import ToolCallRequested, Topology, decode_tool_call
from infra.messaging import amqp
from infra.messaging.topology import declare_topology
from infra.settings import Settings
from worker.batching import CallBatcher

__all__ = ["main", "run_loop"]

# A call's update: the call, its memory's id and the new content.
_Memory = tuple[ToolCallRequested, int, str]


class _Committer:
    """The committing loop's part: each consumed call's update, committed before it is
    answered, with the calls that arrive together, as the worker's batcher runs them
    (`ltm.composition`: its batch size, as many transactions at a time, a connection each)."""

    def __init__(self, connections: list[CommittingConnection], max_batch: int) -> None:
        self._idle: asyncio.Queue[CommittingConnection] = asyncio.Queue()
        for connection in connections:
            self._idle.put_nowait(connection)
        self._batcher: CallBatcher[_Memory, None] = CallBatcher(
            self._commit_batch,
            max_batch=max_batch,
            concurrency=len(connections),
            shared_fault=lambda _: True,
        )

    @classmethod
    async def open(cls, url: str, sample: Sample) -> _Committer:
        worker = Settings()
        at_a_time = min(worker.batch_concurrency, worker.db_pool_size)
        connections = [await CommittingConnection.connect(url, sample) for _ in range(at_a_time)]
        return cls(connections, worker.max_batch)

    async def commit(self, body: bytes) -> None:
        """The delivered call's update, committed with the calls that arrive with it."""
        call = decode_tool_call(body)
        arguments = call.arguments_object() or {}
        memory = (call, int(arguments["memory_id"]), str(arguments["memory_content"]))
        await self._batcher.submit(call.tool_call_id, memory)

    async def _commit_batch(self, memories: list[_Memory]) -> list[None]:
        connection = await self._idle.get()
        try:
            await connection.commit(memories)
        finally:
            self._idle.put_nowait(connection)
        return [None] * len(memories)

    async def close(self) -> None:
        await self._batcher.close()
        while not self._idle.empty():
            await self._idle.get_nowait().close()


async def run_loop(
    amqp_url: str,
    prefix: str,
    sample: Sample,
    *,
    prefetch: int,
    stop: asyncio.Event,
    ready_file: Path | None = None,
    publish: str = "aio-pika",
    database_url: str | None = None,
) -> None:
    """Consumes and answers until `stop` is set; with `database_url`, commits each call first."""
    topology = Topology(prefix)
    committer = None if database_url is None else await _Committer.open(database_url, sample)
    try:
        connection = await amqp.BrokerNodes([amqp.BrokerNode(amqp_url)]).connect(
            client_properties={"connection_name": "ltm-bench-broker-loop"}
        )
        async with connection:
            setup = await connection.channel()
            await declare_topology(setup, topology)
            await setup.close()
            publisher = await connection.channel(publisher_confirms=True)
            events = await publisher.get_exchange(topology.events_exchange, ensure=False)
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=prefetch)
            queue = await channel.get_queue(topology.worker_queue, ensure=False)

            async def on_delivery(message: AbstractIncomingMessage) -> None:
                if committer is not None:
                    await committer.commit(message.body)
                correlation_id = message.correlation_id or ""
                await asyncio.gather(
                    *(
                        events.publish(
                            message_for(event, str(uuid.uuid4()), correlation_id),
                            event.routing_key,
                            mandatory=False,
                        )
                        for event in sample.events
                    )
                )
                await message.ack()

            raw = await publisher.get_underlay_channel()
            assert isinstance(raw, aiormq.Channel)

            async def on_raw_delivery(message: DeliveredMessage) -> None:
                if committer is not None:
                    await committer.commit(message.body)
                correlation_id = message.header.properties.correlation_id or ""
                await asyncio.gather(
                    *(
                        raw.basic_publish(
                            event.body,
                            exchange=events.name,
                            routing_key=event.routing_key,
                            properties=properties_for(event, str(uuid.uuid4()), correlation_id),
                            mandatory=False,
                            wait=False,
                        )
                        for event in sample.events
                    )
                )
                assert message.delivery_tag is not None
                await message.channel.basic_ack(message.delivery_tag, wait=False)

            if publish == "aiormq":
                consuming = await channel.get_underlay_channel()
                await consuming.basic_consume(queue.name, on_raw_delivery)
            else:
                await queue.consume(on_delivery)
            if ready_file is not None:
                await asyncio.to_thread(ready_file.touch)
            await stop.wait()
    finally:
        if committer is not None:
            await committer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker_loop")
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--sample", type=Path, required=True)
    parser.add_argument("--prefetch", type=int, default=256)
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--publish", choices=("aio-pika", "aiormq"), default="aio-pika")
    parser.add_argument("--database-url", help="commit each call first, in this database")
    args = parser.parse_args(argv)
    import uvloop

    async def until_terminated() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await run_loop(
            args.amqp_url,
            args.prefix,
            Sample.load(args.sample),
            prefetch=args.prefetch,
            stop=stop,
            ready_file=args.ready_file,
            publish=args.publish,
            database_url=args.database_url,
        )

    uvloop.run(until_terminated())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
