"""Reading the answers of epmd, rabbitmqctl, rabbitmq-queues and pid files."""

from __future__ import annotations

import json

import pytest

from harness.localnodes.readings import (
    QuorumMember,
    connection_nodes,
    epmd_names,
    pid_from_file_text,
    quorum_members,
    running_nodes,
)


def _row_3_10(node: str, state: str) -> dict[str, object]:
    """A row as RabbitMQ 3.10.8 answers `rabbitmq-queues quorum_status Q --formatter json`."""
    return {
        "Node Name": node,
        "Raft State": state,
        "Log Index": 5,
        "Commit Index": 5,
        "Snapshot Index": "undefined",
        "Term": 2,
        "Machine Version": 2,
    }


QUORUM_STATUS_3_10 = json.dumps(
    [
        _row_3_10("ltmc1@localhost", "follower"),
        _row_3_10("ltmc2@localhost", "leader"),
        _row_3_10("ltmc3@localhost", "noproc"),
    ]
)


def test_epmd_names_are_the_short_names_registered() -> None:
    listing = (
        "epmd: up and running on port 4369 with data:\n"
        "name rabbit at port 25672\n"
        "name ltmc1 at port 24461\n"
    )

    assert epmd_names(listing) == {"rabbit", "ltmc1"}
    assert epmd_names("epmd: up and running on port 4369 with data:\n") == set()


def test_quorum_status_of_3_10_names_every_member_and_the_leader() -> None:
    members = quorum_members(QUORUM_STATUS_3_10)

    assert [member.node for member in members] == [
        "ltmc1@localhost",
        "ltmc2@localhost",
        "ltmc3@localhost",
    ]
    assert [member.node for member in members if member.leads] == ["ltmc2@localhost"]


def test_quorum_status_keys_are_read_loosely_and_extra_columns_ignored() -> None:
    later = json.dumps(
        [{"node_name": "a@localhost", "raft_state": "leader", "membership": "voter"}]
    )

    assert quorum_members(later) == [QuorumMember(node="a@localhost", raft_state="leader")]


def test_quorum_status_that_is_not_a_list_is_an_error() -> None:
    with pytest.raises(ValueError, match="did not answer a list"):
        quorum_members('{"error": "not_found"}')


def test_running_nodes_come_from_cluster_status() -> None:
    status = json.dumps(
        {"disk_nodes": ["a@localhost", "b@localhost"], "running_nodes": ["a@localhost"]}
    )

    assert running_nodes(status) == {"a@localhost"}


@pytest.mark.parametrize(
    ("text", "pid"),
    [("1234", 1234), ("1234\n/var/lib/data\n1700000000\n", 1234), ("", None), ("x\n", None)],
    ids=["rabbitmq", "postmaster.pid", "empty", "garbage"],
)
def test_the_pid_is_the_first_line(text: str, pid: int | None) -> None:
    assert pid_from_file_text(text) == pid


def test_a_connections_pid_names_its_node() -> None:
    listing = (
        '<ltmt1a2b3c2@localhost.1701.4242.0>\t[{"connection_name","ltm-worker"},{"product","x"}]\n'
        '<ltmt1a2b3c1@localhost.1700.99.0>\t[{"connection_name","ltm-bench"}]\n'
        '<ltmt1a2b3c3@localhost.1702.7.0>\t[{"connection_name","ltm-worker"}]\n'
    )
    assert connection_nodes(listing, "ltm-worker") == [
        "ltmt1a2b3c2@localhost",
        "ltmt1a2b3c3@localhost",
    ]
    assert connection_nodes(listing, "ltm-gateway") == []
