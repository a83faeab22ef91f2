"""Whether a delivery may be parsed: its publisher and its size, decided before its body."""

from __future__ import annotations

import pytest

from worker.core.admission import Refusal, refusal

TRUSTED = frozenset({"ltm-bot", "ltm-operator"})


def _refusal(
    user_id: str | None, size: int = 100, trusted: frozenset[str] | None = TRUSTED
) -> Refusal | None:
    return refusal(user_id=user_id, size=size, trusted_publishers=trusted, max_bytes=1000)


@pytest.mark.parametrize("user_id", ["ltm-bot", "ltm-operator"])
def test_a_trusted_publishers_call_of_any_size_within_the_limit_is_read(user_id: str) -> None:
    assert _refusal(user_id, size=1000) is None


@pytest.mark.parametrize(
    ("user_id", "who"),
    [(None, "no user_id"), ("", "no user_id"), ("intruder", "user_id 'intruder'")],
)
def test_an_untrusted_publisher_is_refused(user_id: str | None, who: str) -> None:
    assert _refusal(user_id) == Refusal(
        f"untrusted publisher: {who} is not in LTM_TRUSTED_PUBLISHERS", "untrusted_publisher"
    )


def test_without_a_list_every_publisher_is_read() -> None:
    assert _refusal(None, trusted=None) is None
    assert _refusal("anyone", trusted=None) is None


def test_a_body_over_the_limit_is_refused() -> None:
    assert _refusal("ltm-bot", size=1001) == Refusal(
        "too large: 1001 bytes, over LTM_MAX_MESSAGE_BYTES (1000)", "too_large"
    )


def test_an_untrusted_publisher_is_named_before_the_size() -> None:
    refused = _refusal("intruder", size=10**6)
    assert refused is not None and refused.cause == "untrusted_publisher"
