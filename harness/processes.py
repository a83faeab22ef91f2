"""Real `ltm` processes for end-to-end tests: started, waited on until ready, stopped or killed."""

from __future__ import annotations

import asyncio
import contextlib
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

from prometheus_client.parser import text_string_to_metric_families

from harness.services import TestServices
from harness.waiting import eventually

__all__ = ["LtmProcess", "calls_answered", "free_port"]


def calls_answered(metrics: str) -> int:
    """A worker's calls answered, of every tool, status and replay, in its `/metrics` page:
    its `ltm_tool_calls_total` summed over the labels."""
    return round(
        sum(
            sample.value
            for family in text_string_to_metric_families(metrics)
            for sample in family.samples
            if sample.name == "ltm_tool_calls_total"
        )
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LtmProcess:
    """`python -m ltm ARGS` with the test run's settings; output goes to a log file.

    `piped`: the output goes into a pipe instead, as in `ltm worker 2>&1 | tee log`, and the
    process leads a process group of its own, as a shell's pipeline does: `close_reader` is
    the end of the pipeline going away, `interrupt` a Ctrl-C. Read what it printed with
    `output` now and then: a pipe left full stops the writer.
    `metrics_port` is where its `/metrics`, `/healthz` and `/readyz` answer.
    """

    services: TestServices
    args: tuple[str, ...]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    metrics_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    module: str = "ltm"  # or another entry point, e.g. `infra.run_local` (no ARGS)
    piped: bool = False

    def start(self) -> LtmProcess:
        # One process each: a worker reads the first, a gateway the second.
        port = str(self.metrics_port)
        ports = {"LTM_METRICS_PORT": port, "LTM_GATEWAY_METRICS_PORT": port}
        env = self.services.env(**{**ports, **self.env})
        self._log = self.log_path.open("ab")
        self._reader: int | None = None
        self._printed = bytearray()
        command = [sys.executable, "-m", self.module, *self.args]
        cwd = Path(__file__).resolve().parents[1]
        if not self.piped:
            self.process = subprocess.Popen(
                command, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd
            )
            return self
        self._reader, writer = os.pipe()
        try:
            self.process = subprocess.Popen(
                command, env=env, stdout=writer, stderr=writer, cwd=cwd, start_new_session=True
            )
        finally:
            os.close(writer)
        os.set_blocking(self._reader, False)
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

    async def calls_answered(self) -> int:
        """A worker's calls answered so far (`calls_answered` of its `/metrics` page)."""
        return calls_answered(await self.metrics())

    def _metrics_now(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())

    def output(self) -> str:
        """What it printed so far (piped: what the pipe held until its reader was closed)."""
        if self.piped:
            self._read_pipe()
            return self._printed.decode(errors="replace")
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _read_pipe(self) -> None:
        while self._reader is not None:
            try:
                chunk = os.read(self._reader, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self._printed += chunk

    def close_reader(self) -> None:
        """The pipe's reader goes away: from now on every write of the process fails (EPIPE)."""
        self._read_pipe()
        if self._reader is not None:
            os.close(self._reader)
            self._reader = None

    def interrupt(self) -> None:
        """Ctrl-C in the terminal: SIGINT to every process of the pipeline's group."""
        assert self.piped, "only a piped process leads a process group of its own"
        os.killpg(self.pid, signal.SIGINT)

    async def logged(self, text: str) -> bool:
        """Whether the output holds `text` yet: a probe for `eventually`."""
        return text in self.output()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no drain, as a crash would (piped: the whole process group)."""
        if self.process is None:
            return
        if self.piped:
            with contextlib.suppress(ProcessLookupError):  # the group is gone already
                os.killpg(self.process.pid, signal.SIGKILL)
        elif self.process.poll() is None:
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
        self.close_reader()
        self._log.close()
