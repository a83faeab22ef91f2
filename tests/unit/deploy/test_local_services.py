"""deploy/local-services.sh without --install (what `make run` and `make test` call) only checks:
it names what does not answer, tells to run `make services`, and changes nothing."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.processes import free_port

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "local-services.sh"
INSTALLERS = ("apt-get", "pg_ctlcluster", "rabbitmq-server", "rabbitmqctl", "psql")


@pytest.fixture
def installers_recorded(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """An environment whose PATH finds the tools that change the system as stubs that only
    note that they were called (in the file yielded)."""
    record = tmp_path / "called"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in INSTALLERS:
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{record}"\nexit 1\n')
        stub.chmod(0o755)
    yield {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}, record


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


def check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)], check=False, env=env, capture_output=True, text=True, timeout=30
    )


def test_names_each_service_that_does_not_answer_and_changes_nothing(
    installers_recorded: tuple[dict[str, str], Path],
) -> None:
    env, record = installers_recorded
    pg_port, amqp_port = free_port(), free_port()  # nothing listens there
    env.update(
        LTM_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{pg_port}/ltm",
        LTM_AMQP_URL=f"amqp://guest:guest@127.0.0.1:{amqp_port}/",
    )

    checked = check(env)

    assert checked.returncode == 1
    assert f"PostgreSQL does not answer on 127.0.0.1:{pg_port}" in checked.stderr
    assert f"RabbitMQ does not answer on 127.0.0.1:{amqp_port}" in checked.stderr
    assert "make services" in checked.stderr
    assert not record.exists(), record.read_text()


def test_names_only_the_one_that_does_not_answer(
    installers_recorded: tuple[dict[str, str], Path], listening_port: int
) -> None:
    env, record = installers_recorded
    amqp_port = free_port()
    env.update(
        # A URL of several hosts, with a password and parameters: the first host is checked.
        LTM_DATABASE_URL=(
            f"postgresql://postgres:secret@127.0.0.1:{listening_port},127.0.0.1:1/ltm"
            "?connect_timeout=2"
        ),
        LTM_AMQP_URL=f"amqp://guest:guest@127.0.0.1:{amqp_port}/vhost?heartbeat=5",
    )

    checked = check(env)

    assert checked.returncode == 1
    assert "PostgreSQL" not in checked.stderr
    assert f"RabbitMQ does not answer on 127.0.0.1:{amqp_port}" in checked.stderr
    assert not record.exists()


def test_is_quiet_when_both_answer(
    installers_recorded: tuple[dict[str, str], Path], listening_port: int
) -> None:
    env, record = installers_recorded
    env.update(
        LTM_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{listening_port}/ltm",
        LTM_AMQP_URL=f"amqp://guest:guest@127.0.0.1:{listening_port}/",
    )

    checked = check(env)

    assert (checked.returncode, checked.stderr) == (0, "")
    assert not record.exists()
