"""A short chaos run (`bench/chaos/`): a few hundred random tool calls while real workers are
SIGKILLed and restarted (some with a failpoint between commit and ack), the broker closes every
connection of the test run's virtual host, the workers' path to the broker stalls until they
give it up, and the test database goes away for a few seconds.

The database fault here is an outage of this run's database only (connections refused and the
open ones ended); `make chaos` restarts a PostgreSQL instance of its own instead, which takes
the few seconds of an initdb the suite need not spend.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aio_pika
import pytest

from bench.chaos.runner import run_chaos
from contracts import (
    EmbedPayload,
    EmbedRequested,
    MemoryStatus,
    Topology,
    amqp_properties,
    embed_routing_key,
    encode_event,
)
from gateway import RetryPolicy
from harness.broker import publish_raw
from harness.fake_discord import FakeDiscord, Reply
from harness.gateway import running_gateway
from harness.services import TestServices, rabbitmqctl
from harness.snowflake import snowflake
from harness.waiting import eventually
from infra.settings import Settings

CALLS = 300
KILLS = 4
CLOSURES = 2
STALLS = 1


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_nothing_lost_nothing_twice_under_kills_closures_and_a_database_outage(
    services: TestServices, tmp_path: Path
) -> None:
    if services.vhost is None:
        pytest.fail("the chaos run needs rabbitmqctl and a virtual host of its own")
    seed = random.randrange(2**32)

    report = await run_chaos(
        services,
        calls=CALLS,
        kills=KILLS,
        broker_closures=CLOSURES,
        stalls=STALLS,
        db_fault="outage",
        publish_s=12.0,
        seed=seed,
        log_dir=tmp_path,
        settle_timeout_s=60.0,
        outage_s=3.0,
    )

    summary = f"seed {seed}, logs in {tmp_path}\n{report.table()}\n" + "\n".join(report.problems())
    print(summary)
    assert report.sent == CALLS, summary
    assert report.answered == CALLS and report.lost == 0, summary
    assert report.writes_applied_twice == 0 and report.embeds_posted_twice == 0, summary
    assert report.chain_errors == [], summary
    assert report.model_errors == [], summary
    assert report.status_errors == [], summary
    assert report.embed_errors == [] and report.embeds_missing == 0, summary
    assert report.problems() == [], summary
    # The users exported, then erased, while the faults struck: done, and nothing of them left.
    assert (report.exports, report.erasures) == (3, 3), summary
    assert report.erasure_errors == [], summary
    # The faults happened, and the calls were of every kind.
    assert report.kills == KILLS, summary
    assert report.broker_closures == CLOSURES, summary
    assert report.stalls == STALLS, summary
    assert report.db_faults == 1, summary
    assert report.duplicate_publishes > 0, summary
    assert report.replayed >= report.dead_lettered, summary
    for status in (
        MemoryStatus.UPDATED,
        MemoryStatus.DELETED,
        MemoryStatus.NOT_FOUND,
        MemoryStatus.INVALID_ARGS,
        MemoryStatus.SAVED,
    ):
        assert report.statuses[status.value] > 0, summary
    assert report.scope_errors == [] and report.created > 0, summary
    assert report.embeds_posted == report.revisions, summary


async def test_an_embed_in_flight_when_the_broker_drops_the_gateway_is_posted_once(
    services: TestServices, settings: Settings
) -> None:
    """The broker closes the gateway's connection while Discord is answering a post: the
    delivery comes back after the reconnect, and must not be posted a second time.

    (The chaos run meets this by chance; here it is made to happen.)
    """
    if services.vhost is None:
        pytest.fail("this test needs rabbitmqctl and a virtual host of its own")
    vhost = services.vhost
    own = settings.model_copy(
        update={"amqp_prefix": f"{settings.amqp_prefix}-chaosgw{uuid.uuid4().hex[:6]}"}
    )
    topology = Topology(own.amqp_prefix)
    async with FakeDiscord() as fake:
        async with running_gateway(
            own,
            fake,
            shards=(0,),
            shard_count=1,
            policy=RetryPolicy(retry_for_s=5.0),
            reconnect_interval_s=0.5,
        ):
            slow, after = _embed(), _embed()
            # Discord takes a while to answer the first post in this channel.
            fake.script(slow.channel_id, Reply.slow_success(1.5))
            await _publish(own, topology, slow)
            await eventually(
                _probe(lambda: slow.channel_id in fake.arrived),
                what="the post on its way to Discord",
            )
            await asyncio.to_thread(
                rabbitmqctl, "close_all_connections", "-p", vhost, "chaos: mid-post"
            )
            # After the reconnect, a second embed goes through: the gateway is back.
            await _publish(own, topology, after)
            await eventually(
                _probe(lambda: bool(fake.messages_in(after.channel_id))),
                timeout=30,
                what="the gateway consuming again",
            )
            await eventually(
                _probe(lambda: _unacknowledged_gone(vhost, topology.shard_queue(0))),
                timeout=30,
                what="the first embed's delivery settled",
            )
        posts = [arrived for arrived in fake.arrived if arrived == slow.channel_id]
        assert len(posts) == 1, f"the embed was posted {len(posts)} times"
        assert len(fake.messages_in(slow.channel_id)) == 1


def _embed() -> EmbedRequested:
    return EmbedRequested(
        tool_call_id=f"chaos-gw-{uuid.uuid4()}",
        guild_id=snowflake(),
        channel_id=snowflake(),
        shard_id=0,
        kind="memory_updated",
        embed=EmbedPayload(title="Tomori remembered something", description="x", color=0x25D4DA),
    )


async def _publish(settings: Settings, topology: Topology, event: EmbedRequested) -> None:
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await publish_raw(
            channel,
            topology.events_exchange,
            encode_event(event),
            embed_routing_key(event.shard_id),
            **amqp_properties(event),
            expiration=900,
        )


def _probe(condition: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return condition()

    return probe


def _unacknowledged_gone(vhost: str, queue: str) -> bool:
    """No message of the queue, ready or delivered and not yet acknowledged."""
    listed = rabbitmqctl("list_queues", "-p", vhost, "name", "messages").stdout
    counts = dict(line.split("\t") for line in listed.splitlines() if "\t" in line)
    return counts.get(queue) == "0"
