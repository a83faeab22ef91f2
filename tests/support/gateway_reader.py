"""A gateway process that reads memories when asked: a bot's side of reading back, for tests.

`python -m tests.support.gateway_reader [SHARD SHARD_COUNT]`, with the `LTM_*` settings of
the test run, runs a `Gateway` (without a shard it only consumes invalidations; with one it
also makes tool calls for it, its embeds printed to stderr) and talks JSON, one object a line:

- stdout `{"ready": INSTANCE}` once it consumes invalidations;
- stdout `{"invalidated": [CACHE, KEY]}` for each invalidation it receives;
- stdin `{"server": ID, "persona": ID, "users": [ID, ...]}` asks for a read through
  `gateway.memories`; stdout answers `{"server_lines": [...], "personal_lines": {ID: [...]},
  "revisions": {ID: REVISION}}` or `{"error": "..."}`;
- stdin `{"call": {"tool_call_id", "arguments", "context": {...}}}` makes an
  `update_long_term_memory` call through `gateway.tool_client`, `context` the
  `MessageContext` fields but the shard, with `seen` the listing of its last read, as a bot
  that rendered that listing into the conversation does; stdout answers `{"answer": {...}}`.

It stops at the end of its stdin. `GatewayReader` is the test's side of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from contracts import UPDATE_LONG_TERM_MEMORY, CacheName, MemoryListing, Participant
from gateway import ConsoleSender, Gateway, MessageContext
from gateway.tool_client import seen_revisions
from harness.services import TestServices
from harness.waiting import eventually
from infra.observability.logs import configure_logging
from infra.settings import Settings

__all__ = ["GatewayReader"]

REPOSITORY = Path(__file__).resolve().parents[2]


def _say(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


async def _serve(shard: tuple[int, int] | None) -> None:
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)  # logs go to stderr
    gateway = Gateway(
        settings,
        sender=ConsoleSender(sys.stderr),
        shards=None if shard is None else (shard[0],),
        shard_count=None if shard is None else shard[1],
    )
    gateway.caches.add_listener(lambda cache, key: _say({"invalidated": [cache, key]}))
    last_read: MemoryListing | None = None
    async with gateway:
        _say({"ready": gateway.instance})
        while line := await asyncio.to_thread(sys.stdin.readline):
            request = json.loads(line)
            if "call" in request:
                assert shard is not None, "a reader without a shard makes no calls"
                call = request["call"]
                context = call["context"]
                participants = [
                    Participant.model_validate_json(json.dumps(p)) for p in context["participants"]
                ]
                answer = await gateway.tool_client.call(
                    call["tool_call_id"],
                    UPDATE_LONG_TERM_MEMORY,
                    call["arguments"],
                    MessageContext(
                        **{**context, "participants": participants},
                        shard_id=shard[0],
                        seen=last_read,
                    ),
                    timeout_s=20,
                )
                _say({"answer": answer})
                continue
            try:
                listing = await gateway.memories.read(
                    request["server"], request["persona"], request["users"]
                )
            except LookupError as error:
                _say({"error": str(error)})
                continue
            last_read = listing
            _say(
                {
                    "server_lines": listing.server_lines(),
                    "personal_lines": {
                        user_id: listing.personal_lines(user_id) for user_id in listing.personal
                    },
                    "revisions": seen_revisions(listing),
                }
            )


class GatewayReader:
    """A `tests.support.gateway_reader` process: asks it to read, and hears what it heard."""

    def __init__(
        self, services: TestServices, log_path: Path, *, shard: tuple[int, int] | None = None
    ) -> None:
        """`shard`: (shard, shard count) for a reader that also makes tool calls."""
        self._services = services
        self._shard = shard
        self._log_path = log_path
        self._log: IO[bytes] | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._listening: asyncio.Task[None] | None = None
        self.instance: str | None = None
        self.invalidations: list[tuple[CacheName, str]] = []

    async def start(self, timeout: float = 30.0) -> GatewayReader:
        self._log = self._log_path.open("ab")
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.gateway_reader",
            *(() if self._shard is None else (str(self._shard[0]), str(self._shard[1]))),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            env=self._services.env(),
            cwd=REPOSITORY,
        )
        self._listening = asyncio.create_task(self._listen())

        async def ready() -> bool:
            if self._process is not None and self._process.returncode is not None:
                raise AssertionError(f"the reader exited early:\n{self.output()}")
            return self.instance is not None

        try:
            await eventually(ready, timeout=timeout, what="the gateway reader ready")
        except BaseException:
            await self.stop()
            raise
        return self

    async def _listen(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        while line := await self._process.stdout.readline():
            message = json.loads(line)
            if "ready" in message:
                self.instance = message["ready"]
            elif "invalidated" in message:
                cache, key = message["invalidated"]
                self.invalidations.append((cache, key))
            else:
                await self._answers.put(message)

    async def read(
        self, server: str, persona: int, users: tuple[str, ...] = (), *, timeout: float = 20.0
    ) -> dict[str, Any]:
        """What its gateway read: `server_lines` and `personal_lines` (or an `error`)."""
        assert self._process is not None and self._process.stdin is not None
        request = {"server": server, "persona": persona, "users": list(users)}
        self._process.stdin.write(json.dumps(request).encode() + b"\n")
        await self._process.stdin.drain()
        return await asyncio.wait_for(self._answers.get(), timeout)

    async def call(
        self, tool_call_id: str, arguments: dict[str, Any], context: dict[str, Any]
    ) -> dict[str, Any]:
        """An update through its gateway's tool client, built on its last read; the answer
        the LLM would see."""
        assert self._process is not None and self._process.stdin is not None
        request = {
            "call": {"tool_call_id": tool_call_id, "arguments": arguments, "context": context}
        }
        self._process.stdin.write(json.dumps(request).encode() + b"\n")
        await self._process.stdin.drain()
        answer = await asyncio.wait_for(self._answers.get(), 30.0)
        return dict(answer["answer"])

    async def heard(self, cache: CacheName, key: str) -> None:
        """Until its gateway has received that invalidation."""

        async def received() -> bool:
            return (cache, key) in self.invalidations

        await eventually(received, what=f"{self.instance} to hear {cache} {key}")

    def output(self) -> str:
        return self._log_path.read_text(errors="replace") if self._log_path.exists() else ""

    async def stop(self, timeout: float = 20.0) -> int | None:
        """Ends its stdin, so that it stops its gateway and exits; kills it if it does not."""
        process = self._process
        if process is None:
            return None
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        try:
            code = await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            process.kill()
            code = await process.wait()
        if self._listening is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        if self._log is not None:
            self._log.close()
        return code

    async def __aenter__(self) -> GatewayReader:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


if __name__ == "__main__":
    arguments = [int(argument) for argument in sys.argv[1:3]]
    asyncio.run(_serve((arguments[0], arguments[1]) if arguments else None))
