"""Passwords never shown: URLs, `password=` parameters, log lines (docs/security.md)."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from infra.observability.logs import configure_logging, get_logger
from infra.redaction import mask_passwords


@pytest.mark.parametrize(
    ("shown", "masked"),
    [
        ("amqp://guest:guest@localhost:5672/", "amqp://guest:***@localhost:5672/"),
        ("amqps://ltm-bot:s3cr%40t@broker:5671/ltm", "amqps://ltm-bot:***@broker:5671/ltm"),
        (
            "postgresql://worker:pw@db1:5432,db2:5432/ltm?sslmode=verify-full",
            "postgresql://worker:***@db1:5432,db2:5432/ltm?sslmode=verify-full",
        ),
        ("postgresql+psycopg://u:p@h/d", "postgresql+psycopg://u:***@h/d"),
        (
            "postgresql://h/d?user=u&password=p&sslmode=require",
            "postgresql://h/d?user=u&password=***&sslmode=require",
        ),
        ("host=db user=u password=secret dbname=ltm", "host=db user=u password=*** dbname=ltm"),
        ("host=db password='a b c' dbname=ltm", "host=db password=*** dbname=ltm"),
        ("sslpassword=key-pass", "sslpassword=***"),
        (
            "could not reach amqp://u:p@a:1/ nor amqp://v:q@b:2/",
            "could not reach amqp://u:***@a:1/ nor amqp://v:***@b:2/",
        ),
    ],
)
def test_every_password_is_masked(shown: str, masked: str) -> None:
    assert mask_passwords(shown) == masked


@pytest.mark.parametrize(
    "unchanged",
    [
        "postgresql://postgres@127.0.0.1:5432/ltm",  # no password
        "amqp://localhost:5672/",
        "http://127.0.0.1:9464/metrics",
        "amqp://host:5672/vhost?name=a@b",  # an @ after the host is no password's end
        "an ordinary log line",
    ],
)
def test_text_without_a_password_is_left_as_it_is(unchanged: str) -> None:
    assert mask_passwords(unchanged) == unchanged


def test_masking_twice_changes_nothing_more() -> None:
    once = mask_passwords("amqp://u:p@h/ password=x")
    assert mask_passwords(once) == once


@pytest.fixture
def json_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("INFO", "json")  # undone after the test by tests/conftest.py
    yield stream


def test_log_lines_mask_urls_in_any_field_and_in_errors(json_log: io.StringIO) -> None:
    log = get_logger("ltm.test")
    log.warning(
        "broker unreachable amqp://a:first@h/",
        url="amqp://ltm-worker:second@rabbitmq:5672/",
        error=ConnectionError("cannot reach postgresql://w:third@db/ltm"),
    )
    try:
        raise RuntimeError("failed on amqp://x:fourth@h/")
    except RuntimeError:
        log.exception("with a traceback")
    logging.getLogger("some.library").warning("library says password=fifth")
    written = json_log.getvalue()
    for secret in ("first", "second", "third", "fourth", "fifth"):
        assert secret not in written, written
    lines = [json.loads(line) for line in written.splitlines()]
    assert lines[0]["url"] == "amqp://ltm-worker:***@rabbitmq:5672/"
    assert "***" in lines[1]["exception"]
    assert lines[2]["event"] == "library says password=***"
