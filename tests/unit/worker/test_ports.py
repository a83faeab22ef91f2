"""The adapters implement the service layer's ports: each method the protocol declares, with
the same parameters (mypy checks the types, through the assignments below)."""

from __future__ import annotations

import inspect

import pytest

from tests.unit.worker.fakes import GivenFacts
from worker.adapters.broker import EventPublisher
from worker.adapters.memory_store import MemoryStore
from worker.adapters.tool_call_transaction import PostgresToolCallTransaction
from worker.ports import Publisher, ToolCallStore, ToolCallTransaction


def _store(store: MemoryStore) -> ToolCallStore:
    return store


def _transaction(tx: PostgresToolCallTransaction) -> ToolCallTransaction:
    return tx


def _fake(tx: GivenFacts) -> ToolCallTransaction:
    return tx


def _publisher(publisher: EventPublisher) -> Publisher:
    return publisher


def _declared(protocol: type) -> list[str]:
    return [
        name
        for name, member in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(member)
    ]


def _parameters(function: object) -> list[tuple[str, inspect._ParameterKind, object]]:
    return [
        (parameter.name, parameter.kind, parameter.default)
        for parameter in inspect.signature(function).parameters.values()  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [
        (ToolCallTransaction, PostgresToolCallTransaction),
        (ToolCallTransaction, GivenFacts),
        (ToolCallStore, MemoryStore),
        (Publisher, EventPublisher),
    ],
)
def test_an_implementation_has_every_method_of_its_port(
    protocol: type, implementation: type
) -> None:
    declared = _declared(protocol)
    assert declared, f"{protocol.__name__} declares no method"
    for name in declared:
        assert _parameters(getattr(implementation, name)) == _parameters(getattr(protocol, name)), (
            f"{implementation.__name__}.{name} differs from {protocol.__name__}.{name}"
        )
