"""The dead-letter queue filtered in place, for an erasure: the letters about the subject
taken out, every other one put back as it was, in the order they were.

Each kept letter is republished to the dead-letter exchange (with confirms: body, routing
key, properties and headers as they came) before its original is acked, so that a crash
loses none. The removed ones are handed to the caller unacked; it keeps a record of them,
then the block ends and they are acked. A crash before then sends them back to the queue,
where the rerun finds them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import aio_pika
from aio_pika.abc import AbstractConnection, AbstractIncomingMessage

from contracts import Topology
from contracts.dead_letters import ORIGINAL_USER_ID_HEADER
from infra.messaging import amqp

__all__ = ["DELIVERY_PATIENCE_S", "filtered_dead_letters", "kept_copy"]

# The broker said the letters are there: a letter that does not come within this long is
# held by another consumer (an operator listing the queue), and is left where it is.
DELIVERY_PATIENCE_S: Final = 3.0


def kept_copy(message: AbstractIncomingMessage, *, own_user: str | None) -> aio_pika.Message:
    """The letter as it was. The broker refuses a user_id other than the connection's own:
    another publisher's goes to `x-ltm-original-user-id`, as a dead-lettering puts it."""
    headers = dict(message.headers or {})
    user_id = message.user_id
    if user_id and user_id != own_user:
        headers.setdefault(ORIGINAL_USER_ID_HEADER, user_id)
        user_id = None
    return amqp.copy_of(message, headers=headers, user_id=user_id)


@asynccontextmanager
async def filtered_dead_letters(
    connection: AbstractConnection,
    topology: Topology,
    removes: Callable[[bytes], bool],
    *,
    own_user: str | None,
) -> AsyncIterator[list[bytes]]:
    """Goes through the letters the queue holds now: each that `removes` keeps is put back at
    the tail; the bodies of the others are yielded, acked when the block ends normally."""
    channel = await connection.channel(publisher_confirms=True)
    try:
        queue = await channel.declare_queue(topology.dead_letter_queue, passive=True)
        count = int(queue.declaration_result.message_count or 0)
        exchange = await channel.get_exchange(topology.dead_letter_exchange, ensure=False)
        removed: list[AbstractIncomingMessage] = []
        if count:
            # Unlimited: the removed letters stay unacked until the block ends.
            await channel.set_qos(prefetch_count=0)
            deliveries: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()

            async def on_message(message: AbstractIncomingMessage) -> None:
                deliveries.put_nowait(message)

            tag = await queue.consume(on_message)
            try:
                for _ in range(count):
                    try:
                        message = await asyncio.wait_for(deliveries.get(), DELIVERY_PATIENCE_S)
                    except TimeoutError:
                        break
                    if removes(message.body):
                        removed.append(message)
                        continue
                    await exchange.publish(
                        kept_copy(message, own_user=own_user),
                        routing_key=message.routing_key or "",
                    )
                    await message.ack()
            finally:
                await queue.cancel(tag)
        yield [message.body for message in removed]
        for message in removed:
            await message.ack()
    finally:
        # Whatever was delivered and not acked (a letter past the count, or every removed
        # one after a failure) goes back to the queue.
        if not channel.is_closed:
            await channel.close()
