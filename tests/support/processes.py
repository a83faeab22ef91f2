"""Real `ltm` processes for end-to-end tests: started, waited on until ready, stopped or killed."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.support.services import TestServices
from tests.support.waiting import eventually

__all__ = ["LtmProcess", "free_port"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LtmProcess:
    """`python -m worker.cli ARGS` with the test run's settings; output goes to a log file.

    `metrics_port` is where its `/metrics`, `/healthz` and `/readyz` answer.
    """

    services: TestServices
    args: tuple[str, ...]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> LtmProcess:
        # One process each: a worker reads the first, a gateway the second.
        port = str(self.metrics_port)
        env = self.services.env(LTM_METRICS_PORT=port, LTM_GATEWAY_METRICS_PORT=port, **self.env)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "worker.cli", *self.args],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[2],
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def wait_ready(self, timeout: float = 30.0) -> LtmProcess:
        """Until `/readyz` answers 200 (the worker is consuming).

        Blocks the calling thread: an async test awaits `wait_ready_async` instead, so that the
        consumers and taps sharing its event loop keep running meanwhile.
        """
        deadline = time.monotonic() + timeout
        try:
            while not self._ready_now():
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.args} not ready within {timeout}s")
                time.sleep(0.05)
        except AssertionError as error:
            raise AssertionError(f"{error}:\n{self.output()}") from None
        return self

    async def wait_ready_async(self, timeout: float = 30.0) -> LtmProcess:
        """`wait_ready` for async tests: each probe runs in a thread, the loop goes on."""

        async def ready() -> bool:
            return await asyncio.to_thread(self._ready_now)

        try:
            await eventually(ready, timeout=timeout, what=f"{self.args} ready")
        except AssertionError as error:
            raise AssertionError(f"{error}:\n{self.output()}") from None
        return self

    def _ready_now(self) -> bool:
        """One probe of `/readyz`; fails at once if the process has exited."""
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            raise AssertionError(f"{self.args} exited early with code {code}")
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    async def metrics(self) -> str:
        """The `/metrics` page, fetched in a thread so that the test's consumers keep running."""
        return await asyncio.to_thread(self._metrics_now)

    def _metrics_now(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def logged(self, text: str) -> bool:
        """Whether the output holds `text` yet: a probe for `eventually`."""
        return text in self.output()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no drain, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def __enter__(self) -> LtmProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()
        self._log.close()
