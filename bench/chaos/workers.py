"""The workers of a chaos run: real `ltm worker` processes, each started again whenever it
dies, some of them with a failpoint armed that kills them between commit and ack."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from harness.processes import LtmProcess
from harness.services import TestServices

__all__ = ["WorkerSlot"]


class WorkerSlot:
    """One worker's place: a real `ltm worker` (or, with other `args`, another `ltm`
    process, such as a gateway), started again whenever it dies."""

    def __init__(
        self,
        name: str,
        services: TestServices,
        env: dict[str, str],
        logs: Path,
        *,
        args: tuple[str, ...] = ("worker",),
    ) -> None:
        self.name = name
        self.args = args
        self.services = services
        self.env = env
        self.logs = logs
        self.incarnations = 0
        self.failpoint_deaths = 0
        self.exits: list[int] = []
        self.process: LtmProcess | None = None
        self.next_failpoint: str | None = None
        self._killed = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"chaos-{self.name}")

    async def _run(self) -> None:
        while not self._stopping:
            env = dict(self.env)
            failpoint, self.next_failpoint = self.next_failpoint, None
            if failpoint is not None:
                env["LTM_FAILPOINTS"] = failpoint
            self.incarnations += 1
            log = self.logs / f"{self.name}-{self.incarnations}.log"
            self._killed = False
            with LtmProcess(self.services, self.args, log, env=env) as process:
                self.process = process
                assert process.process is not None
                code = await asyncio.to_thread(process.process.wait)
            self.process = None
            self.exits.append(code)
            if code == -9 and failpoint is not None and not self._killed:
                self.failpoint_deaths += 1

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.process
            if process is not None:
                with contextlib.suppress(AssertionError):
                    await asyncio.to_thread(process.wait_ready, 5.0)
                    return
            await asyncio.sleep(0.1)
        raise AssertionError(f"worker {self.name} not ready within {timeout}s")

    @property
    def alive(self) -> bool:
        process = self.process
        return (
            process is not None and process.process is not None and process.process.poll() is None
        )

    def kill(self, *, then_failpoint: str | None = None) -> bool:
        process = self.process
        if process is None or process.process is None or process.process.poll() is not None:
            return False
        self.next_failpoint = then_failpoint
        self._killed = True
        process.kill()
        return True

    async def stop(self) -> None:
        self._stopping = True
        process = self.process
        if process is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(process.terminate, 30.0)
        if self._task is not None:
            await self._task
