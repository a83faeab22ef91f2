"""Sessions, CSRF tokens, operator names and the login throttle, on a clock of the test's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from console.core.sessions import LoginThrottle, Sessions, actor_of, csrf_matches, operator_name


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_found_by_its_token_until_it_expires() -> None:
    clock = Clock()
    sessions = Sessions(ttl_s=60, clock=clock)
    token, session = sessions.open("ann")

    assert sessions.find(token) == session
    assert session.actor == "console:ann"
    clock.now += 59
    assert sessions.find(token) == session
    clock.now += 1
    assert sessions.find(token) is None
    assert len(sessions) == 0


def test_an_unknown_or_missing_token_finds_nothing_and_close_ends_a_session() -> None:
    sessions = Sessions(ttl_s=60)
    token, _ = sessions.open("ann")
    other, _ = sessions.open("bob")

    assert sessions.find(None) is None
    assert sessions.find("") is None
    assert sessions.find(token + "x") is None
    sessions.close(token)
    assert sessions.find(token) is None
    assert sessions.find(other) is not None


def test_tokens_and_csrf_tokens_differ_per_session_and_are_not_kept_in_clear() -> None:
    sessions = Sessions(ttl_s=60)
    first_token, first = sessions.open("ann")
    second_token, second = sessions.open("ann")

    assert first_token != second_token
    assert first.csrf_token != second.csrf_token
    assert first_token not in repr(sessions)


def test_csrf_matches_only_the_sessions_own_token() -> None:
    _, session = Sessions(ttl_s=60).open("ann")

    assert csrf_matches(session, session.csrf_token)
    assert not csrf_matches(session, None)
    assert not csrf_matches(session, "")
    assert not csrf_matches(session, session.csrf_token[:-1])
    assert not csrf_matches(session, "é" + session.csrf_token)


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("ann", "ann"),
        ("  ann.lee-2_b ", "ann.lee-2_b"),
        ("", None),
        ("-ann", None),
        ("ann lee", None),
        ("<script>", None),
        ("a" * 41, None),
        ("a" * 40, "a" * 40),
        ("ânn", None),
    ],
)
def test_operator_names(typed: str, name: str | None) -> None:
    assert operator_name(typed) == name


def test_actor_of_a_name() -> None:
    assert actor_of("ann") == "console:ann"


def test_an_address_waits_after_its_failures_until_the_oldest_leaves_the_window() -> None:
    clock = Clock()
    throttle = LoginThrottle(per_address=3, overall=100, window_s=60, clock=clock)
    for _ in range(2):
        throttle.failed("10.0.0.1")
        clock.now += 10
    assert throttle.retry_after("10.0.0.1") is None
    throttle.failed("10.0.0.1")

    assert throttle.retry_after("10.0.0.1") == pytest.approx(40)
    assert throttle.retry_after("10.0.0.2") is None
    clock.now += 40
    assert throttle.retry_after("10.0.0.1") is None


def test_failures_from_many_addresses_close_the_door_for_all() -> None:
    clock = Clock()
    throttle = LoginThrottle(per_address=3, overall=5, window_s=60, clock=clock)
    for address in range(5):
        throttle.failed(f"10.0.0.{address}")

    assert throttle.retry_after("10.0.9.9") == pytest.approx(60)


def test_a_success_clears_its_address_failures() -> None:
    throttle = LoginThrottle(per_address=2, overall=100, window_s=60, clock=Clock())
    throttle.failed("10.0.0.1")
    throttle.succeeded("10.0.0.1")
    throttle.failed("10.0.0.1")

    assert throttle.retry_after("10.0.0.1") is None
