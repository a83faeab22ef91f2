"""The chaos run's own checks: its reading of the worker logs, and of the scopes creations
reached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.chaos.checks import check_scopes, unexpected_log_lines
from bench.chaos.plan import SAVE_OUTCOMES, PlannedCall
from bench.chaos.report import ChaosReport
from bench.chaos.world import ChaosWorld, Memory, ScopeRef, User
from contracts import MemoryStatus, ResultData, ToolCallCompleted, ToolCallRequested
from tests.unit.worker.given import context
from worker.tools.base import result_for


def _line(level: str, event: str) -> str:
    return json.dumps({"event": event, "level": level, "timestamp": "2026-12-03T16:03:34Z"})


def test_errors_the_faults_explain_are_not_reported(tmp_path: Path) -> None:
    log = tmp_path / "worker0-1.log"
    log.write_text(
        "\n".join(
            [
                _line("info", "worker.consuming"),
                _line("warning", "worker.broker_connection_lost"),
                _line("error", 'Unexpected connection close from remote "amqp://..."'),
                _line(
                    "error",
                    "error when creating transport: <AMQPConnectionError: (111, 'Connection"
                    " refused')>",
                ),
                _line("error", "worker.db_unavailable"),
            ]
        )
        + "\n"
    )
    assert unexpected_log_lines([log]) == []


def test_other_errors_and_lines_that_are_not_json_are_reported(tmp_path: Path) -> None:
    one = tmp_path / "worker0-1.log"
    one.write_text(_line("error", "Task exception was never retrieved") + "\n")
    two = tmp_path / "worker1-1.log"
    two.write_text(
        _line("critical", "worker crashed") + "\nTraceback (most recent call last):\n" + "[1]\n"
    )
    assert unexpected_log_lines([two, one]) == [
        "worker0-1.log: Task exception was never retrieved",
        "worker1-1.log: worker crashed",
        "worker1-1.log: Traceback (most recent call last):",
        "worker1-1.log: [1]",
    ]


def _world() -> ChaosWorld:
    owner = User(user_id=5, disc_id="100000000000000005", name="Chaos5", privacy=0)
    seeded = Memory(1, "server_wide", "seeded", 7, server_id=3)
    personal = Memory(2, "target_user", "global fact", 0, owner=owner)
    return ChaosWorld(places=[], users=[owner], memories={1: seeded, 2: personal}, server_limit=3)


def _creation(n: int, text: str, scope: ScopeRef = ("server_wide", 3, 7)) -> PlannedCall:
    call = ToolCallRequested(
        tool_call_id=f"chaos-{n}",
        tool_name="create_long_term_memory",
        arguments={},
        context=context(),
    )
    return PlannedCall(call, "create_server", SAVE_OUTCOMES, content=text, scope=scope)


def _revision(revision_id: int, memory_id: int, action: str, after: str | None) -> dict[str, Any]:
    return {
        "revision_id": revision_id,
        "memory_id": memory_id,
        "action": action,
        "content_after": after,
    }


def test_a_scope_replayed_within_its_limit_and_without_twins_passes() -> None:
    created = {10: _creation(1, "a"), 11: _creation(2, "b"), 12: _creation(3, "c")}
    revisions = [
        _revision(1, 10, "created", "a"),
        _revision(2, 1, "deleted", None),  # room for one more
        _revision(3, 11, "created", "b"),
        _revision(4, 12, "created", "C"),
    ]
    report = ChaosReport()
    check_scopes(_world(), revisions, created, [], report)
    assert report.scope_errors == []


def test_a_scope_over_its_limit_or_with_a_text_twice_is_reported() -> None:
    created = {
        10: _creation(1, "a"),
        11: _creation(2, " A "),
        12: _creation(3, "b"),
        13: _creation(4, "knows", ("target_user", 5, 7)),
        14: _creation(5, "Global  FACT", ("target_user", 5, 7)),
    }
    revisions = [
        _revision(1, 10, "created", "a"),
        _revision(2, 11, "created", " A "),
        _revision(3, 12, "created", "b"),
        _revision(4, 13, "created", "knows"),
        _revision(5, 14, "created", "Global  FACT"),
    ]
    report = ChaosReport()
    check_scopes(_world(), revisions, created, [], report)
    assert len(report.scope_errors) == 3, report.scope_errors
    assert "says what another already said" in report.scope_errors[0]
    assert "4 memories after creating 12, limit 3" in report.scope_errors[1]
    assert "memory 14 says what another" in report.scope_errors[2]


def test_refusals_must_name_what_they_refuse_for() -> None:
    created = {10: _creation(1, "a")}
    revisions = [_revision(1, 10, "created", "a")]
    duplicate, wrong_duplicate, limit = _creation(2, "A"), _creation(3, "b"), _creation(4, "c")

    def refusal(planned: PlannedCall, status: MemoryStatus, **data: Any) -> ToolCallCompleted:
        return result_for(planned.call, status, "refused", ResultData(**data))

    report = ChaosReport()
    check_scopes(
        _world(),
        revisions,
        created,
        [
            (duplicate, refusal(duplicate, MemoryStatus.SAVE_DUPLICATE, memory_id=10)),
            (wrong_duplicate, refusal(wrong_duplicate, MemoryStatus.SAVE_DUPLICATE, memory_id=10)),
            (
                limit,
                refusal(limit, MemoryStatus.SAVE_LIMIT_EXCEEDED, current_count=2, max_allowed=3),
            ),
        ],
        report,
    )
    assert [error.split(":")[0] for error in report.scope_errors] == ["chaos-3", "chaos-4"]
