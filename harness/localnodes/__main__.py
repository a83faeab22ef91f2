"""`python -m harness.localnodes up|down|status [--dir D]`: a local cluster for trying failover.

`up` starts three RabbitMQ nodes joined into a cluster and a PostgreSQL primary with a
synchronous standby under D, and prints the settings to export; `down` stops exactly what
the state file in D records and removes it; `status` says what runs.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.localnodes.deployment import LocalDeployment
from harness.localnodes.host import LocalNodeError
from harness.localnodes.state import STATE_FILE
from infra.observability.logs import configure_logging

__all__ = ["main"]

DEFAULT_DIR = Path(__file__).resolve().parents[2] / ".cluster"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.localnodes", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("up", "start the nodes and print the settings to export"),
        ("down", "stop what the folder's state file records, and remove it"),
        ("status", "show what the folder's state file records and whether it runs"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument(
            "--dir", type=Path, default=DEFAULT_DIR, help=f"base folder (default {DEFAULT_DIR})"
        )
        if name == "up":
            command.add_argument(
                "--prefix", default="ltmc", help="node name prefix (ltmc → ltmc1@localhost, …)"
            )
            command.add_argument("--nodes", type=int, default=3, help="broker nodes (1 to 9)")
            command.add_argument(
                "--base-port", type=int, default=None, help="count ports up from here"
            )
    return parser


def _up(base_dir: Path, prefix: str, nodes: int, base_port: int | None) -> int:
    if LocalDeployment.recorded(base_dir) is not None:
        print(
            f"{base_dir / STATE_FILE} already records nodes: run `down` first",
            file=sys.stderr,
        )
        return 1
    created = not base_dir.exists()
    base_dir.mkdir(parents=True, exist_ok=True)
    if created:
        # Node data in a working copy must never be committed.
        (base_dir / ".gitignore").write_text("*\n")
    deployment = LocalDeployment.up(base_dir, prefix=prefix, nodes=nodes, base_port=base_port)
    for name, value in deployment.environment().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


def _down(base_dir: Path) -> int:
    deployment = LocalDeployment.recorded(base_dir)
    if deployment is None:
        print(f"nothing recorded in {base_dir}: nothing to stop", file=sys.stderr)
        return 0
    deployment.down()
    print(f"stopped and removed what {base_dir} held", file=sys.stderr)
    return 0


def _status(base_dir: Path) -> int:
    deployment = LocalDeployment.recorded(base_dir)
    if deployment is None:
        print(f"nothing recorded in {base_dir}", file=sys.stderr)
        return 1
    print(json.dumps(deployment.describe(), indent=2))
    return 0 if deployment.running else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    try:
        if args.command == "up":
            return _up(args.dir, args.prefix, args.nodes, args.base_port)
        if args.command == "down":
            return _down(args.dir)
        return _status(args.dir)
    except (LocalNodeError, ValueError) as error:
        print(f"{args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
