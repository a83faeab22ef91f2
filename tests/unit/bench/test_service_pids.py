"""`bench.service_pids`: the broker's listening socket and pid file, from their texts."""

from __future__ import annotations

import os
from pathlib import Path

from bench.service_pids import listening_inodes, rabbit_pid_file

_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1628 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 6914 1 0
   1: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 4336 1 0
   2: 0100007F:1628 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000   106        0 9999 1 0
"""


def test_only_the_listening_socket_of_the_port_is_taken() -> None:
    # 0x1628 is 5672; the established connection to it (state 01) is not the listener.
    assert listening_inodes(_TCP, 5672) == {6914}
    assert listening_inodes(_TCP, 5433) == set()


def test_the_pid_file_follows_the_nodes_name_and_folder_of_the_env_file() -> None:
    conf = "NODENAME=rabbit@localhost\nexport RABBITMQ_MNESIA_BASE='/srv/mnesia'\n"

    assert rabbit_pid_file(conf) == Path("/srv/mnesia/rabbit@localhost.pid")


def test_without_an_env_file_the_pid_file_is_rabbitmqs_default() -> None:
    host = os.uname().nodename.split(".")[0]

    assert rabbit_pid_file("") == Path(f"/var/lib/rabbitmq/mnesia/rabbit@{host}.pid")
