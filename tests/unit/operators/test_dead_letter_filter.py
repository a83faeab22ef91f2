"""Which dead letters a filter means, how they are grouped, and how a replay is paced."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from operators.dead_letters import (
    DeadLetter,
    DeadLetterFilter,
    DeadLetterGroup,
    Pace,
    group_dead_letters,
)
from operators.display import BadTime, parsed_time

NOON = datetime(2026, 12, 4, 12, tzinfo=UTC)


def _letter(
    reason: str = "TimeoutError: the database did not answer",
    *,
    cause: str = "TimeoutError",
    tool: str = "update_long_term_memory",
    guild: str | None = "1001",
    failed_at: datetime | None = NOON,
    source: str = "worker",
) -> DeadLetter:
    return DeadLetter(
        event_id="e-1",
        tool_call_id="tc-1",
        routing_key=tool,
        source="worker" if source == "worker" else "broker",
        reason=reason,
        failed_at=failed_at,
        attempts=1,
        cause=cause,
        guild_id=guild,
    )


def test_no_criterion_matches_every_letter() -> None:
    assert DeadLetterFilter().is_empty
    assert DeadLetterFilter().matches(_letter(failed_at=None, guild=None))


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        (DeadLetterFilter(error="timeouterror"), True),  # any case
        (DeadLetterFilter(error="did not answer"), True),
        (DeadLetterFilter(error="invalid envelope"), False),
        (DeadLetterFilter(tool="update_long_term_memory"), True),
        (DeadLetterFilter(tool="update_long_term"), False),  # the whole routing key
        (DeadLetterFilter(guild="1001"), True),
        (DeadLetterFilter(guild="1002"), False),
        (DeadLetterFilter(since=NOON), True),  # at or after
        (DeadLetterFilter(since=NOON + timedelta(seconds=1)), False),
        (DeadLetterFilter(error="Timeout", tool="update_long_term_memory", guild="1001"), True),
        (DeadLetterFilter(error="Timeout", guild="1002"), False),  # every criterion holds
    ],
)
def test_a_letter_matches_when_every_criterion_given_holds(
    chosen: DeadLetterFilter, expected: bool
) -> None:
    assert not chosen.is_empty
    assert chosen.matches(_letter()) is expected


def test_the_broker_reason_is_searched_too() -> None:
    exhausted = _letter("delivery_limit (queue ltm.tool_calls)", cause="delivery_limit")

    assert DeadLetterFilter(error="delivery_limit").matches(exhausted)


def test_a_letter_without_a_time_or_a_guild_does_not_match_those() -> None:
    assert not DeadLetterFilter(since=NOON).matches(_letter(failed_at=None))
    assert not DeadLetterFilter(guild="1001").matches(_letter(guild=None))


def test_the_record_of_a_filter_names_only_what_was_given() -> None:
    chosen = DeadLetterFilter(tool="t", since=datetime(2026, 12, 4, 10, 0, tzinfo=UTC))

    assert chosen.as_record() == {"tool": "t", "since": "2026-12-04T10:00:00Z"}
    assert DeadLetterFilter().as_record() == {}


def test_letters_are_grouped_by_cause_and_tool_largest_first() -> None:
    earlier = NOON - timedelta(hours=1)
    letters = [
        _letter("invalid envelope: context: missing", cause="invalid envelope"),
        _letter(failed_at=earlier),
        _letter(),
        _letter(failed_at=None),
        _letter(tool="create_long_term_memory"),
    ]

    assert group_dead_letters(letters) == [
        DeadLetterGroup("TimeoutError", "update_long_term_memory", 3, earlier, NOON),
        DeadLetterGroup("TimeoutError", "create_long_term_memory", 1, NOON, NOON),
        DeadLetterGroup("invalid envelope", "update_long_term_memory", 1, NOON, NOON),
    ]


def test_a_group_without_times_has_none() -> None:
    [group] = group_dead_letters([_letter(failed_at=None)])

    assert (group.count, group.first_failed_at, group.last_failed_at) == (1, None, None)


class _Clock:
    """Time that moves only when slept through (or told to)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _paced(rate: float, calls: int, clock: _Clock, *, work_s: float = 0.0) -> None:
    pace = Pace(rate, clock=clock, sleep=clock.sleep)

    async def run() -> None:
        for _ in range(calls):
            await pace.wait()
            clock.now += work_s

    asyncio.run(run())


def test_a_pace_keeps_to_its_schedule() -> None:
    clock = _Clock()

    _paced(100, 301, clock)

    # The first at once, then one every 10 ms: 300 intervals, three seconds.
    assert clock.now == pytest.approx(103.0)


def test_time_spent_between_slots_is_not_added_to_the_wait() -> None:
    clock = _Clock()

    _paced(100, 301, clock, work_s=0.004)

    # Sleeps per message would take 300 x (10 + 4) ms; the schedule still takes three seconds.
    assert clock.now == pytest.approx(103.0 + 0.004)


def test_a_stalled_pace_does_not_burst_more_than_its_slack() -> None:
    clock = _Clock()
    pace = Pace(10, clock=clock, sleep=clock.sleep)

    async def run() -> None:
        await pace.wait()
        clock.now += 60  # a minute's stall
        for _ in range(20):
            await pace.wait()

    asyncio.run(run())

    # Starts a new schedule: 19 intervals of 100 ms after the stall, not 600 calls owed.
    assert clock.now == pytest.approx(160.0 + 1.9)


def test_rate_zero_never_waits() -> None:
    clock = _Clock()

    _paced(0, 1000, clock)

    assert clock.slept == []


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="0 \\(no limit\\) or more"):
        Pace(-1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-04 10:00", datetime(2026, 12, 4, 10, tzinfo=UTC)),
        ("2026-12-04T10:00:00Z", datetime(2026, 12, 4, 10, tzinfo=UTC)),
        ("2026-12-04T11:00:00+01:00", datetime(2026, 12, 4, 10, tzinfo=UTC)),
    ],
)
def test_times_are_rfc_3339_or_a_date_and_minute_in_utc(text: str, expected: datetime) -> None:
    assert parsed_time(text) == expected


def test_a_time_that_is_not_one_says_what_is_taken() -> None:
    with pytest.raises(BadTime, match="RFC 3339"):
        parsed_time("yesterday")
