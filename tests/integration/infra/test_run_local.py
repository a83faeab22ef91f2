"""`make run`'s supervisor on real child processes: one SIGTERM each, SIGKILL after the grace."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from infra.run_local import Supervisor

GRACE_S = 1.0
# Well past the grace and the supervisor's polling, well short of "never".
DEADLINE_S = GRACE_S + 10.0

# Counts each SIGTERM on stdout, as a line, and goes on.
STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM", flush=True))
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""
FAILING = "import sys; sys.exit(3)"


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def _ready(child: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """Its handler is in place: a SIGTERM from now on is one it ignores."""
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    return child


def _sigterms(child: subprocess.Popen[bytes]) -> int:
    assert child.stdout is not None
    return child.stdout.read().count(b"SIGTERM")


@pytest.fixture
def stubborn() -> Iterator[subprocess.Popen[bytes]]:
    child = _ready(_child(STUBBORN))
    yield child
    if child.poll() is None:  # the supervisor under test did not end it
        child.kill()
    child.wait()


def _wait(supervisor: Supervisor) -> tuple[int, float]:
    """`supervisor.wait()`, its exit code and how long it took; a failure past the deadline."""
    outcome: list[int] = []
    started = time.monotonic()
    waiting = threading.Thread(target=lambda: outcome.append(supervisor.wait()), daemon=True)
    waiting.start()
    waiting.join(DEADLINE_S)
    if waiting.is_alive():
        for child in supervisor.children:
            child.kill()  # so that the waiting thread ends with the test
        pytest.fail(f"the supervisor still waited {DEADLINE_S} s after the stop")
    return outcome[0], time.monotonic() - started


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(
    stubborn: subprocess.Popen[bytes],
) -> None:
    supervisor = Supervisor([stubborn], grace_s=GRACE_S)

    supervisor.stop()
    code, took = _wait(supervisor)

    assert stubborn.returncode == -signal.SIGKILL
    assert code == -signal.SIGKILL
    assert took >= GRACE_S  # it had its grace first
    assert _sigterms(stubborn) == 1  # asked once, not over and over


def test_a_second_stop_does_not_ask_again(stubborn: subprocess.Popen[bytes]) -> None:
    supervisor = Supervisor([stubborn], grace_s=GRACE_S)

    supervisor.stop()
    supervisor.stop()  # Ctrl-C reaches the whole group, then a SIGTERM comes from elsewhere
    _wait(supervisor)

    assert _sigterms(stubborn) == 1


def test_a_child_failing_on_its_own_stops_the_others(
    stubborn: subprocess.Popen[bytes],
) -> None:
    failing = _child(FAILING)
    supervisor = Supervisor([failing, stubborn], grace_s=GRACE_S)

    code, _ = _wait(supervisor)

    assert failing.returncode == 3
    assert stubborn.returncode == -signal.SIGKILL
    assert code != 0
    assert _sigterms(stubborn) == 1
