"""`ltm dlq replay` publishes as the operator and keeps who first published the call."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from aio_pika.abc import AbstractIncomingMessage

from operators.dead_letters import replay_message


def _dead_letter(user_id: str | None, **headers: Any) -> AbstractIncomingMessage:
    fields = dict.fromkeys(
        ("content_type", "content_encoding", "priority", "correlation_id", "reply_to",
         "timestamp", "type", "app_id"),
    )  # fmt: skip
    return cast(
        AbstractIncomingMessage,
        SimpleNamespace(
            body=b"{}",
            headers={"schema_version": 1, "x-ltm-error": "untrusted publisher: …", **headers},
            delivery_mode=2,
            message_id="event-1",
            user_id=user_id,
            **fields,
        ),
    )


def test_the_replay_goes_out_as_the_operator_and_names_the_publisher() -> None:
    replayed = replay_message(_dead_letter("ltm-bot"), user_id="ltm-operator")
    assert replayed.user_id == "ltm-operator"
    assert replayed.headers == {"schema_version": 1, "x-ltm-original-user-id": "ltm-bot"}


def test_the_first_publisher_is_kept_through_several_lives() -> None:
    # Dead-lettered by the worker (no user_id any more, the header set), replayed again.
    message = _dead_letter(None, **{"x-ltm-original-user-id": "intruder", "x-delivery-count": 2})
    replayed = replay_message(message, user_id="ltm-operator")
    assert replayed.headers == {"schema_version": 1, "x-ltm-original-user-id": "intruder"}


def test_a_call_that_had_no_user_id_gets_none_to_keep() -> None:
    replayed = replay_message(_dead_letter(None), user_id=None)
    assert replayed.user_id is None
    assert replayed.headers == {"schema_version": 1}
