"""`make run`: the demo data, one worker and one console-mode gateway, until Ctrl-C.

Both run as `ltm` child processes, as they would in production; Ctrl-C or SIGTERM stops
both gracefully (each drains what it has in flight).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from infra.settings import Settings

__all__ = ["main"]

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.sql"


def load_demo(settings: Settings) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as connection:
        connection.execute(DEMO.read_text())


def main() -> int:
    settings = Settings()
    load_demo(settings)
    ltm = [sys.executable, "-m", "worker.cli"]
    children = [
        subprocess.Popen([*ltm, "worker"]),
        subprocess.Popen([*ltm, "gateway", "--shards", "0", "--shard-count", "1"]),
    ]
    print(
        "\nworker and console gateway running; in another terminal try:\n"
        "  .venv/bin/ltm call --json examples/create_server_call.json\n"
        "  .venv/bin/ltm call --json examples/first_call.json\n"
        "Ctrl-C stops both.\n",
        file=sys.stderr,
    )

    def stop(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while any(child.poll() is None for child in children):
        time.sleep(0.2)
        # One child gone on its own means the demo is broken: stop the other too.
        if any(child.poll() not in (None, 0) for child in children):
            stop(signal.SIGTERM, None)
    codes = [child.wait() for child in children]
    return max(codes, key=abs)


if __name__ == "__main__":
    sys.exit(main())
