"""Data requests decided without I/O: whether one is refused, which dead letters an erasure
removes, and the answer and events of a request once its work is done.

A request is refused, changing nothing, when its requester may not ask about its subject
(docs/data-rights.md, "Requests"). An erasure's receipt counts what it did; its events are
the answer (to the request's shard, when it has a context), the `subject.*` audit event
(no text), the gateways' cache invalidations and one `notice.retract` per notice of an erased
memory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from contracts import (
    CacheInvalidate,
    DataRequestCompleted,
    DataRequestRequested,
    ExportDocument,
    NoticeRetract,
    Receipt,
    SubjectErased,
    SubjectExported,
    cache_routing_key,
    result_routing_key,
    retract_routing_key,
    subject_routing_key,
)
from contracts.cache import CacheName
from contracts.data_requests import RefusalReason, Subject
from worker.core.outgoing import OutgoingEvent

__all__ = [
    "ERASED_ACTOR",
    "ErasureCounts",
    "Notice",
    "answer_again",
    "answer_event",
    "completed",
    "done_events",
    "letter_digest",
    "letter_is_about",
    "refusal_of",
    "refused_events",
]

# What a redacted revision names as its actor, and a revision whose actor was erased.
ERASED_ACTOR: Final = "erased"


def refusal_of(
    request: DataRequestRequested,
    *,
    publisher_user_id: str | None,
    trusted_publishers: Collection[str] | None,
    operator_user: str,
) -> RefusalReason | None:
    """Why the request is refused, or None when it may run.

    `publisher_user_id`: the delivery's AMQP user_id (the broker vouches for it). An operator's
    request must come from the operators' broker account once publishers are checked at all
    (`trusted_publishers` set); a local run trusts every kind.
    """
    by, subject = request.requested_by, request.subject
    if by.kind == "operator":
        if trusted_publishers is not None and publisher_user_id != operator_user:
            return "untrusted_publisher"
        return None
    if subject.kind == "guild":
        return "guild_subject_by_user" if by.kind in ("user", "discord_deleted_user") else None
    if by.kind in ("server_owner", "bot_removed"):
        return "not_the_subject"
    if by.kind == "user" and by.id != subject.user_id:
        return "not_the_subject"
    return None


def completed(
    request: DataRequestRequested,
    *,
    reason: RefusalReason | None = None,
    receipt: Receipt | None = None,
    document: ExportDocument | None = None,
) -> DataRequestCompleted:
    """The answer: refused with `reason`, else done (an erasure's `receipt`, an export's
    `document`)."""
    return DataRequestCompleted(
        request_id=request.request_id,
        kind=request.kind,
        subject=request.subject,
        requested_by=request.requested_by,
        status="refused" if reason is not None else "done",
        reason=reason,
        receipt=receipt if reason is None and request.kind == "erase" else None,
        document=document if reason is None else None,
    )


def answer_again(
    request: DataRequestRequested,
    *,
    status: str,
    reason: RefusalReason | None,
    receipt: Receipt | None,
    document: ExportDocument | None,
) -> DataRequestCompleted:
    """A repeated request's answer, from what its first run stored: refused or done as then,
    addressed as the repeated request asks (its own context)."""
    if status == "refused":
        return completed(request, reason=reason or "not_the_subject")
    return completed(request, receipt=receipt or Receipt(), document=document)


def answer_event(
    request: DataRequestRequested, answer: DataRequestCompleted, reply_ttl_ms: int | None = None
) -> OutgoingEvent:
    """The answer, to the request's shard: worth sending as long as a call's result is."""
    assert request.context is not None
    return OutgoingEvent(answer, result_routing_key(request.context.shard_id), reply_ttl_ms)


def refused_events(
    request: DataRequestRequested, answer: DataRequestCompleted, reply_ttl_ms: int | None = None
) -> list[OutgoingEvent]:
    """A refusal's one event: the answer, when the request has a context."""
    return [] if request.context is None else [answer_event(request, answer, reply_ttl_ms)]


