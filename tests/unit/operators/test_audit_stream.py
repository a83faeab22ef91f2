"""Where the broker is asked to start the audit stream: a time start earlier by the clock skew
it tolerates, any other start as given."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from operators.audit_stream import CLOCK_SKEW, StreamStart, broker_offset


def test_a_time_start_is_sought_earlier_by_the_clock_skew() -> None:
    start = datetime(2026, 12, 6, 5, 29, 53, tzinfo=UTC)
    sought = broker_offset(start)
    assert isinstance(sought, datetime)
    assert start - sought == CLOCK_SKEW
    assert CLOCK_SKEW.total_seconds() >= 10.5  # the lag seen on a broker


@pytest.mark.parametrize("start", ["first", "last", 0, 4096])
def test_other_starts_are_sought_as_given(start: StreamStart) -> None:
    assert broker_offset(start) == start
