"""`make run`: the demo data, one worker and one console-mode gateway, until Ctrl-C.

Both run as `ltm` child processes, as they would in production; Ctrl-C or SIGTERM stops
both gracefully (each drains what it has in flight).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

from infra.settings import Settings

__all__ = ["Supervisor", "main"]

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.sql"
_POLL_S = 0.2


def load_demo(settings: Settings) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        connection.execute(DEMO.read_text())


class Supervisor:
    """Child processes that stop together: `stop` ends them all, and so does one failing."""

    def __init__(self, children: Sequence[subprocess.Popen[bytes]]) -> None:
        self.children = list(children)

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def wait(self) -> int:
        """Until every child has exited; their worst exit code."""
        while any(child.poll() is None for child in self.children):
            time.sleep(_POLL_S)
            # One child gone on its own means the demo is broken: stop the other too.
            if any(child.poll() not in (None, 0) for child in self.children):
                self.stop()
        codes = [child.wait() for child in self.children]
        return max(codes, key=abs)


def main() -> int:
    settings = Settings()
    load_demo(settings)
    ltm = [sys.executable, "-m", "worker.cli"]
    supervisor = Supervisor(
        [
            subprocess.Popen([*ltm, "worker"]),
            subprocess.Popen([*ltm, "gateway", "--shards", "0", "--shard-count", "1"]),
        ]
    )
    print(
        "\nworker and console gateway running; in another terminal try:\n"
        "  .venv/bin/ltm call --json examples/first_call.json\n"
        "Ctrl-C stops both.\n",
        file=sys.stderr,
    )
    signal.signal(signal.SIGINT, lambda _signum, _frame: supervisor.stop())
    signal.signal(signal.SIGTERM, lambda _signum, _frame: supervisor.stop())
    return supervisor.wait()


if __name__ == "__main__":
    sys.exit(main())
