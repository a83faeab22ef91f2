"""What a chaos run counted and found, as a table and a list of problems."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["ChaosReport", "print_report"]


@dataclass
class ChaosReport:
    sent: int = 0
    publishes: int = 0
    duplicate_publishes: int = 0
    answered: int = 0
    lost: int = 0
    writes_applied_twice: int = 0
    embeds_posted_twice: int = 0
    embeds_posted: int = 0
    embeds_missing: int = 0
    dead_lettered: int = 0
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)
    replayed: int = 0
    kills: int = 0
    failpoint_deaths: int = 0
    broker_closures: int = 0
    stalls: int = 0
    db_faults: int = 0
    db_fault_kind: str = "none"
    unrecorded_answers: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    revisions: int = 0
    duration_s: float = 0.0
    chain_errors: list[str] = field(default_factory=list)
    model_errors: list[str] = field(default_factory=list)
    status_errors: list[str] = field(default_factory=list)
    embed_errors: list[str] = field(default_factory=list)
    scope_errors: list[str] = field(default_factory=list)
    created: int = 0
    undecodable_events: int = 0
    harness_reconnects: int = 0
    log_errors: list[str] = field(default_factory=list)
    log_dir: str = ""
    # Data requests of users beside the world: exports and erasures done, and what an erasure
    # left behind (`bench.chaos.data_rights`).
    exports: int = 0
    erasures: int = 0
    erasure_errors: list[str] = field(default_factory=list)
    # The cluster run's kills: what was killed, and the seconds from the kill to the first
    # call answered after it (None: none was).
    node_kills: list[tuple[str, float | None]] = field(default_factory=list)
    # Processes that did not survive a kill of a node they were not even all connected to.
    survival_errors: list[str] = field(default_factory=list)

    @property
    def duplicated(self) -> int:
        return self.writes_applied_twice + self.embeds_posted_twice

    def problems(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{self.lost} call(s) never answered")
        if self.writes_applied_twice:
            found.append(f"{self.writes_applied_twice} write(s) applied more than once")
        if self.embeds_posted_twice:
            found.append(f"{self.embeds_posted_twice} embed(s) posted more than once")
        if self.embeds_missing:
            found.append(f"{self.embeds_missing} successful call(s) without their embed")
        if self.undecodable_events:
            found.append(f"{self.undecodable_events} undecodable message(s) on the shard keys")
        found += [
            f"no call answered after: {what}"
            for what, seconds in self.node_kills
            if seconds is None
        ]
        for kind, errors in (
            ("survival", self.survival_errors),
            ("chain", self.chain_errors),
            ("model", self.model_errors),
            ("status", self.status_errors),
            ("embed", self.embed_errors),
            ("scope", self.scope_errors),
            ("erasure", self.erasure_errors),
            ("worker log", self.log_errors),
        ):
            found += [f"{kind}: {error}" for error in errors[:20]]
            if len(errors) > 20:
                found.append(f"{kind}: ... and {len(errors) - 20} more")
        return found

    def table(self) -> str:
        fault = f"db {self.db_fault_kind}s" if self.db_fault_kind != "none" else "db faults"
        rows = [
            ("sent (distinct tool calls)", self.sent),
            ("publishes (with duplicates)", f"{self.publishes} ({self.duplicate_publishes} dup)"),
            ("answered", self.answered),
            ("lost", self.lost),
            (
                "duplicated (writes twice + embeds twice)",
                f"{self.duplicated} ({self.writes_applied_twice} + {self.embeds_posted_twice})",
            ),
            ("dead-lettered", self.dead_lettered),
            ("replayed", self.replayed),
            ("kills (SIGKILL by the harness)", self.kills),
            ("failpoint deaths (SIGKILL at a failpoint)", self.failpoint_deaths),
            ("broker closures", self.broker_closures),
            ("broker path stalls (until heartbeats give up)", self.stalls),
            (fault, self.db_faults),
            ("duration", f"{self.duration_s:.1f} s"),
            ("harness reconnects (its own connection)", self.harness_reconnects),
            ("revisions written", self.revisions),
            ("memories created", self.created),
            ("embeds posted", self.embeds_posted),
            ("embeds missing", self.embeds_missing),
            ("unrecorded answers (db_error, internal)", dict(self.unrecorded_answers) or 0),
            (
                "chain / model / status / embed / scope errors",
                f"{len(self.chain_errors)} / {len(self.model_errors)}"
                f" / {len(self.status_errors)} / {len(self.embed_errors)}"
                f" / {len(self.scope_errors)}",
            ),
            ("data requests done (exports / erasures)", f"{self.exports} / {self.erasures}"),
            ("erasure errors (a request not done, a text left)", len(self.erasure_errors)),
            ("unexpected worker log lines", len(self.log_errors)),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
        lines.append("statuses:")
        lines += [f"  {status}: {n}" for status, n in sorted(self.statuses.items())]
        if self.node_kills:
            lines.append(
                "kills (time from the kill to the first answer of a call published after it):"
            )
            lines += [
                f"  {what}: " + ("never" if seconds is None else f"{seconds:.1f} s")
                for what, seconds in self.node_kills
            ]
        if self.dead_letter_reasons:
            lines.append("dead-letter reasons:")
            lines += [f"  {reason}: {n}" for reason, n in self.dead_letter_reasons.most_common()]
        return "\n".join(lines)


def print_report(report: ChaosReport, heading: str) -> int:
    """The heading, the table and every problem; the exit status (1 when a check failed)."""
    print(heading)
    print(report.table())
    problems = report.problems()
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("OK: nothing lost, nothing applied or posted twice" if not problems else "FAILED")
    return 1 if problems else 0
