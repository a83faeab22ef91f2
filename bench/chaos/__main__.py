"""`python -m bench.chaos` (`make chaos`): one chaos run on a database and virtual host of its
own, its report printed; exit status 1 when a check failed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
from collections.abc import Sequence

import psycopg

from bench.chaos.report import print_report
from bench.chaos.runner import run_chaos
from harness.services import test_services
from infra.observability.logs import configure_logging

__all__ = ["main"]


def _cluster_name(database_url: str) -> str:
    """Debian's clusters name themselves VERSION/NAME, as pg_ctlcluster wants them."""
    with psycopg.connect(database_url) as connection:
        row = connection.execute("SHOW cluster_name").fetchone()
    return str(row[0]) if row and row[0] else "15/main"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description="Tool calls under worker kills, broker closures and a database restart.",
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--closures", type=int, default=3, help="broker connection closures")
    parser.add_argument(
        "--stalls", type=int, default=1, help="stalls of the workers' path to the broker"
    )
    parser.add_argument(
        "--db-fault",
        choices=["restart", "outage", "none"],
        default="restart",
        help="restart: PostgreSQL itself, once (every database on the machine); "
        "outage: this run's database only",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--publish-seconds", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--pg-cluster",
        default=None,
        help="VERSION/NAME for pg_ctlcluster (default: the server's own cluster_name)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)

    configure_logging("WARNING", "console")
    # The in-process gateway's broker connection reports every forced close with a traceback.
    for noisy in ("aiormq", "aio_pika"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    with test_services() as services:
        version, _, cluster = str(
            args.pg_cluster or _cluster_name(services.database_url)
        ).partition("/")
        report = asyncio.run(
            run_chaos(
                services,
                calls=args.calls,
                kills=args.kills,
                broker_closures=args.closures,
                stalls=args.stalls,
                db_fault=args.db_fault,
                workers=args.workers,
                publish_s=args.publish_seconds,
                seed=seed,
                pg_cluster=(version, cluster or "main"),
            )
        )
    return print_report(report, f"chaos run, seed {seed}, worker logs in {report.log_dir}")


if __name__ == "__main__":
    sys.exit(main())
