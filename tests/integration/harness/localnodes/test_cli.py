"""`python -m harness.localnodes up` and `down` in separate processes: `down` stops exactly
what `up` started, by the state file in the folder."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import aio_pika
import psycopg
import pytest

from harness.localnodes.host import new_base_dir, run, wait_until
from harness.localnodes.readings import epmd_names
from harness.localnodes.running import MachineServices

pytestmark = pytest.mark.localnodes

REPOSITORY = Path(__file__).resolve().parents[4]


def _localnodes(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.localnodes", *args],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def _exports(output: str) -> dict[str, str]:
    settings = {}
    for line in output.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        settings[name] = shlex.split(value)[0]
    return settings


async def _amqp_answers(url: str) -> None:
    connection = await aio_pika.connect(url)
    await connection.close()


@pytest.mark.timeout(240)
def test_up_prints_the_settings_and_down_stops_and_removes_everything(
    machine_services: MachineServices,
) -> None:
    base = new_base_dir()
    prefix = f"ltmt{uuid.uuid4().hex[:6]}"
    up = _localnodes("up", "--dir", str(base), "--prefix", prefix, "--nodes", "1")
    try:
        assert up.returncode == 0, up.stderr
        settings = _exports(up.stdout)
        assert set(settings) == {"LTM_AMQP_URL", "LTM_DATABASE_URL"}
        asyncio.run(_amqp_answers(settings["LTM_AMQP_URL"]))
        with psycopg.connect(settings["LTM_DATABASE_URL"], dbname="postgres") as database:
            assert database.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)

        status = _localnodes("status", "--dir", str(base))
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        assert shown["environment"] == settings
        pids = [node["pid"] for node in shown["rabbit"]["nodes"]] + [
            instance["pid"] for instance in shown["postgres"]["instances"]
        ]
        assert len(pids) == 3
        assert all(isinstance(pid, int) for pid in pids)
    finally:
        down = _localnodes("down", "--dir", str(base))

    assert down.returncode == 0, down.stderr
    assert not base.exists()
    # Stopped means the pid files are gone; the processes themselves end (and are reaped by
    # whoever adopted them) a moment later.
    wait_until(
        lambda: not [pid for pid in pids if Path(f"/proc/{pid}").exists()],
        timeout=10,
        what="the nodes' processes to be gone",
    )
    assert _localnodes("status", "--dir", str(base)).returncode == 1
    assert f"{prefix}1" not in epmd_names(run(["epmd", "-names"]))
