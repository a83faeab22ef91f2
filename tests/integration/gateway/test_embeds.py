"""Embeds published to a shard's queue reach the (fake) Discord channel exactly once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from aio_pika.abc import AbstractChannel
from structlog.testing import capture_logs

from contracts import CREATE_COLOR, EmbedRequested, Topology, embed_routing_key
from gateway import RetryPolicy
from harness.broker import publish_raw, queue_depth
from harness.fake_discord import FakeDiscord, Reply
from infra.messaging.topology import declare_shard_queue
from tests.integration.gateway.conftest import (
    GatewayFactory,
    embed_requested,
    fresh_shard,
    handled,
    publish_embed,
    until,
)


async def test_an_embed_is_posted_once_with_its_content(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    event = embed_requested(fresh_shard())
    await send(start_gateway, channel, topology, event)
    posts = fake_discord.posts(event.channel_id)
    assert len(posts) == 1
    post = posts[0]
    assert post.path == f"/api/v10/channels/{event.channel_id}/messages"
    assert post.headers["Authorization"] == "Bot fake-token-main"
    assert post.json["allowed_mentions"] == {"parse": []}
    assert post.json["nonce"] == event.event_id.hex[:25]
    [embed] = post.json["embeds"]
    assert embed["title"] == "Tomori remembered something"
    assert embed["description"] == "```\nAlice likes tea\n```"
    assert embed["color"] == 0x25D4DA
    assert embed["footer"] == {"text": "Manage server memories with /memory server"}
    assert embed["fields"] == [{"name": "Before", "value": "Alice likes coffee", "inline": False}]
    await assert_delivered_once(fake_discord, channel, topology, event)


async def test_a_created_memory_is_posted_in_green(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    event = embed_requested(
        fresh_shard(),
        title="Tomori learned something new",
        color=CREATE_COLOR,
        fields=(),
    ).model_copy(update={"kind": "memory_created"})
    await send(start_gateway, channel, topology, event)
    [post] = fake_discord.posts(event.channel_id)
    [embed] = post.json["embeds"]
    assert (embed["title"], embed["color"]) == ("Tomori learned something new", 0x2ECC71)
    assert embed["description"] == "```\nAlice likes tea\n```"
    await assert_delivered_once(fake_discord, channel, topology, event)


async def test_a_duplicated_embed_is_posted_once(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    shard = fresh_shard()
    event = embed_requested(shard, color=0xE74C3C, footer=None, fields=())
    # Both copies wait in the queue, so that they arrive together (prefetch > 1).
    await declare_shard_queue(channel, topology, shard)
    await publish_embed(channel, topology, event)
    await publish_embed(channel, topology, event)
    with capture_logs() as logs:
        async with start_gateway(shards=(shard,)):
            await until(
                lambda: _has(logs, "shard.duplicate", event_id=str(event.event_id)),
                what="the second copy seen as a duplicate",
            )
    assert len(fake_discord.posts(event.channel_id)) == 1
    [embed] = fake_discord.posts(event.channel_id)[0].json["embeds"]
    assert embed["color"] == 0xE74C3C
    assert "footer" not in embed
    assert await queue_depth(channel, topology.shard_queue(shard)) == 0


async def test_a_redelivered_embed_is_not_posted_twice_by_discord(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    """The first gateway dies after Discord created the message but before the ack: the next
    one, with no memory of it, posts again with the same nonce, and Discord keeps one."""
    shard = fresh_shard()
    event = embed_requested(shard)
    fake_discord.script(event.channel_id, Reply.slow_success(0.5))
    async with start_gateway(shards=(shard,), stop_grace_s=0.0):
        await publish_embed(channel, topology, event)
        await until(lambda: event.channel_id in fake_discord.arrived, what="the POST arriving")
    # Stopped without waiting: the delivery went back to the queue unacknowledged.
    await until(
        lambda: len(fake_discord.messages_in(event.channel_id)) == 1, what="message created"
    )
    async with start_gateway(shards=(shard,)) as second:
        await handled(second, event, what="redelivery")
    assert len(fake_discord.posts(event.channel_id)) == 2
    await assert_delivered_once(fake_discord, channel, topology, event)


@pytest.mark.parametrize(
    ("reply", "reason"), [(Reply.forbidden(), "forbidden"), (Reply.not_found(), "not_found")]
)
async def test_forbidden_and_unknown_channels_are_logged_and_acknowledged(
    *,
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
    reply: Reply,
    reason: str,
) -> None:
    shard = fresh_shard()
    event = embed_requested(shard)
    fake_discord.always(event.channel_id, reply)
    with capture_logs() as logs:
        await send(start_gateway, channel, topology, event)
    assert len(fake_discord.posts(event.channel_id)) == 1  # no retry
    assert fake_discord.messages_in(event.channel_id) == []
    assert await queue_depth(channel, topology.shard_queue(shard)) == 0
    [dropped] = [entry for entry in logs if entry["event"] == "embed.dropped"]
    assert dropped["reason"] == reason
    assert dropped["tool_call_id"] == event.tool_call_id
    assert dropped["discord_code"] == reply.body["code"]


async def test_a_rate_limited_embed_is_sent_after_the_wait(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    event = embed_requested(fresh_shard())
    fake_discord.script(
        event.channel_id, Reply.rate_limited(0.6, bucket=f"bucket-{event.channel_id}")
    )
    await send(start_gateway, channel, topology, event)
    first, second = fake_discord.posts(event.channel_id)
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.55
    await assert_delivered_once(fake_discord, channel, topology, event)


async def test_server_errors_are_retried_then_the_embed_is_sent_once(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    event = embed_requested(fresh_shard())
    fake_discord.script(event.channel_id, Reply.server_error(), Reply.server_error())
    await send(start_gateway, channel, topology, event)
    assert [post.status for post in fake_discord.posts(event.channel_id)] == [500, 500, 200]
    await assert_delivered_once(fake_discord, channel, topology, event)


async def test_a_long_outage_requeues_the_delivery_and_it_is_sent_later(
    start_gateway: GatewayFactory,
    fake_discord: FakeDiscord,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    shard = fresh_shard()
    event = embed_requested(shard)
    fake_discord.always(event.channel_id, Reply.server_error())
    short = RetryPolicy(retry_for_s=0.2, first_wait_s=0.05, max_wait_s=0.1)
    with capture_logs() as logs:
        async with start_gateway(shards=(shard,), policy=short) as gateway:
            await publish_embed(channel, topology, event)
            await until(
                lambda: sum(entry["event"] == "embed.send_failed_requeue" for entry in logs) >= 2,
                what="two requeues",
            )
            fake_discord.always(event.channel_id, None)  # Discord is back
            await handled(gateway, event)
    statuses = [post.status for post in fake_discord.posts(event.channel_id)]
    assert statuses[-1] == 200
    assert statuses.count(200) == 1
    await assert_delivered_once(fake_discord, channel, topology, event)


async def test_an_undecodable_message_is_rejected_without_requeue(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
) -> None:
    shard = fresh_shard()
    with capture_logs() as logs:
        async with start_gateway(shards=(shard,)):
            await publish_raw(
                channel,
                topology.events_exchange,
                b'{"event_type": "embed.requested"',
                embed_routing_key(shard),
                message_id="broken",
            )
            await until(
                lambda: _has(logs, "shard.undecodable", message_id="broken"), what="rejection"
            )
    assert await queue_depth(channel, topology.shard_queue(shard)) == 0


def _has(logs: Sequence[Mapping[str, Any]], event: str, **match: object) -> bool:
    return any(
        entry["event"] == event and all(entry.get(key) == value for key, value in match.items())
        for entry in logs
    )


async def send(
    start_gateway: GatewayFactory,
    channel: AbstractChannel,
    topology: Topology,
    event: EmbedRequested,
) -> None:
    """A gateway on the embed's shard, from the embed's publication until it has handled it."""
    async with start_gateway(shards=(event.shard_id,)) as gateway:
        await publish_embed(channel, topology, event)
        await handled(gateway, event)


async def assert_delivered_once(
    fake_discord: FakeDiscord, channel: AbstractChannel, topology: Topology, event: EmbedRequested
) -> None:
    """One message in the embed's channel, and nothing left in its shard's queue."""
    assert len(fake_discord.messages_in(event.channel_id)) == 1
    assert await queue_depth(channel, topology.shard_queue(event.shard_id)) == 0
