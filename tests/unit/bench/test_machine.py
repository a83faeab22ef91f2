"""`bench.machine.settle`: waits for a quiet machine, and says when it never was."""

from __future__ import annotations

from bench.machine import settle


async def test_a_quiet_machine_is_held_quiet_for_the_whole_hold() -> None:
    # Every machine is under 101 % busy: quiet from the first sample on.
    settled = await settle(below=1.01, hold_s=0.3, timeout_s=5.0, step_s=0.05)

    assert settled.quiet
    assert 0.3 <= settled.waited_s < 5.0
    assert 0.0 <= settled.busy_at_start <= 1.0


async def test_a_machine_never_quiet_is_reported_after_the_timeout() -> None:
    # Nothing is ever under 0 % busy.
    settled = await settle(below=0.0, hold_s=0.1, timeout_s=0.4, step_s=0.05)

    assert not settled.quiet
    assert settled.waited_s >= 0.4
    assert settled.as_dict()["quiet"] is False
