"""The pure decisions of data requests: refusals, the dead letters an erasure removes, the
receipt, and a request's answer and events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import (
    CacheInvalidate,
    DataRequestCompleted,
    DataRequestRequested,
    NoticeRetract,
    Receipt,
    SubjectErased,
    SubjectExported,
)
from contracts.data_requests import Subject
from worker.core.data_requests import (
    ErasureCounts,
    Notice,
    answer_again,
    completed,
    done_events,
    letter_digest,
    letter_is_about,
    refusal_of,
    refused_events,
)

ALICE = "200000000000000001"
BOB = "200000000000000002"
GUILD = "300000000000000001"


def request(
    subject: dict[str, str],
    by_kind: str,
    by_id: str,
    *,
    kind: str = "erase",
    context: dict[str, Any] | None = None,
) -> DataRequestRequested:
    return DataRequestRequested.model_validate(
        {
            "request_id": "req-1",
            "kind": kind,
            "subject": subject,
            "requested_by": {"kind": by_kind, "id": by_id},
            "context": context,
        }
    )


@pytest.mark.parametrize(
    ("subject", "by_kind", "by_id", "reason"),
    [
        ({"user_id": ALICE}, "user", ALICE, None),
        ({"user_id": ALICE}, "user", BOB, "not_the_subject"),
        ({"user_id": ALICE}, "server_owner", BOB, "not_the_subject"),
        ({"user_id": ALICE}, "bot_removed", "gateway-1", "not_the_subject"),
        ({"user_id": ALICE}, "discord_deleted_user", ALICE, None),
        ({"user_id": ALICE}, "operator", "cli:ops", None),
        ({"guild_id": GUILD}, "user", ALICE, "guild_subject_by_user"),
        ({"guild_id": GUILD}, "discord_deleted_user", ALICE, "guild_subject_by_user"),
        ({"guild_id": GUILD}, "server_owner", BOB, None),
        ({"guild_id": GUILD}, "bot_removed", "gateway-1", None),
        ({"guild_id": GUILD}, "operator", "cli:ops", None),
    ],
)
def test_the_refusals_are_the_table_of_the_contract(
    subject: dict[str, str], by_kind: str, by_id: str, reason: str | None
) -> None:
    asked = request(subject, by_kind, by_id)
    assert (
        refusal_of(asked, publisher_user_id="ltm-bot", trusted_publishers=None, operator_user="o")
        == reason
    )


@pytest.mark.parametrize(
    ("trusted", "publisher", "reason"),
    [
        (None, "ltm-bot", None),  # a local run trusts every kind
        (frozenset({"ltm-bot", "ltm-operator"}), "ltm-operator", None),
        (frozenset({"ltm-bot", "ltm-operator"}), "ltm-bot", "untrusted_publisher"),
        (frozenset({"ltm-bot"}), None, "untrusted_publisher"),
    ],
)
def test_an_operators_request_must_come_from_the_operators_account(
    trusted: frozenset[str] | None, publisher: str | None, reason: str | None
) -> None:
    asked = request({"user_id": ALICE}, "operator", "cli:ops")
    assert (
        refusal_of(
            asked,
            publisher_user_id=publisher,
            trusted_publishers=trusted,
            operator_user="ltm-operator",
        )
        == reason
    )


def _call(triggerer: str, guild: str | None = GUILD, **arguments: Any) -> bytes:
    return json.dumps(
        {
            "event_type": "tool_call.requested",
            "arguments": arguments,
            "context": {"triggerer_id": triggerer, "guild_id": guild},
        }
    ).encode()


@pytest.mark.parametrize(
    ("body", "removed"),
    [
        (_call(ALICE), True),
        (_call(BOB), False),
        (_call(BOB, memory_id=42), True),
        (_call(BOB, memory_id="42"), True),
        (_call(BOB, memory_id=43), False),
        (_call(BOB, memory_id=True), False),
        (f"not json {ALICE}".encode(), True),
        (f"not json {BOB}".encode(), False),
        (b"\xff\xfe", False),
        (json.dumps([ALICE]).encode(), True),  # no object: read raw
    ],
)
def test_the_dead_letters_of_a_user(body: bytes, removed: bool) -> None:
    assert letter_is_about(body, Subject(user_id=ALICE), {42}) is removed


def test_the_dead_letters_of_a_server_are_its_guilds_calls() -> None:
    guild = Subject(guild_id=GUILD)
    assert letter_is_about(_call(BOB), guild, set())
    assert not letter_is_about(_call(BOB, guild="300000000000000009"), guild, set())
    assert not letter_is_about(_call(BOB, guild=None), guild, set())


def test_a_letters_digest_names_its_body_and_holds_no_text() -> None:
    assert letter_digest(b"x") == letter_digest(b"x") != letter_digest(b"y")
    assert len(letter_digest(b"secret")) == 64


def test_the_receipt_has_exactly_the_seven_counts() -> None:
    receipt = ErasureCounts(1, 2, 3, 4, 5).receipt(dead_letters_removed=6, notices_to_retract=7)
    assert receipt.model_dump() == {
        "memories_deleted": 1,
        "revisions_redacted": 2,
        "teachers_removed": 3,
        "records_redacted": 4,
        "outbox_rows_deleted": 5,
        "dead_letters_removed": 6,
        "notices_to_retract": 7,
    }


def test_a_refusal_answers_to_the_context_or_not_at_all() -> None:
    asked = request({"user_id": ALICE}, "user", BOB, context={"shard_id": 3, "channel_id": BOB})
    answer = completed(asked, reason="not_the_subject")
    assert (answer.status, answer.reason, answer.receipt, answer.document) == (
        "refused",
        "not_the_subject",
        None,
        None,
    )
    [event] = refused_events(asked, answer)
    assert event.routing_key == "result.shard.3" and event.ttl_ms is None
    silent = request({"user_id": ALICE}, "user", BOB)
    assert refused_events(silent, completed(silent, reason="not_the_subject")) == []


def test_an_erasures_events_are_the_answer_audit_invalidations_and_retractions() -> None:
    asked = request({"user_id": ALICE}, "user", ALICE, context={"shard_id": 1, "channel_id": BOB})
    answer = completed(asked, receipt=Receipt(memories_deleted=1, notices_to_retract=1))
    notice = Notice("e", shard_id=4, channel_id="500", message_id="600", memory_id=9)

    events = done_events(
        asked,
        answer,
        invalidated_users=[ALICE],
        invalidated_servers=[GUILD, GUILD],
        notices=[notice],
    )

    assert [(type(e.event), e.routing_key) for e in events] == [
        (DataRequestCompleted, "result.shard.1"),
        (SubjectErased, "subject.erased.user"),
        (CacheInvalidate, f"cache.user.{ALICE}"),
        (CacheInvalidate, f"cache.persona_state.{GUILD}"),
        (NoticeRetract, "retract.shard.4"),
    ]
    audit = events[1].event
    assert isinstance(audit, SubjectErased)
    assert audit.receipt == answer.receipt and audit.subject_id == ALICE
    retract = events[-1].event
    assert isinstance(retract, NoticeRetract)
    assert (retract.channel_id, retract.message_id, retract.memory_id) == ("500", "600", 9)


def test_an_export_is_audited_without_its_document() -> None:
    asked = request({"user_id": ALICE}, "user", ALICE, kind="export")
    answer = completed(asked)
    [audit] = done_events(asked, answer)
    assert isinstance(audit.event, SubjectExported) and audit.event.receipt is None
    assert audit.routing_key == "subject.exported.user"


def test_a_repeat_answers_as_the_first_run_did() -> None:
    asked = request({"user_id": ALICE}, "user", ALICE)
    receipt = Receipt(memories_deleted=3)
    again = answer_again(asked, status="done", reason=None, receipt=receipt, document=None)
    assert (again.status, again.receipt) == ("done", receipt)
    refused = answer_again(
        asked, status="refused", reason="not_the_subject", receipt=None, document=None
    )
    assert (refused.status, refused.reason) == ("refused", "not_the_subject")
