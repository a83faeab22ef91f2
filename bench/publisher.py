"""A separate publisher process: the tool calls of a file, as fast as the broker confirms them.

`python -m bench.publisher --amqp-url URL --prefix P --file CALLS.jsonl [--window 256]
[--dead-letters REASON]`

Each line of the file is `{"body", "message_id", "correlation_id", "tool_name"}`
(`bench.world.call_line`).
The messages are built before the clock starts; then every one is published to the tool-call
exchange with publisher confirms and up to `--window` confirms outstanding. Prints one JSON
line: how many, in how many seconds. With `--dead-letters`, each goes to the dead-letter
exchange instead, as the worker dead-letters a call, with REASON as its `x-ltm-error`: what
`ltm dlq replay` then sends back.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import aio_pika
import orjson

from bench.amqp import CallPublisher, dead_letter_headers, outgoing_call
from contracts import Topology

__all__ = ["main", "publish_lines"]


async def publish_lines(
    amqp_url: str,
    prefix: str,
    lines: list[bytes],
    *,
    window: int,
    dead_letter_reason: str | None = None,
) -> dict[str, float]:
    # Built once: every letter of the file failed alike.
    extra = None if dead_letter_reason is None else dead_letter_headers(dead_letter_reason)
    calls = []
    for line in lines:
        item = orjson.loads(line)
        calls.append(
            outgoing_call(
                item["body"].encode(),
                message_id=item["message_id"],
                correlation_id=item["correlation_id"],
                tool_name=item["tool_name"],
                headers=extra,
            )
        )
    connection = await aio_pika.connect(
        amqp_url, client_properties={"connection_name": "ltm-bench-publisher"}
    )
    async with connection:
        publisher = await CallPublisher.open(
            connection, Topology(prefix), dead_letters=dead_letter_reason is not None
        )
        started = time.perf_counter()
        published = await publisher.publish_window(calls, window=window)
        seconds = time.perf_counter() - started
    return {"published": published, "seconds": seconds, "rate": published / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.publisher")
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--file", type=Path, required=True)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--dead-letters", metavar="REASON", dest="dead_letter_reason")
    args = parser.parse_args(argv)
    import uvloop

    lines = args.file.read_bytes().splitlines()
    report = uvloop.run(
        publish_lines(
            args.amqp_url,
            args.prefix,
            lines,
            window=args.window,
            dead_letter_reason=args.dead_letter_reason,
        )
    )
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
