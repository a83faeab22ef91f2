"""`python -m bench.chaos` (`make chaos`): one chaos run on a database and virtual host of its
own, its report printed; exit status 1 when a check failed.

The database restart (`--db-fault restart`, the default) strikes a PostgreSQL instance the run
starts for itself (`harness.localnodes`), never the machine's own server, which other runs and
services share."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from bench.chaos.report import print_report
from bench.chaos.runner import run_chaos
from harness.localnodes.running import started_pair
from harness.services import test_services
from infra.observability.logs import configure_logging

__all__ = ["main"]


@contextmanager
def _own_postgres(db_fault: str) -> Iterator[Callable[[], None] | None]:
    """For a restart: a PostgreSQL instance of the run's own, which the run's database lives
    on (`LTM_DATABASE_URL` for the block); its restart, a fast shutdown then a start."""
    if db_fault != "restart":
        yield None
        return
    with started_pair(standby=False) as pair:
        instance = pair.primary
        before = os.environ.get("LTM_DATABASE_URL")
        os.environ["LTM_DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:{instance.port}/postgres"

        def restart() -> None:
            instance.stop()
            instance.start()

        try:
            yield restart
        finally:
            if before is None:
                os.environ.pop("LTM_DATABASE_URL", None)
            else:
                os.environ["LTM_DATABASE_URL"] = before


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
        help="restart: a PostgreSQL instance of the run's own, restarted once; "
        "outage: this run's database refuses connections for a while",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--publish-seconds", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)

    configure_logging("WARNING", "console")
    # The in-process gateway's broker connection reports every forced close with a traceback.
    for noisy in ("aiormq", "aio_pika"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    with _own_postgres(args.db_fault) as restart_database, test_services() as services:
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
                restart_database=restart_database,
            )
        )
    return print_report(report, f"chaos run, seed {seed}, worker logs in {report.log_dir}")


if __name__ == "__main__":
    sys.exit(main())
