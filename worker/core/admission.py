"""Whether a delivery may be read at all: who published it and how big it is, decided from its
properties and size alone, before its body is parsed (docs/security.md)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

__all__ = ["Refusal", "refusal"]

# The causes of `ltm_dead_lettered_total`.
UNTRUSTED: Final = "untrusted_publisher"
TOO_LARGE: Final = "too_large"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a delivery is dead-lettered unread: `reason` goes in `x-ltm-error`."""

    reason: str
    cause: str


def refusal(
    *,
    user_id: str | None,
    size: int,
    trusted_publishers: Collection[str] | None,
    max_bytes: int,
) -> Refusal | None:
    """None when the delivery may be parsed.

    `user_id` is true when present: the broker refuses one that differs from the publishing
    connection's user. `trusted_publishers` None trusts every publisher.
    """
    if trusted_publishers is not None and user_id not in trusted_publishers:
        who = "no user_id" if not user_id else f"user_id {user_id!r}"
        return Refusal(f"untrusted publisher: {who} is not in LTM_TRUSTED_PUBLISHERS", UNTRUSTED)
    if size > max_bytes:
        return Refusal(
            f"too large: {size} bytes, over LTM_MAX_MESSAGE_BYTES ({max_bytes})", TOO_LARGE
        )
    return None
