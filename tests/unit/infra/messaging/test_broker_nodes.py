"""The broker's node list: parsing and checking `LTM_AMQP_URL`, and which node comes next."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from infra.messaging.amqp import BrokerNode, BrokerNodes
from infra.redaction import mask_passwords
from infra.settings import Settings, broker_urls

THREE = "amqp://u:p@n1:5672/ltm, amqp://u:p@n2:5673/ltm,amqp://u:p@n3:5674/ltm"


def _nodes(count: int) -> BrokerNodes:
    return BrokerNodes([BrokerNode(f"amqp://u:p@n{i}/") for i in range(1, count + 1)])


def _order(nodes: BrokerNodes) -> list[str]:
    return [node.url.split("@")[1].rstrip("/") for node in nodes.candidates()]


def test_one_url_is_a_list_of_one() -> None:
    settings = Settings(amqp_url="amqp://guest:guest@localhost:5672/")
    assert settings.amqp_urls == ("amqp://guest:guest@localhost:5672/",)
    assert settings.amqp_user == "guest"


def test_a_comma_separated_list_is_one_url_per_node_in_order() -> None:
    settings = Settings(amqp_url=THREE)
    assert settings.amqp_urls == (
        "amqp://u:p@n1:5672/ltm",
        "amqp://u:p@n2:5673/ltm",
        "amqp://u:p@n3:5674/ltm",
    )
    assert settings.amqp_user == "u"


@pytest.mark.parametrize(
    ("urls", "complaint"),
    [
        ("amqp://u:p@n1/,amqp://v:p@n2/", "different users"),
        ("amqp://u:p@n1/a,amqp://u:p@n2/b", "different virtual hosts"),
        ("amqp://u:p@n1/,amqps://u:p@n2/", "different schemes"),
        ("amqp://u:p@n1/,", "not an amqp:// or amqps:// URL"),
        ("http://u:p@n1/", "not an amqp:// or amqps:// URL"),
        ("amqp:///ltm", "not an amqp:// or amqps:// URL"),
    ],
)
def test_a_list_that_is_not_one_broker_is_refused(urls: str, complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint) as raised:
        Settings(amqp_url=urls)
    [error] = raised.value.errors()
    assert ":p@" not in error["msg"]  # the message names the URLs without their passwords


def test_the_default_virtual_host_is_the_same_however_written() -> None:
    assert len(broker_urls("amqp://u:p@n1,amqp://u:p@n2/,amqp://u:p@n3/%2F")) == 3


def test_every_password_of_the_list_is_masked() -> None:
    shown = mask_passwords(THREE) + repr(Settings(amqp_url=THREE))
    assert "u:p@" not in shown
    assert shown.count("u:***@") == 6


def test_candidates_start_with_the_first_node_until_one_fails() -> None:
    nodes = _nodes(3)
    assert _order(nodes) == ["n1", "n2", "n3"]
    nodes.failed(nodes.nodes[0])
    assert _order(nodes) == ["n2", "n3", "n1"]
    nodes.failed(nodes.nodes[2])
    assert _order(nodes) == ["n1", "n2", "n3"]


def test_a_single_node_is_always_the_one() -> None:
    nodes = _nodes(1)
    nodes.failed(nodes.nodes[0])
    assert _order(nodes) == ["n1"]


class _Refused(ConnectionRefusedError):
    pass


def test_the_first_node_that_answers_is_taken_and_those_before_it_count_as_failed() -> None:
    nodes = _nodes(3)
    tried: list[str] = []

    async def attempt(node: BrokerNode) -> str:
        tried.append(node.url)
        if node is not nodes.nodes[2]:
            raise _Refused("refused")
        return node.url

    assert asyncio.run(nodes.first_answering(attempt)) == nodes.nodes[2].url
    assert tried == [node.url for node in nodes.nodes]
    assert _order(nodes) == ["n3", "n1", "n2"]  # after n2, the last that failed


def test_when_no_node_answers_the_last_error_is_raised() -> None:
    nodes = _nodes(2)

    async def attempt(node: BrokerNode) -> Any:
        raise _Refused(node.url)

    with pytest.raises(_Refused, match="n2"):
        asyncio.run(nodes.first_answering(attempt))


def test_an_error_that_is_not_about_reaching_a_node_is_not_retried_elsewhere() -> None:
    nodes = _nodes(2)
    tried: list[str] = []

    async def attempt(node: BrokerNode) -> Any:
        tried.append(node.url)
        raise ValueError("a bug, not a node down")

    with pytest.raises(ValueError, match="a bug"):
        asyncio.run(nodes.first_answering(attempt))
    assert tried == [nodes.nodes[0].url]


def test_each_amqps_node_gets_a_tls_context_checking_host_names() -> None:
    nodes = BrokerNodes.of(Settings(amqp_url="amqps://u:p@n1:5671/,amqps://u:p@n2:5671/"))
    assert all(node.tls is not None and node.tls.check_hostname for node in nodes.nodes)
    assert BrokerNodes.of(Settings(amqp_url="amqp://u:p@n1/")).nodes[0].tls is None
