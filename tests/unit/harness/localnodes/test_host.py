"""Only processes of ours are signalled; ports are free ones."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.localnodes.host import LocalNodeError, free_port, is_ours, kill_ours, run


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A process whose command line names a folder, as our nodes' do."""
    marker = tmp_path / "node"
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", marker],
        stdout=subprocess.PIPE,
    )
    # Until it speaks, the child may still be a fork of this process, with its command line.
    assert process.stdout is not None
    assert process.stdout.readline() == b"up\n"
    yield process, marker
    process.kill()
    process.wait()
    process.stdout.close()


def test_a_process_naming_our_folder_is_ours_and_is_killed(
    sleeper: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, marker = sleeper

    assert is_ours(process.pid, marker)
    assert kill_ours(process.pid, marker)
    assert process.wait(timeout=10) == -9


def test_a_process_not_naming_our_folder_is_left_alone(
    sleeper: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    """A stale pid file may hold a pid the system has given to another process since."""
    process, _ = sleeper
    someone_else = tmp_path / "other"

    assert not is_ours(process.pid, someone_else)
    assert not kill_ours(process.pid, someone_else)
    assert process.poll() is None


@pytest.mark.parametrize("pid", [None, 0, 1, 2**22 + 1], ids=["none", "zero", "init", "unused"])
def test_no_pid_is_never_ours(pid: int | None, tmp_path: Path) -> None:
    assert not is_ours(pid, tmp_path)
    assert not kill_ours(pid, tmp_path)


def test_free_ports_skip_listening_and_taken_ones() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        busy = int(listening.getsockname()[1])
        taken = {busy + 1}

        port = free_port(taken, start=busy)

    assert port >= busy + 2
    assert taken == {busy + 1, port}


def test_random_free_ports_stay_below_the_outgoing_range() -> None:
    taken: set[int] = set()
    ports = {free_port(taken) for _ in range(5)}

    assert len(ports) == 5
    assert all(20000 <= port < 61000 for port in ports)


def test_a_failing_command_is_named_with_what_it_said() -> None:
    with pytest.raises(LocalNodeError, match=r"exited with 3: no such node"):
        run(
            [
                sys.executable,
                "-c",
                "import sys; print('no such node', file=sys.stderr); sys.exit(3)",
            ]
        )
    with pytest.raises(LocalNodeError, match="could not run"):
        run(["/nonexistent/rabbitmqctl"])
