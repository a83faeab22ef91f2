"""Where the machine's CPU goes during a run, per call answered: read from /proc, read-only.

A process's CPU is `utime + stime + cutime + cstime` of /proc/<pid>/stat: its own, and that of
its children that ended and were waited for. A group (a root process and its live descendants)
summed so never loses a member's time when the member ends: a PostgreSQL backend that exits
mid-run is found in the postmaster's `cutime` afterwards. A group stops at another group's
root (the workers are children of the bench, which is a group of its own).

The machine's total is the busy time of /proc/stat's first line (user, nice, system, irq,
softirq; not idle, I/O wait or steal); what no group accounts for is `other` (the kernel's
interrupts, the rest of the machine). Both count clock ticks (USER_HZ, 100 a second here): a
run of thousands of calls splits to a few hundredths of a millisecond per call.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "CpuMeter",
    "CpuSample",
    "CpuSplit",
    "MachineTicks",
    "ProcessTicks",
    "core_share",
    "group_ticks",
    "parse_machine_stat",
    "parse_process_stat",
    "read_sample",
    "split_per_call",
]

TICKS_PER_SECOND: Final = os.sysconf("SC_CLK_TCK")
PROC: Final = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessTicks:
    ppid: int
    ticks: int  # utime + stime + cutime + cstime


@dataclass(frozen=True, slots=True)
class MachineTicks:
    busy: int  # every core's user, nice, system, irq and softirq
    elapsed: int  # every core's ticks of any kind: the cores' capacity over the same time


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Every process's ticks and the machine's, at one moment."""

    processes: Mapping[int, ProcessTicks]
    machine: MachineTicks


def parse_process_stat(text: str) -> ProcessTicks:
    """/proc/<pid>/stat. The command name (field 2, in parentheses) may hold spaces and
    parentheses of its own: the fields are counted from its last `)`."""
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 of proc(5) (state): ppid is field 4, utime to cstime 14 to 17.
    return ProcessTicks(ppid=int(fields[1]), ticks=sum(int(x) for x in fields[11:15]))


def parse_machine_stat(text: str) -> MachineTicks:
    """The first line of /proc/stat: `cpu user nice system idle iowait irq softirq steal ...`
    (guest time is already in user; it is not counted twice)."""
    first = text.split("\n", 1)[0].split()
    if first[0] != "cpu":
        raise ValueError(f"not /proc/stat: {first[:1]}")
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    busy = user + nice + system + irq + softirq
    return MachineTicks(busy=busy, elapsed=busy + idle + iowait + steal)


def read_sample() -> CpuSample:
    processes: dict[int, ProcessTicks] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            processes[int(entry.name)] = parse_process_stat((entry / "stat").read_text())
        except (OSError, ValueError):
            continue  # it ended while the table was read
    machine = parse_machine_stat((PROC / "stat").read_text())
    return CpuSample(processes, machine)


def group_ticks(
    processes: Mapping[int, ProcessTicks], roots: Iterable[int], stop_at: Iterable[int] = ()
) -> int:
    """The ticks of `roots` and of their live descendants, not descending into `stop_at`
    (other groups' roots). A root that is not running is an error: its time would be lost."""
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.ppid, []).append(pid)
    fenced = set(stop_at)
    total = 0
    pending = list(roots)
    for root in pending:
        if root not in processes:
            raise RuntimeError(f"process {root} ended during the run: its CPU is not known")
    seen: set[int] = set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += processes[pid].ticks
        pending.extend(child for child in children.get(pid, ()) if child not in fenced)
    return total


def core_share(ticks: int, seconds: float, ticks_per_second: int = TICKS_PER_SECOND) -> float:
    """The share of one core that `ticks` of CPU used over `seconds` of wall time make
    (1.0: one core, all the time)."""
    if seconds <= 0:
        raise ValueError("no time passed between the samples")
    return ticks / ticks_per_second / seconds


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """Milliseconds of CPU per call answered: each group's, the rest's, the machine's total,
    and how busy the machine's cores were (1.0: every core, all the time)."""

    ms_per_call: dict[str, float]
    busy_share: float
    calls: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_ms_per_call": {key: round(value, 3) for key, value in self.ms_per_call.items()},
            "busy_share": round(self.busy_share, 3),
            "calls": self.calls,
            "seconds": round(self.seconds, 2),
        }


def split_per_call(
    before: CpuSample,
    after: CpuSample,
    groups: Mapping[str, Sequence[int]],
    calls: int,
    *,
    cores: int,
    ticks_per_second: int = TICKS_PER_SECOND,
) -> CpuSplit:
    """Each group's CPU between the two samples, and `other` and `total`, per call answered."""
    if calls <= 0:
        raise ValueError("no call was answered between the samples")
    roots = {pid for pids in groups.values() for pid in pids}
    per_call = 1000.0 / ticks_per_second / calls
    split: dict[str, float] = {}
    for name, pids in groups.items():
        others = roots - set(pids)
        used = group_ticks(after.processes, pids, others) - group_ticks(
            before.processes, pids, others
        )
        split[name] = used * per_call
    busy = after.machine.busy - before.machine.busy
    elapsed = after.machine.elapsed - before.machine.elapsed
    split["other"] = busy * per_call - sum(split.values())
    split["total"] = busy * per_call
    return CpuSplit(
        ms_per_call=split,
        busy_share=busy / elapsed if elapsed > 0 else 0.0,
        calls=calls,
        seconds=elapsed / cores / ticks_per_second,
    )


class CpuMeter:
    """Samples before and after a run, for the groups of processes named when it is made."""

    def __init__(self, groups: Mapping[str, Sequence[int]]) -> None:
        self.groups = {name: tuple(pids) for name, pids in groups.items()}
        self._before: CpuSample | None = None
        self._answered_before = 0

    def begin(self, answered: int) -> None:
        """`answered`: calls of the run answered so far; the split counts those after."""
        self._before = read_sample()
        self._answered_before = answered

    def end(self, answered: int) -> CpuSplit:
        if self._before is None:
            raise RuntimeError("the meter was not begun")
        return split_per_call(
            self._before,
            read_sample(),
            self.groups,
            answered - self._answered_before,
            cores=os.cpu_count() or 1,
        )
