"""Routing keys and the shard they name."""

from __future__ import annotations

import pytest

from contracts import (
    audit_routing_key,
    cache_routing_key,
    embed_routing_key,
    result_routing_key,
    shard_of_routing_key,
)


@pytest.mark.parametrize("shard_id", [0, 7, 5_005])
def test_a_reply_key_names_its_shard(shard_id: int) -> None:
    assert shard_of_routing_key(result_routing_key(shard_id)) == shard_id
    assert shard_of_routing_key(embed_routing_key(shard_id)) == shard_id


@pytest.mark.parametrize(
    "routing_key",
    [
        cache_routing_key("user", "42"),
        audit_routing_key("updated", "server_wide"),
        "result.shard.",
        "result.shard.-1",
        "result.shard.²",
        "other.shard.3",
    ],
)
def test_any_other_key_names_no_shard(routing_key: str) -> None:
    assert shard_of_routing_key(routing_key) is None