@dataclass(frozen=True, slots=True)
class Notice:
    """A notice a gateway posted about a memory an erasure removed."""

    event_id: str
    shard_id: int
    channel_id: str
    message_id: str
    memory_id: int


@dataclass(frozen=True, slots=True)
class ErasureCounts:
    """What an erasure's transaction did, before the dead letters are counted in."""

    memories_deleted: int = 0
    revisions_redacted: int = 0
    teachers_removed: int = 0
    records_redacted: int = 0
    outbox_rows_deleted: int = 0

    def receipt(self, *, dead_letters_removed: int, notices_to_retract: int) -> Receipt:
        return Receipt(
            memories_deleted=self.memories_deleted,
            revisions_redacted=self.revisions_redacted,
            teachers_removed=self.teachers_removed,
            records_redacted=self.records_redacted,
            outbox_rows_deleted=self.outbox_rows_deleted,
            dead_letters_removed=dead_letters_removed,
            notices_to_retract=notices_to_retract,
        )


def done_events(
    request: DataRequestRequested,
    answer: DataRequestCompleted,
    *,
    invalidated_users: Iterable[str] = (),
    invalidated_servers: Iterable[str] = (),
    notices: Sequence[Notice] = (),
    reply_ttl_ms: int | None = None,
) -> list[OutgoingEvent]:
    """A done request's events: the answer (when it has a context), the `subject.*` audit
    event, then an erasure's cache invalidations and retractions."""
    subject = request.subject
    action: Literal["exported", "erased"] = "exported" if request.kind == "export" else "erased"
    fields: dict[str, Any] = {
        "request_id": request.request_id,
        "kind": request.kind,
        "subject_kind": subject.kind,
        "subject_id": subject.id,
        "requested_by": request.requested_by,
        "receipt": answer.receipt,
    }
    audit = (
        SubjectExported(**fields)
        if request.kind == "export"
        else SubjectErased(**fields, strict=request.strict, keep_learning=request.keep_learning)
    )
    events = refused_events(request, answer, reply_ttl_ms)
    events.append(OutgoingEvent(audit, subject_routing_key(action, subject.kind)))
    caches: tuple[tuple[CacheName, Iterable[str]], ...] = (
        ("user", invalidated_users),
        ("persona_state", invalidated_servers),
    )
    for cache, keys in caches:
        for key in sorted(set(keys)):
            invalidation = CacheInvalidate(cache=cache, key=key)
            events.append(OutgoingEvent(invalidation, cache_routing_key(cache, key)))
    for notice in notices:
        retract = NoticeRetract(
            channel_id=notice.channel_id,
            message_id=notice.message_id,
            memory_id=notice.memory_id,
        )
        events.append(OutgoingEvent(retract, retract_routing_key(notice.shard_id)))
    return events


def letter_is_about(body: bytes, subject: Subject, memory_ids: Collection[int]) -> bool:
    """Whether an erasure of `subject` removes this dead letter.

    A user's: a call they triggered, or one naming an erased memory (`arguments.memory_id`).
    A server's: a call in that guild, or naming one of its erased memories. A body that is no
    JSON object is removed when its raw bytes contain the subject's id.
    """
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if not isinstance(parsed, dict):
        return subject.id.encode() in body
    context = parsed.get("context")
    if isinstance(context, dict):
        key = "triggerer_id" if subject.kind == "user" else "guild_id"
        if context.get(key) == subject.id:
            return True
    arguments = parsed.get("arguments")
    if isinstance(arguments, dict) and memory_ids:
        memory_id = arguments.get("memory_id")
        if isinstance(memory_id, str) and memory_id.strip().isdigit():
            memory_id = int(memory_id.strip())
        if isinstance(memory_id, int) and not isinstance(memory_id, bool):
            return memory_id in memory_ids
    return False


def letter_digest(body: bytes) -> str:
    """A dead letter's name among the removed ones: the digest of its body (no text kept)."""
    return hashlib.sha256(body).hexdigest()
