"""Each command line becomes its typed command: what the operator commands and the
composition root are given, with nothing of argparse left in it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ltm.arguments import UsageProblem, build_parser, command_of
from ltm.main import main
from ltm.processes import (
    Command,
    DeclareTopology,
    HashPassword,
    Migrate,
    RunGateway,
    RunWorker,
    ServeConsole,
)
from worker.ops.commands import (
    ListDeadLetters,
    ListMemories,
    PrintBrokerDefinitions,
    PurgeDeadLetters,
    ReplayDeadLetters,
    RestoreRevision,
    ShowHistory,
    TailAudit,
)


def _command(*argv: str) -> Command:
    return command_of(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("migrate",), Migrate(roles=False)),
        (("migrate", "--roles"), Migrate(roles=True)),
        (("topology",), DeclareTopology()),
        (("broker-definitions",), PrintBrokerDefinitions(vhost=None)),
        (("broker-definitions", "--vhost", "prod"), PrintBrokerDefinitions(vhost="prod")),
        (("worker",), RunWorker()),
        (("gateway", "--shards", "1,0,1", "--shard-count", "4"), RunGateway((0, 1), 4)),
        (("console",), ServeConsole("127.0.0.1", 8080)),
        (("console", "--host", "0.0.0.0", "--port", "9000"), ServeConsole("0.0.0.0", 9000)),
        (("console", "hash-password"), HashPassword()),
        (("dlq", "list"), ListDeadLetters(as_json=False)),
        (("dlq", "list", "--json"), ListDeadLetters(as_json=True)),
        (("dlq", "replay", "--all"), ReplayDeadLetters(event_id=None)),
        (("dlq", "replay", "--id", "e-1", "--json"), ReplayDeadLetters("e-1", as_json=True)),
        (("dlq", "purge"), PurgeDeadLetters(yes=False)),
        (("dlq", "purge", "--yes", "--json"), PurgeDeadLetters(yes=True, as_json=True)),
        (("audit", "tail"), TailAudit(start="first")),
        (("audit", "tail", "--from", "LAST", "--follow"), TailAudit(start="last", follow=True)),
        (
            ("audit", "tail", "--from", "2025-01-31 12:00", "--json"),
            TailAudit(start=datetime(2025, 1, 31, 12, tzinfo=UTC), as_json=True),
        ),
        (("audit", "history", "7"), ShowHistory(memory_id=7)),
        (("memory", "restore", "12"), RestoreRevision(revision_id=12, actor="cli")),
        (
            ("memory", "restore", "12", "--actor", "alice", "--json"),
            RestoreRevision(revision_id=12, actor="alice", as_json=True),
        ),
        (
            ("memory", "list", "--guild", "10", "--persona", "2", "--user", "30", "--user", "31"),
            ListMemories(guild="10", persona_id=2, user_ids=("30", "31")),
        ),
    ],
)
def test_a_command_line_becomes_its_typed_command(argv: tuple[str, ...], expected: Command) -> None:
    assert _command(*argv) == expected


def test_the_call_command_carries_the_file_it_read(tmp_path: Path) -> None:
    path = tmp_path / "call.json"
    path.write_bytes(b'{"arguments": {}}')

    command = _command("call", str(path), "--json", "--timeout", "2.5")

    assert command == _command("call", "--json", str(path), "--timeout", "2.5")
    assert (getattr(command, "body", None), getattr(command, "timeout", None)) == (
        b'{"arguments": {}}',
        2.5,
    )


def test_a_bad_tail_start_is_a_usage_problem() -> None:
    with pytest.raises(UsageProblem, match="--from must be first, last, or a time"):
        _command("audit", "tail", "--from", "yesterday")


def test_a_bad_tail_start_is_exit_2_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("ltm.main.configure_logging", lambda *_: None)

    assert main(["audit", "tail", "--from", "yesterday"]) == 2

    err = capsys.readouterr().err
    assert err.startswith("--from must be first, last, or a time")
    assert "yesterday" in err and "Traceback" not in err
