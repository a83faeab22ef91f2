"""What an operator reads of a running worker: log lines that match what `ltm dlq list` shows,
and the `/metrics` page."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import orjson
import pika
import pytest
from aio_pika.abc import AbstractChannel

from contracts import Topology
from harness.broker import EventTap, tap_events
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.waiting import eventually
from tests.e2e.conftest import new_worker

pytestmark = pytest.mark.usefixtures("worker_process")


def _publish_without_ids(amqp_url: str, exchange: str, routing_key: str, body: bytes) -> None:
    """As a client that sets no message_id: pika leaves it unset, where aiormq makes one up."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        connection.channel().basic_publish(
            exchange,
            routing_key,
            body,
            pika.BasicProperties(delivery_mode=2, headers={"schema_version": 1}),
        )
    finally:
        connection.close()


def _logged(worker: LtmProcess, event: str, **fields: Any) -> list[dict[str, Any]]:
    """The worker's JSON log lines of `event` whose fields have these values."""
    lines = [json.loads(line) for line in worker.output().splitlines() if line.startswith("{")]
    return [
        line
        for line in lines
        if line.get("event") == event and all(line.get(k) == v for k, v in fields.items())
    ]


@pytest.mark.parametrize("body_kind", ["tool-call-id", "event-id-too", "not-json"])
async def test_the_dead_lettering_line_names_the_copy_and_the_call(
    channel: AbstractChannel,
    topology: Topology,
    services: TestServices,
    worker_process: LtmProcess,
    body_kind: str,
) -> None:
    # No context: not a valid envelope. No message_id, no correlation_id: the ids are the
    # body's, read leniently, or one the worker makes up once, for the copy and the log.
    tool_call_id = f"bad-{uuid.uuid4()}"
    fields: dict[str, Any] = {
        "event_type": "tool_call.requested",
        "schema_version": 1,
        "occurred_at": "2026-01-01T00:00:00Z",
        "tool_call_id": tool_call_id,
        "tool_name": "update_long_term_memory",
        "arguments": {},
    }
    if body_kind == "event-id-too":
        fields["event_id"] = str(uuid.uuid4())
    body = b"not json " + tool_call_id.encode() if body_kind == "not-json" else orjson.dumps(fields)

    def copied(tap: EventTap) -> bool:
        return any(delivery.body == body for delivery in tap.deliveries)

    async with tap_events(channel, topology.dead_letter_exchange) as dead:
        await asyncio.to_thread(
            _publish_without_ids,
            services.amqp_url,
            topology.tool_calls_exchange,
            "update_long_term_memory",
            body,
        )
        await dead.wait_until(copied, what="the dead-lettered copy")
    [copy] = [delivery for delivery in dead.deliveries if delivery.body == body]
    event_id = copy.properties["message_id"]
    assert event_id is not None, "the copy carries an id `ltm dlq replay --id` can name"
    if body_kind == "event-id-too":
        assert event_id == fields["event_id"]

    async def the_line() -> list[dict[str, Any]] | None:
        return _logged(worker_process, "worker.dead_lettering", event_id=event_id) or None

    [line] = await eventually(the_line, what=f"a dead-lettering line with event_id {event_id}")
    assert line["tool_call_id"] == (None if body_kind == "not-json" else tool_call_id)
    assert line["reason"].startswith("invalid envelope")


async def test_the_metrics_page_has_process_metrics_and_no_created_series(
    worker_process: LtmProcess,
) -> None:
    page = await worker_process.metrics()
    samples = [line for line in page.splitlines() if line and not line.startswith("#")]
    assert any(line.startswith("process_resident_memory_bytes ") for line in samples)
    assert any(line.startswith("process_cpu_seconds_total ") for line in samples)
    assert any(line.startswith("ltm_tool_call_ack_seconds_count ") for line in samples)
    assert [line for line in samples if "_created" in line.split(" ")[0]] == []


async def test_a_second_worker_on_the_same_metrics_port_names_the_setting_and_exits_1(
    services: TestServices, worker_process: LtmProcess, tmp_path: Path
) -> None:
    port = worker_process.metrics_port
    second = new_worker(services, tmp_path, "second")
    second.metrics_port = port
    with second:
        code = await asyncio.to_thread(second.wait_exit, 30)
    output = second.output()
    assert code == 1, output
    assert (
        f"metrics port {port} is in use: set LTM_METRICS_PORT to another port,"
        " or 0 to turn the endpoint off"
    ) in output
    assert "Traceback" not in output
