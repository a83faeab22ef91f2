"""`bench.rounds`: contenders take turns, so that the machine's drift favours none."""

from __future__ import annotations

from bench.rounds import turn_order


def test_the_order_turns_round_every_other_round() -> None:
    assert turn_order([1, 2, 4], 1) == [1, 2, 4]
    assert turn_order([1, 2, 4], 2) == [4, 2, 1]
    assert turn_order([1, 2, 4], 3) == [1, 2, 4]
