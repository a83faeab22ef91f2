"""`ltm gateway --shards N,N --shard-count N`: run a gateway process for some shards."""

from __future__ import annotations

import argparse
from typing import Any

from infra.settings import Settings
from ltm.commands.common import add_command, run_async

__all__ = ["add", "parse_shards"]


def add(commands: Any) -> None:
    gateway = add_command(
        commands,
        "gateway",
        "run a gateway process for some shards",
        "It posts the embeds of those shards and drops stale caches; without DISCORD_TOKEN it "
        "draws each embed in the terminal instead.",
    )
    gateway.add_argument(
        "--shards",
        type=parse_shards,
        required=True,
        metavar="N,N",
        help="the shards this process serves, e.g. 0,1",
    )
    gateway.add_argument(
        "--shard-count", type=int, required=True, metavar="N", help="how many shards the bot has"
    )
    gateway.set_defaults(run=_run)


def parse_shards(text: str) -> tuple[int, ...]:
    """`--shards`: distinct shard numbers, sorted."""
    try:
        shards = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text}") from None
    if not shards or min(shards) < 0:
        raise argparse.ArgumentTypeError("give at least one shard number, each >= 0")
    return shards


def _run(args: argparse.Namespace, settings: Settings) -> int:
    # Imported when used: the other commands load none of the gateway's code.
    from gateway.process import run_gateway

    return run_async(run_gateway(settings, tuple(args.shards), int(args.shard_count)))
