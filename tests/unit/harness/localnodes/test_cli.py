"""`python -m harness.localnodes`: clear answers when the folder's state does not fit the
command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.localnodes import state
from harness.localnodes.__main__ import main
from harness.localnodes.rabbit import RabbitClusterSpec, RabbitNodeSpec


def _record_stopped_node(base_dir: Path) -> None:
    """A state file as `up` leaves it, for a node that no longer runs."""
    spec = RabbitClusterSpec(
        base_dir=base_dir,
        bindir=Path("/usr/lib/rabbitmq/bin"),
        nodes=(
            RabbitNodeSpec(
                name="ltmunit1@localhost",
                folder=base_dir / "rabbit" / "ltmunit1",
                amqp_port=20001,
                dist_port=20002,
            ),
        ),
    )
    state.remember(base_dir, "rabbit", {"spec": spec.model_dump(mode="json"), "pids": {}})


def test_up_refuses_a_folder_that_already_records_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record_stopped_node(tmp_path)

    assert main(["up", "--dir", str(tmp_path)]) == 1

    assert "already records nodes: run `down` first" in capsys.readouterr().err
    assert not (tmp_path / "rabbit").exists()


def test_status_of_recorded_nodes_that_do_not_run_is_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record_stopped_node(tmp_path)

    assert main(["status", "--dir", str(tmp_path)]) == 1

    shown = json.loads(capsys.readouterr().out)
    assert shown["running"] is False
    assert shown["rabbit"]["nodes"][0]["name"] == "ltmunit1@localhost"
    assert shown["rabbit"]["nodes"][0]["pid"] is None


def test_down_stops_what_is_recorded_and_removes_the_record(tmp_path: Path) -> None:
    _record_stopped_node(tmp_path)
    (tmp_path / "rabbit" / "ltmunit1").mkdir(parents=True)

    assert main(["down", "--dir", str(tmp_path)]) == 0

    assert not tmp_path.exists()


@pytest.mark.parametrize(("command", "code"), [("status", 1), ("down", 0)])
def test_a_folder_without_a_record_says_so(
    command: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--dir", str(tmp_path)]) == code

    assert f"nothing recorded in {tmp_path}" in capsys.readouterr().err
