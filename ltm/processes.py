"""The arguments of the commands that run or set up a process, typed (the operator commands'
are in `worker.ops.commands`)."""

from __future__ import annotations

from dataclasses import dataclass

from worker.ops.commands import OperatorCommand

__all__ = [
    "Command",
    "DeclareTopology",
    "HashPassword",
    "Migrate",
    "ProcessCommand",
    "RunGateway",
    "RunWorker",
    "ServeConsole",
]


@dataclass(frozen=True, slots=True)
class Migrate:
    """`ltm migrate [--roles]`."""

    roles: bool = False


@dataclass(frozen=True, slots=True)
class DeclareTopology:
    """`ltm topology`."""


@dataclass(frozen=True, slots=True)
class RunWorker:
    """`ltm worker`."""


@dataclass(frozen=True, slots=True)
class RunGateway:
    """`ltm gateway --shards N,N --shard-count N`."""

    shards: tuple[int, ...]
    shard_count: int


@dataclass(frozen=True, slots=True)
class ServeConsole:
    """`ltm console [--host H] [--port P]`."""

    host: str = "127.0.0.1"
    port: int = 8080


@dataclass(frozen=True, slots=True)
class HashPassword:
    """`ltm console hash-password`."""


ProcessCommand = Migrate | DeclareTopology | RunWorker | RunGateway | ServeConsole | HashPassword
# Every command `ltm` runs.
Command = ProcessCommand | OperatorCommand
