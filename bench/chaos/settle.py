"""Waiting, after the faults, until the run settled: every call and every data request has its
recorded answer (the dead-lettered ones replayed), the outbox is published, the shard queues
are drained and every successful call's embed reached the fake Discord."""

from __future__ import annotations

import contextlib
import io
import re
import uuid
from collections.abc import Callable, Sequence

import psycopg

from bench.chaos.broker import HarnessBroker
from bench.chaos.checks import answered, posts_by_nonce
from bench.chaos.plan import PlannedCall
from bench.chaos.report import ChaosReport
from contracts import Topology
from gateway import discord_nonce
from harness.fake_discord import FakeDiscord
from harness.waiting import eventually
from infra.settings import Settings
from ltm.commands.dlq import replay_dead_letters
from operators.dead_letters import inspect_dead_letters

__all__ = ["settle_answers", "settle_embeds"]


class _DeadLetters:
    """The dead letters seen so far (by event id) and why, replayed once the work queue is
    idle (a call answered `db_error` waits there)."""

    def __init__(self, settings: Settings, report: ChaosReport) -> None:
        self.settings = settings
        self.report = report
        self.seen: set[str] = set()

    async def replay(self) -> None:
        entries, _ = await inspect_dead_letters(self.settings)
        for entry in entries:
            key = entry.event_id or str(uuid.uuid4())
            if key not in self.seen:
                self.seen.add(key)
                reason = re.sub(r"\(.*", "", entry.reason).strip()
                self.report.dead_letter_reasons[f"{entry.source}: {reason[:60]}"] += 1
        out, err = io.StringIO(), io.StringIO()
        await replay_dead_letters(
            self.settings,
            None,
            reason="chaos run: settle the dead letters",
            rate=0,
            out=out,
            err=err,
        )
        replayed = re.search(r"replayed (\d+) of", out.getvalue())
        self.report.replayed += int(replayed.group(1)) if replayed else 0


async def settle_answers(
    harness: HarnessBroker,
    *,
    settings: Settings,
    topology: Topology,
    planned: Sequence[PlannedCall],
    requests: Sequence[str],
    report: ChaosReport,
    timeout: float,
) -> None:
    """Until every call and every data request (by `request_id`) has its recorded answer and
    no dead letter is left, replaying them meanwhile; at the deadline the checks count what
    is still missing.

    A data request is waited for on its own: one still in a worker when the last call is
    answered may yet be dead-lettered (the database outage outlasted its budget), and only
    its replay does it."""
    dead = _DeadLetters(settings, report)

    async def settled() -> bool:
        ready = await harness.depth(topology.worker_queue)
        dead_letters = await harness.depth(topology.dead_letter_queue)
        if ready == 0 and dead_letters:
            await dead.replay()
            return False
        return (
            dead_letters == 0
            and all(answered(harness.collected, call) for call in planned)
            and await _requests_answered(settings.database_url, requests)
        )

    # At the deadline the checks count what is still unanswered as lost.
    with contextlib.suppress(AssertionError):
        await eventually(settled, timeout=timeout, interval=0.5, what="every answer")
    report.dead_lettered = len(dead.seen)


async def settle_embeds(
    harness: HarnessBroker,
    *,
    idle: Callable[[], bool],
    fake: FakeDiscord,
    database_url: str,
    topology: Topology,
    planned: Sequence[PlannedCall],
    shards: int,
    timeout: float,
) -> None:
    """Until the outbox holds nothing unpublished, the shard queues are empty and the gateways
    `idle` (none posting), and each successful call's embed reached the fake Discord."""
    ids = [call.tool_call_id for call in planned]

    async def quiet() -> bool:
        if not await _outbox_published(database_url, ids):
            return False
        for shard in range(shards):
            if await harness.depth(topology.shard_queue(shard)) != 0:
                return False
        if not idle():
            return False
        posted = posts_by_nonce(fake)
        for call in planned:
            results = harness.collected.results.get(call.tool_call_id, [])
            if any(r.success for r in results):
                embeds = harness.collected.embeds.get(call.tool_call_id, {})
                if not any(posted.get(discord_nonce(e)) for e in embeds):
                    return False
        return True

    # At the deadline the checks say which embed is missing.
    with contextlib.suppress(AssertionError):
        await eventually(quiet, timeout=timeout, interval=0.5, what="the embeds posted")


async def _requests_answered(database_url: str, request_ids: Sequence[str]) -> bool:
    """Whether each data request has its row (done or refused: the checks tell which)."""
    if not request_ids:
        return True
    try:
        async with await psycopg.AsyncConnection.connect(database_url) as connection:
            row = await (
                await connection.execute(
                    "SELECT count(*) FROM data_requests WHERE request_id = ANY(%s)",
                    (list(request_ids),),
                )
            ).fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == len(request_ids)


async def _outbox_published(database_url: str, ids: list[str]) -> bool:
    try:
        async with await psycopg.AsyncConnection.connect(database_url) as connection:
            row = await (
                await connection.execute(
                    "SELECT count(*) FROM outbox WHERE published_at IS NULL"
                    " AND correlation_id = ANY(%s)",
                    (ids,),
                )
            ).fetchone()
    except psycopg.Error:
        return False
    return row is not None and not row[0]
