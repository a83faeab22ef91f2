"""Driving a consumer under test (the worker, the peer) with real tool calls, and timing it.

Throughput: a separate publisher process publishes N calls as fast as the broker confirms
them; this process counts the `tool_call.completed` results as they arrive, and the
sustained rate is results per second from the first result to the last. Latency: this
process publishes at a fixed rate and takes both timestamps itself, publish to result.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aio_pika.abc import AbstractConnection

from bench.amqp import CallPublisher, OutgoingCall, ResultCounter, Tally, outgoing_call
from bench.cpu import CpuMeter, CpuSplit
from bench.machine import Settled, settle
from bench.processes import Child
from bench.services import BenchServices
from bench.world import CallMaker, call_line, reset_calls

__all__ = [
    "Bench",
    "LatencyFigure",
    "RunFigure",
    "fill_queue",
    "last_json_line",
    "latency_run",
    "percentile",
    "replay_run",
    "throughput_run",
    "warm_up",
]


@dataclass
class Bench:
    """What every phase shares: the services, the main connection, the result counter."""

    services: BenchServices
    connection: AbstractConnection
    counter: ResultCounter
    tool_calls: CallPublisher
    workdir: Path
    window: int = 256
    max_run_seconds: float = 60.0  # a throughput run stops counting after this long
    children: list[Child] = field(default_factory=list)
    _numbers: dict[str, int] = field(default_factory=dict)

    def child(self, name: str, module: str, *args: str, env: dict[str, str]) -> Child:
        """A child process, killed at the end of the bench if it is still running."""
        process = Child(name, module, args, env, self.workdir / f"{name}.log")
        self.children.append(process)
        return process

    async def purge(self, *queues: str) -> int:
        """Drops the messages still in `queues` (the worker queue after a capped run), so that
        the next run starts empty; how many."""
        channel = await self.connection.channel()
        purged = 0
        for name in queues:
            queue = await channel.get_queue(name, ensure=False)
            purged += int((await queue.purge()).message_count or 0)
        await channel.close()
        return purged

    def run_name(self, base: str) -> str:
        """A fresh run name (the counter keys on it), e.g. `worker10k2`."""
        self._numbers[base] = self._numbers.get(base, 0) + 1
        return f"{base}{self._numbers[base]}"


@dataclass(frozen=True, slots=True)
class RunFigure:
    calls: int
    seconds: float
    tps: float
    failures: int
    publish_rate: float | None
    statuses: dict[str, int]
    capped: bool  # stopped after `max_run_seconds` with calls still queued
    cpu: CpuSplit | None = None  # where the CPU went, when the run was metered

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "capped": self.capped,
            "seconds": round(self.seconds, 3),
            "tps": round(self.tps, 1),
            "failures": self.failures,
            "publish_rate": None if self.publish_rate is None else round(self.publish_rate, 1),
            "statuses": self.statuses,
            **({} if self.cpu is None else {"cpu": self.cpu.as_dict()}),
        }


@dataclass(frozen=True, slots=True)
class LatencyFigure:
    calls: int
    offered_rate: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    failures: int
    settled: Settled
    cpu: CpuSplit | None = None  # where the CPU went, publish to last result, when metered

    def as_dict(self) -> dict[str, Any]:
        return {
            "settled": self.settled.as_dict(),
            "calls": self.calls,
            "offered_rate": round(self.offered_rate, 1),
            "p50_ms": round(self.p50_ms, 2),
            "p95_ms": round(self.p95_ms, 2),
            "p99_ms": round(self.p99_ms, 2),
            "max_ms": round(self.max_ms, 2),
            "failures": self.failures,
            **({} if self.cpu is None else {"cpu": self.cpu.as_dict()}),
        }


def last_json_line(text: str) -> dict[str, Any]:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            value: dict[str, Any] = orjson.loads(line)
            return value
    raise RuntimeError(f"no JSON report in:\n{text[-2000:]}")


def _messages(run: str, calls: CallMaker, count: int) -> list[tuple[str, OutgoingCall]]:
    """(tool_call_id, the call ready to publish) of `count` calls of a run."""
    out = []
    for i in range(count):
        call = calls(f"{run}:{i}", i)
        out.append(
            (
                call.tool_call_id,
                outgoing_call(
                    call.model_dump_json().encode(),
                    message_id=str(call.event_id),
                    correlation_id=call.tool_call_id,
                    tool_name=call.tool_name,
                ),
            )
        )
    return out


async def warm_up(bench: Bench, calls: CallMaker, count: int, timeout: float) -> None:
    """`count` calls published from here, waited for: connections, caches and plans warm."""
    if count <= 0:
        return
    run = bench.run_name("warm")
    tally = bench.counter.expect(run, count)
    messages = [message for _, message in _messages(run, calls, count)]
    await bench.tool_calls.publish_window(messages, window=bench.window)
    if not await tally.wait(timeout):
        raise RuntimeError(f"warm-up: {tally.count} of {count} results within {timeout}s")
    bench.counter.forget(run)


async def throughput_run(
    bench: Bench,
    base: str,
    make_calls: CallMaker,
    *,
    calls: int,
    warmup: int,
    timeout: float,
    consumer: Child | None = None,
    prepublished: bool = False,
    database_url: str | None = None,
    meter: CpuMeter | None = None,
) -> RunFigure:
    """Sustained answered calls per second of whatever consumes the worker queue now.

    The publisher is a separate process. With `prepublished`, every call is in the queue
    before `consumer` (not yet started) is started; otherwise the publisher runs while the
    consumer (already running) answers. `database_url`: the consumer's database, when it is
    not the bench's own. `meter`: samples the CPU from the first result seen to the last, so
    that the split covers the sustained part of the run only.
    """
    await reset_calls(database_url or bench.services.database_url)
    if not prepublished:
        await warm_up(bench, make_calls, warmup, timeout)
    run = bench.run_name(base)
    tally = bench.counter.expect(run, calls)
    publisher: Child | None = None
    publish_rate: float | None = None
    if prepublished:
        assert consumer is not None, "a prepublished run starts its consumer"
        publish_rate = await fill_queue(bench, run, make_calls, calls, timeout)
        consumer.start()
    else:
        publisher = _publisher(bench, run, make_calls, calls).start()
    capped, cpu = await _counted(bench, run, tally, timeout=timeout, consumer=consumer, meter=meter)
    if capped:
        # Enough for a sustained rate; the rest of the calls would only make the bench long.
        if publisher is not None:
            publisher.kill()
        await bench.purge(bench.services.topology.worker_queue)
        await _quiet(tally)
    elif publisher is not None:
        publish_rate = await _publisher_done(publisher, timeout)
    return _figure_of(bench, run, tally, capped=capped, publish_rate=publish_rate, cpu=cpu)


async def replay_run(
    bench: Bench,
    base: str,
    make_calls: CallMaker,
    *,
    letters: int,
    timeout: float,
    consumer: Child,
) -> RunFigure:
    """Answered calls per second of `consumer` (running) while `ltm dlq replay --all --rate 0`
    sends `letters` dead-lettered calls back to it, from the first result to the last.

    The letters are dead-lettered as the worker does it, by a separate publisher, before the
    replay starts; the dead-letter queue is emptied first, and after a capped run.
    """
    topology = bench.services.topology
    await reset_calls(bench.services.database_url)
    await bench.purge(topology.dead_letter_queue)
    run = bench.run_name(base)
    tally = bench.counter.expect(run, letters)
    publisher = _publisher(
        bench, run, make_calls, letters, dead_letter_reason="TimeoutError: bench"
    )
    await _publisher_done(publisher.start(), timeout)
    replay = bench.child(
        f"{run}-replay",
        "ltm",
        "dlq",
        "replay",
        "--all",
        "--reason",
        "bench",
        "--rate",
        "0",
        "--operator",
        "bench",
        env=bench.services.env(),
    ).start()
    capped, _ = await _counted(bench, run, tally, timeout=timeout, consumer=consumer, meter=None)
    if capped:
        replay.kill()
        await bench.purge(topology.worker_queue, topology.dead_letter_queue)
        await _quiet(tally)
    else:
        code = await replay.wait_exit(timeout)
        if code != 0:
            raise RuntimeError(f"ltm dlq replay failed:\n{replay.tail()}")
    return _figure_of(bench, run, tally, capped=capped)


async def fill_queue(
    bench: Bench, run: str, make_calls: CallMaker, calls: int, timeout: float
) -> float:
    """The run's `calls` published into the worker queue by a separate process, all confirmed,
    before anything consumes them (no consumer runs yet): the publisher's rate, calls/s."""
    return await _publisher_done(_publisher(bench, run, make_calls, calls).start(), timeout)


