"""Child processes of the bench: started with a log file, waited on, stopped, measured."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from harness.processes import free_port

__all__ = ["REPO_ROOT", "Child", "free_port"]

REPO_ROOT: Final = Path(__file__).resolve().parents[1]


@dataclass
class Child:
    """`python -m MODULE ARGS` from the repository root; stdout and stderr go to `log_path`."""

    name: str
    module: str
    args: tuple[str, ...]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> Child:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was not started"
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if not self.running():
            raise RuntimeError(f"{self.name} exited early:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_http_ok(self, url: str, timeout: float = 30.0) -> None:
        """Until `url` answers 200 (the worker's `/readyz`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if await asyncio.to_thread(_answers_ok, url):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready within {timeout}s:\n{self.tail()}")

    async def wait_file(self, path: Path, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if await asyncio.to_thread(path.exists):
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready within {timeout}s:\n{self.tail()}")

    async def wait_exit(self, timeout: float) -> int:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{self.name} still running after {timeout}s:\n{self.tail()}")

    def peak_rss_mb(self) -> float:
        """VmHWM: the peak resident set size of the live process, in MiB."""
        status = Path(f"/proc/{self.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmHWM in /proc/{self.pid}/status")

    async def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL if it is still there after `timeout`; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(RuntimeError):
                return await self.wait_exit(timeout)
            self.kill()
        return self.process.poll()

    def kill(self) -> None:
        """SIGKILL, for cleanup after a failure."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status) == 200
    except OSError:
        return False
