"""Each command line runs its command with its arguments: what the command groups hand to the
printing and the composition root, with nothing of argparse left in it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from infra.settings import Settings
from ltm.commands import build_parser
from ltm.commands.common import Run, UsageProblem
from ltm.commands.dlq import replay_dead_letters
from ltm.main import main
from operators.dead_letters import DeadLetterFilter

# What a command ran: the function's name, and what it was given besides the settings.
Ran = tuple[str, tuple[Any, ...], dict[str, Any]]

# The functions the commands run, where each command finds them when it runs.
_ASYNC = (
    "ltm.composition.declare_topology",
    "ltm.composition.run_worker",
    "gateway.process.run_gateway",
    "console.app.run_console",
    "ltm.commands.call.call_and_print",
    "ltm.commands.dlq.list_dead_letters",
    "ltm.commands.dlq.replay_dead_letters",
    "ltm.commands.dlq.purge_dead_letters",
    "ltm.commands.audit.tail_audit",
    "ltm.commands.audit.print_history",
    "ltm.commands.memory.restore_and_print",
    "ltm.commands.memory.list_memories",
)
_SYNC = (
    "ltm.composition.migrate",
    "ltm.commands.setup.print_definitions",
    "console.passwords.print_password_hash",
)


def _given(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(arg for arg in args if not isinstance(arg, Settings))


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Ran]:
    runs: list[Ran] = []

    def sync(name: str) -> Callable[..., int]:
        def runs_it(*args: Any, **kwargs: Any) -> int:
            runs.append((name, _given(args), kwargs))
            return 0

        return runs_it

    def asynchronous(name: str) -> Callable[..., Coroutine[Any, Any, int]]:
        async def runs_it(*args: Any, **kwargs: Any) -> int:
            runs.append((name, _given(args), kwargs))
            return 0

        return runs_it

    for target in _SYNC:
        monkeypatch.setattr(target, sync(target.rsplit(".", 1)[1]))
    for target in _ASYNC:
        monkeypatch.setattr(target, asynchronous(target.rsplit(".", 1)[1]))
    return runs


# What `ltm dlq` commands are given when the command line says nothing of it.
_LISTED: dict[str, Any] = {"dead_letter_filter": None, "group": False}
_REPLAYED: dict[str, Any] = {
    "dead_letter_filter": None,
    "reason": None,
    "rate": 50,
    "dry_run": False,
    "actor": "operator:alice",
}
_PURGED: dict[str, Any] = {"dead_letter_filter": None, "actor": "operator:alice"}


def _run(*argv: str) -> int:
    args = build_parser().parse_args(argv)
    run: Run = args.run
    return run(args, Settings())


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("migrate",), ("migrate", (), {"roles": False})),
        (("migrate", "--roles"), ("migrate", (), {"roles": True})),
        (("topology",), ("declare_topology", (), {"recreate_audit_stream": False})),
        (("broker-definitions",), ("print_definitions", (None,), {})),
        (("broker-definitions", "--vhost", "prod"), ("print_definitions", ("prod",), {})),
        (("worker",), ("run_worker", (), {})),
        (
            ("gateway", "--shards", "1,0,1", "--shard-count", "4"),
            ("run_gateway", ((0, 1), 4), {}),
        ),
        (("console",), ("run_console", ("127.0.0.1", 8080), {})),
        (
            ("console", "--host", "0.0.0.0", "--port", "9000"),
            ("run_console", ("0.0.0.0", 9000), {}),
        ),
        (("console", "hash-password"), ("print_password_hash", (), {})),
        (("dlq", "list"), ("list_dead_letters", (), {**_LISTED, "as_json": False})),
        (("dlq", "list", "--json"), ("list_dead_letters", (), {**_LISTED, "as_json": True})),
        (
            ("dlq", "list", "--tool", "update_long_term_memory", "--group"),
            (
                "list_dead_letters",
                (),
                {
                    **_LISTED,
                    "dead_letter_filter": DeadLetterFilter(tool="update_long_term_memory"),
                    "group": True,
                    "as_json": False,
                },
            ),
        ),
        (
            ("dlq", "replay", "--all", "--reason", "fixed", "--operator", "alice"),
            ("replay_dead_letters", (None,), {**_REPLAYED, "reason": "fixed", "as_json": False}),
        ),
        (
            ("dlq", "replay", "--id", "e-1", "--json", "--operator", "alice"),
            ("replay_dead_letters", ("e-1",), {**_REPLAYED, "as_json": True}),
        ),
        (
            (
                "dlq",
                "replay",
                "--error",
                "Timeout",
                "--guild",
                "1001",
                "--since",
                "2026-12-04 10:00",
                "--reason",
                "db back",
                "--rate",
                "0",
                "--dry-run",
                "--operator",
                "alice",
            ),
            (
                "replay_dead_letters",
                (None,),
                {
                    **_REPLAYED,
                    "dead_letter_filter": DeadLetterFilter(
                        error="Timeout", guild="1001", since=datetime(2026, 12, 4, 10, tzinfo=UTC)
                    ),
                    "reason": "db back",
                    "rate": 0.0,
                    "dry_run": True,
                    "as_json": False,
                },
            ),
        ),
        (
            ("dlq", "purge", "--operator", "alice"),
            ("purge_dead_letters", (), {**_PURGED, "yes": False, "as_json": False}),
        ),
        (
            ("dlq", "purge", "--yes", "--json", "--operator", "alice"),
            ("purge_dead_letters", (), {**_PURGED, "yes": True, "as_json": True}),
        ),
        (
            ("dlq", "purge", "--tool", "t", "--yes", "--operator", "alice"),
            (
                "purge_dead_letters",
                (),
                {
                    **_PURGED,
                    "dead_letter_filter": DeadLetterFilter(tool="t"),
                    "yes": True,
                    "as_json": False,
                },
            ),
        ),
        (("audit", "tail"), ("tail_audit", ("first",), {"follow": False, "as_json": False})),
        (
            ("audit", "tail", "--from", "LAST", "--follow"),
            ("tail_audit", ("last",), {"follow": True, "as_json": False}),
        ),
        (
            ("audit", "tail", "--from", "2025-01-31 12:00", "--json"),
            (
                "tail_audit",
                (datetime(2025, 1, 31, 12, tzinfo=UTC),),
                {"follow": False, "as_json": True},
            ),
        ),
        (("audit", "history", "7"), ("print_history", (7,), {"as_json": False})),
        (
            ("memory", "restore", "12"),
            ("restore_and_print", (12,), {"actor": "cli", "as_json": False}),
        ),
        (
            ("memory", "restore", "12", "--actor", "alice", "--json"),
            ("restore_and_print", (12,), {"actor": "alice", "as_json": True}),
        ),
        (
            ("memory", "list", "--guild", "10", "--persona", "2", "--user", "30", "--user", "31"),
            ("list_memories", ("10", 2, ("30", "31")), {"as_json": False}),
        ),
    ],
)
def test_a_command_line_runs_its_command_with_its_arguments(
    argv: tuple[str, ...], expected: Ran, ran: list[Ran]
) -> None:
    assert _run(*argv) == 0
    assert ran == [expected]


def test_the_call_command_carries_the_file_it_read(tmp_path: Path, ran: list[Ran]) -> None:
    path = tmp_path / "call.json"
    path.write_bytes(b'{"arguments": {}}')

    _run("call", str(path), "--json", "--timeout", "2.5")
    _run("call", "--json", str(path), "--timeout", "2.5")

    expected = ("call_and_print", (b'{"arguments": {}}',), {"timeout": 2.5, "as_json": True})
    assert ran == [expected, expected]


def test_a_bad_tail_start_is_a_usage_problem(ran: list[Ran]) -> None:
    with pytest.raises(UsageProblem, match="--from must be first, last, or a time"):
        _run("audit", "tail", "--from", "yesterday")
    assert ran == []


def test_a_bad_tail_start_is_exit_2_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("ltm.main.configure_logging", lambda *_: None)

    assert main(["audit", "tail", "--from", "yesterday"]) == 2

    err = capsys.readouterr().err
    assert err.startswith("--from must be first, last, or a time")
    assert "yesterday" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("dlq", "replay"), "say which: --id EVENT_ID, --all, or filters"),
        (("dlq", "replay", "--id", "e-1", "--tool", "t"), "--id or filters, not both"),
        (("dlq", "replay", "--all", "--tool", "t", "--reason", "r"), "--all or filters"),
        (("dlq", "list", "--since", "yesterday"), "--since: not a time: 'yesterday'"),
    ],
)
def test_a_dead_letter_command_that_does_not_say_which_is_a_usage_problem(
    argv: tuple[str, ...], problem: str, ran: list[Ran]
) -> None:
    with pytest.raises(UsageProblem, match=re.escape(problem)):
        _run(*argv)
    assert ran == []


def test_a_replay_of_many_without_a_reason_is_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Refused before anything is asked of the broker: the settings point nowhere.
    code = asyncio.run(replay_dead_letters(Settings(), None, dead_letter_filter=None))

    assert code == 2
    assert "--reason TEXT is required" in capsys.readouterr().err