async def _publisher_done(publisher: Child, timeout: float) -> float:
    """Waits for `publisher` to publish all its calls: its rate, calls/s."""
    code = await publisher.wait_exit(timeout)
    if code != 0:
        raise RuntimeError(f"{publisher.name} failed:\n{publisher.tail()}")
    return float(last_json_line(publisher.output())["rate"])


def _figure_of(
    bench: Bench,
    run: str,
    tally: Tally,
    *,
    capped: bool,
    publish_rate: float | None = None,
    cpu: CpuSplit | None = None,
) -> RunFigure:
    """The run's figure from its tally, first result to last; the counter forgets the run."""
    bench.counter.forget(run)
    assert tally.first is not None and tally.last is not None
    return RunFigure(
        calls=tally.count,
        seconds=tally.last - tally.first,
        tps=tally.rate(),
        failures=tally.failures(),
        publish_rate=publish_rate,
        statuses=dict(tally.statuses),
        capped=capped,
        cpu=cpu,
    )


def _publisher(
    bench: Bench,
    run: str,
    make_calls: CallMaker,
    calls: int,
    *,
    dead_letter_reason: str | None = None,
) -> Child:
    """The separate process that publishes the run's calls, written to a file beforehand;
    with `dead_letter_reason`, as dead letters (`bench.publisher --dead-letters`)."""
    path = bench.workdir / f"{run}.jsonl"
    path.write_bytes(b"\n".join(call_line(make_calls(f"{run}:{i}", i)) for i in range(calls)))
    dead_letters = () if dead_letter_reason is None else ("--dead-letters", dead_letter_reason)
    return bench.child(
        f"{run}-publisher",
        "bench.publisher",
        "--amqp-url",
        bench.services.amqp_url,
        "--prefix",
        bench.services.amqp_prefix,
        "--file",
        str(path),
        "--window",
        str(bench.window),
        *dead_letters,
        env=bench.services.env(),
    )


