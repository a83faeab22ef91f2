"""A stop never depends on the output: `ltm worker`, `ltm gateway` and `make run`'s processes
stop on a signal, within the grace, even when the pipe they write to has lost its reader
(`| tee` ended by the same Ctrl-C, `| head -n 1` done with its line)."""

from __future__ import annotations

import asyncio
import functools
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from harness.broker import own_topology
from harness.processes import LtmProcess
from harness.services import TestServices, own_database
from harness.waiting import eventually
from infra.settings import Settings

GRACE_S = 10  # LTM_SHUTDOWN_GRACE_S of these processes: idle, they need far less
SHARD = 9_100


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[dict[str, str]]:
    """A topology of the test's own: no other test's calls or results reach its processes."""
    async with own_topology(settings, "stop") as (own, topology, channel):
        yield {"LTM_AMQP_PREFIX": own.amqp_prefix, "LTM_SHUTDOWN_GRACE_S": str(GRACE_S)}
        for shard in (0, SHARD):  # declared by the gateways of these tests
            await channel.queue_delete(topology.shard_queue(shard))


@pytest.fixture
def demo_database(services: TestServices) -> Iterator[str]:
    # `make run` loads the demo data, whose fixed ids stay out of the shared database.
    with own_database(services, "stop") as url:
        yield url


async def _exit_code(stop: Callable[[float], int], what: str) -> int:
    """`stop(GRACE_S)` in a thread: the exit code, or a failure if it is still running."""
    try:
        return await asyncio.to_thread(stop, GRACE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} still running {GRACE_S} s after the stop")


async def test_worker_stops_on_sigterm_with_its_output_pipe_closed(
    services: TestServices, env: dict[str, str], tmp_path: Path
) -> None:
    with LtmProcess(services, ("worker",), tmp_path / "unused", env=env, piped=True) as worker:
        await worker.wait_ready_async()
        worker.close_reader()

        assert await _exit_code(worker.terminate, "ltm worker") == 0


async def test_gateway_stops_on_sigterm_with_its_output_pipe_closed(
    services: TestServices, env: dict[str, str], tmp_path: Path
) -> None:
    args = ("gateway", "--shards", str(SHARD), "--shard-count", str(SHARD + 1))
    with LtmProcess(services, args, tmp_path / "unused", env=env, piped=True) as gateway:
        await eventually(
            functools.partial(gateway.logged, "gateway.started"), what="the gateway started"
        )
        gateway.close_reader()

        assert await _exit_code(gateway.terminate, "ltm gateway") == 0


@pytest.mark.parametrize("reader_gone", [True, False], ids=["pipe closed", "pipe open"])
async def test_make_run_stops_on_one_ctrl_c(
    services: TestServices,
    env: dict[str, str],
    demo_database: str,
    tmp_path: Path,
    reader_gone: bool,
) -> None:
    with LtmProcess(
        services,
        (),
        tmp_path / "unused",
        # The worker answers on the process's metrics port; the gateway beside it needs another.
        env={**env, "LTM_DATABASE_URL": demo_database, "LTM_GATEWAY_METRICS_PORT": "0"},
        module="infra.run_local",
        piped=True,
    ) as run:
        await run.wait_ready_async()  # the worker's /readyz
        await eventually(functools.partial(run.logged, "gateway.started"), what="the gateway")
        if reader_gone:
            run.close_reader()

        run.interrupt()  # Ctrl-C: SIGINT to the supervisor, the worker and the gateway
        # 0: each stopped cleanly, none died of a SIGTERM that came after it had stopped.
        assert await _exit_code(run.wait_exit, "make run") == 0, run.output()
