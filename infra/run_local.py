"""`make run`: the demo data, one worker and one console-mode gateway, until Ctrl-C.

Both run as `ltm` child processes, as they would in production; Ctrl-C or SIGTERM stops
both gracefully (each drains what it has in flight), and kills whichever is still running
after `LTM_SHUTDOWN_GRACE_S` and a margin.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import psycopg

from infra.observability.logs import configure_logging, get_logger
from infra.settings import Settings

__all__ = ["Supervisor", "main"]

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.sql"
_POLL_S = 0.2
# After a child's own grace for its calls in flight: time to close its connections and exit.
_EXIT_MARGIN_S: Final = 5.0

log = get_logger("ltm.run_local")


def load_demo(settings: Settings) -> None:
    """Puts the demo server back as the README shows it (examples/demo.sql says what it resets)."""
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        connection.execute(DEMO.read_text())


class Supervisor:
    """Child processes that stop together: on `stop`, or when one of them fails on its own.

    Each child still running gets one SIGTERM, and SIGKILL if it is still running `grace_s`
    later: a child that cannot stop (or will not) never keeps `make run` from ending.
    """

    def __init__(self, children: Sequence[subprocess.Popen[bytes]], *, grace_s: float) -> None:
        self.children = list(children)
        self.grace_s = grace_s
        self._kill_at: float | None = None  # set when the SIGTERMs went out
        self._killed = False

    def stop(self) -> None:
        """One SIGTERM to each child still running, the first time only.

        Called from the signal handler, so that the SIGTERM follows a Ctrl-C at once: the
        children got the SIGINT too, and one that had already stopped on it and dropped its
        handlers would die of a SIGTERM sent later by the polling loop.
        """
        if self._kill_at is not None:
            return
        self._kill_at = time.monotonic() + self.grace_s
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def wait(self) -> int:
        """Until every child has exited; their worst exit code."""
        while any(child.poll() is None for child in self.children):
            # One child gone on its own with an error means the demo is broken: stop the rest.
            if any(child.poll() not in (None, 0) for child in self.children):
                self.stop()
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                self._kill()
            time.sleep(_POLL_S)
        codes = [child.wait() for child in self.children]
        return max(codes, key=abs)

    def _kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        for child in self.children:
            if child.poll() is None:
                child.kill()  # first: the log line after it may go nowhere
                log.warning(
                    "run_local.killed_after_grace",
                    pid=child.pid,
                    args=child.args,
                    grace_s=self.grace_s,
                )


def main() -> int:
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    load_demo(settings)
    print(
        "demo data reset: memories ID:24 and ID:25 as examples/demo.sql has them", file=sys.stderr
    )
    ltm = [sys.executable, "-m", "ltm"]
    supervisor = Supervisor(
        [
            subprocess.Popen([*ltm, "worker"]),
            subprocess.Popen([*ltm, "gateway", "--shards", "0", "--shard-count", "1"]),
        ],
        grace_s=settings.shutdown_grace_s + _EXIT_MARGIN_S,
    )
    print(
        "\nworker and console gateway running; in another terminal try:\n"
        "  .venv/bin/ltm call examples/create_server_call.json\n"
        "  .venv/bin/ltm call examples/first_call.json\n"
        "Ctrl-C stops both.\n",
        file=sys.stderr,
    )
    signal.signal(signal.SIGINT, lambda _signum, _frame: supervisor.stop())
    signal.signal(signal.SIGTERM, lambda _signum, _frame: supervisor.stop())
    return supervisor.wait()


if __name__ == "__main__":
    sys.exit(main())