async def _counted(
    bench: Bench,
    run: str,
    tally: Tally,
    *,
    timeout: float,
    consumer: Child | None,
    meter: CpuMeter | None,
) -> tuple[bool, CpuSplit | None]:
    """Until every result of the run came, or `max_run_seconds` after the first (capped);
    whether it was capped, and the CPU split from the first result seen to the end."""
    deadline = time.monotonic() + timeout
    metering = False
    while not tally.done.is_set():
        if consumer is not None:
            consumer.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{run}: {tally.count} of {tally.expected} results in {timeout}s")
        if meter is not None and not metering and tally.first is not None:
            meter.begin(tally.count)
            metering = True
        if tally.first is not None and time.perf_counter() - tally.first > bench.max_run_seconds:
            break
        # Woken by the last result at once: a metered run ends on it, not up to 0.1 s later.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tally.done.wait(), 0.1)
    cpu = meter.end(tally.count) if meter is not None and metering else None
    return not tally.done.is_set(), cpu


async def _quiet(tally: Tally, *, seconds: float = 1.0, limit: float = 15.0) -> None:
    """Until no result of the run came for `seconds`: the calls in flight are answered."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        last = tally.last
        await asyncio.sleep(seconds)
        if tally.last == last:
            return


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


async def latency_run(
    bench: Bench,
    calls: CallMaker,
    *,
    rate: float,
    seconds: float,
    warmup: int,
    timeout: float,
    meter: CpuMeter | None = None,
) -> LatencyFigure:
    """Publish-to-result latency at a fixed offered rate, both timestamps taken here.
    `meter`: samples the CPU from the first publish to the last result, every call of the
    run counted (at a fixed rate there is no ramp to leave out)."""
    await reset_calls(bench.services.database_url)
    await warm_up(bench, calls, warmup, timeout)
    # A rate is measured on a quiet machine, not on the previous phase's aftermath.
    settled = await settle()
    run = bench.run_name("latency")
    count = max(1, round(rate * seconds))
    prepared = _messages(run, calls, count)
    tally = bench.counter.expect(run, count)
    sent: dict[str, float] = {}
    tasks: list[asyncio.Task[Any]] = []
    if meter is not None:
        meter.begin(0)
    started = time.perf_counter()
    for i, (tool_call_id, call) in enumerate(prepared):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sent[tool_call_id] = time.perf_counter()
        tasks.append(asyncio.create_task(bench.tool_calls.publish(call)))
    last_sent = time.perf_counter()
    await asyncio.gather(*tasks)
    if not await tally.wait(timeout):
        raise RuntimeError(f"latency: {tally.count} of {count} results within {timeout}s")
    cpu = meter.end(tally.count) if meter is not None else None
    bench.counter.forget(run)
    latencies = sorted((tally.received[key] - sent[key]) * 1000 for key in tally.received)
    return LatencyFigure(
        calls=len(latencies),
        offered_rate=(count - 1) / (last_sent - started) if count > 1 else 0.0,
        p50_ms=percentile(latencies, 50),
        p95_ms=percentile(latencies, 95),
        p99_ms=percentile(latencies, 99),
        max_ms=latencies[-1],
        failures=tally.failures(),
        settled=settled,
        cpu=cpu,
    )
