"""`bench.cpu`: the CPU split per call, from /proc samples written out here."""

from __future__ import annotations

import os

import pytest

from bench.cpu import (
    CpuSample,
    MachineTicks,
    ProcessTicks,
    core_share,
    group_ticks,
    parse_machine_stat,
    parse_process_stat,
    read_sample,
    split_per_call,
)

POSTMASTER, BACKEND, LATE_BACKEND = 100, 101, 102
BEAM, BENCH, WORKER, WORKER_CHILD, PUBLISHER = 200, 300, 301, 302, 303


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int, cstime: int) -> str:
    # Fields 3 to 17 of proc(5): state, ppid, pgrp, session, tty, tpgid, flags, minflt,
    # cminflt, majflt, cmajflt, utime, stime, cutime, cstime; then a few more.
    middle = f"S {ppid} 1 1 0 -1 4194560 36 0 0 0 {utime} {stime} {cutime} {cstime}"
    return f"{pid} ({comm}) {middle} 20 0 1 0 245440 3133440 407\n"


def test_a_process_stat_is_read_after_the_command_name_whatever_it_holds() -> None:
    text = _stat(7, "postgres: 15/main: a (b) c", 6, utime=11, stime=5, cutime=3, cstime=2)

    assert parse_process_stat(text) == ProcessTicks(ppid=6, ticks=21)


def test_the_machine_is_busy_with_user_nice_system_irq_and_softirq_only() -> None:
    text = "cpu  1000 10 200 5000 40 3 7 30 50 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n"

    machine = parse_machine_stat(text)

    assert machine == MachineTicks(busy=1000 + 10 + 200 + 3 + 7, elapsed=1220 + 5000 + 40 + 30)


def test_a_text_that_is_not_proc_stat_is_refused() -> None:
    with pytest.raises(ValueError, match="not /proc/stat"):
        parse_machine_stat("intr 1 2 3\n")


def _table(**ticks: tuple[int, int]) -> dict[int, ProcessTicks]:
    """pid (as `p<pid>`) → (ppid, ticks)."""
    return {int(key[1:]): ProcessTicks(ppid, used) for key, (ppid, used) in ticks.items()}


def test_a_group_sums_its_root_and_descendants_and_stops_at_another_groups_root() -> None:
    processes = _table(
        p300=(1, 50),  # the bench
        p301=(300, 400),  # a worker, a group of its own
        p302=(301, 7),  # the worker's child
        p303=(300, 20),  # the publisher
        p200=(1, 900),  # not a descendant
    )

    assert group_ticks(processes, [WORKER]) == 407
    assert group_ticks(processes, [BENCH], stop_at=[WORKER]) == 70
    assert group_ticks(processes, [BENCH]) == 477


def test_a_group_whose_root_is_gone_is_an_error_not_a_zero() -> None:
    with pytest.raises(RuntimeError, match="ended during the run"):
        group_ticks(_table(p300=(1, 50)), [WORKER])


def _sample(busy: int, elapsed: int, **ticks: tuple[int, int]) -> CpuSample:
    return CpuSample(_table(**ticks), MachineTicks(busy=busy, elapsed=elapsed))


def test_the_split_per_call_keeps_what_ended_and_names_the_rest_other() -> None:
    groups = {"worker": [WORKER], "broker": [BEAM], "database": [POSTMASTER], "bench": [BENCH]}
    before = _sample(
        1_000,
        4_000,
        p100=(1, 10),
        p101=(100, 30),  # a backend that ends within the run
        p200=(1, 500),
        p300=(1, 40),
        p301=(300, 100),
    )
    after = _sample(
        1_000 + 200,  # 2 s of a 2-core machine at 100 ticks/s, half busy
        4_000 + 400,
        p100=(1, 10 + 45),  # the ended backend's 30 + 15 more are the postmaster's cutime now
        p102=(100, 5),  # a backend that began within the run
        p200=(1, 500 + 60),
        p300=(1, 40 + 8),
        p301=(300, 100 + 70),
        p303=(300, 4),  # the publisher, begun within the run
    )

    split = split_per_call(before, after, groups, calls=100, cores=2, ticks_per_second=100)

    # 1 tick is 10 ms; over 100 calls, 0.1 ms per call.
    assert split.ms_per_call["worker"] == pytest.approx(7.0)
    assert split.ms_per_call["broker"] == pytest.approx(6.0)
    assert split.ms_per_call["database"] == pytest.approx(2.0)  # 15 + 5 ticks
    assert split.ms_per_call["bench"] == pytest.approx(1.2)  # 8 + the publisher's 4
    assert split.ms_per_call["total"] == pytest.approx(20.0)
    assert split.ms_per_call["other"] == pytest.approx(20.0 - 7.0 - 6.0 - 2.0 - 1.2)
    assert split.busy_share == pytest.approx(0.5)
    assert split.seconds == pytest.approx(2.0)
    assert split.as_dict()["cpu_ms_per_call"]["worker"] == 7.0


def test_a_split_over_no_call_is_refused() -> None:
    sample = _sample(1, 2, p1=(0, 1))

    with pytest.raises(ValueError, match="no call"):
        split_per_call(sample, sample, {"init": [1]}, calls=0, cores=1)


def test_this_machine_can_be_sampled() -> None:
    sample = read_sample()

    assert 0 < sample.machine.busy <= sample.machine.elapsed
    assert os.getpid() in sample.processes


def test_a_core_share_is_cpu_time_over_wall_time() -> None:
    # 5 ticks of 1/100 s over 10 s: 0.05 s of CPU in 10 s, half a percent of one core.
    assert core_share(5, 10.0, ticks_per_second=100) == pytest.approx(0.005)
    assert core_share(0, 10.0, ticks_per_second=100) == 0.0
    with pytest.raises(ValueError, match="no time"):
        core_share(5, 0.0)
