"""`ltm`'s command line: every command and option described, `--version`, `ltm call FILE`, and
one line (no traceback) for a broker or database that does not answer."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from harness.processes import free_port
from ltm.commands import build_parser
from ltm.main import main


@pytest.fixture(autouse=True)
def _logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # `main` points the logs at the stderr of its time, here a capture closed after the test:
    # later tests in the same run would log into a closed file.
    monkeypatch.setattr("ltm.main.configure_logging", lambda *_: None)


def _parsers(
    parser: argparse.ArgumentParser, name: str = "ltm"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def _subcommand_helps(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str | None]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield choice.dest, choice.help


def test_every_command_and_option_is_described() -> None:
    for name, parser in _parsers(build_parser()):
        assert parser.description, f"`{name} --help` has no description"
        for command, text in _subcommand_helps(parser):
            assert text, f"`{name} --help` lists {command} without a description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"`{name}`: {'/'.join(action.option_strings) or action.dest}"


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--help"])

    assert ended.value.code == 0
    out = capsys.readouterr().out
    for code in ("0", "1", "2", "3", "141"):
        assert f"\n  {code} " in out


def test_version_is_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["--version"])

    assert ended.value.code == 0
    assert capsys.readouterr().out.strip() == f"ltm {version('tomori-ltm')}"


@pytest.mark.parametrize(
    ("argv", "file", "as_json"),
    [
        (["call", "c.json"], "c.json", False),
        (["call", "c.json", "--json"], "c.json", True),
        (["call", "--json", "c.json"], None, "c.json"),  # the older spelling
        (["call", "-"], "-", False),
    ],
)
def test_call_takes_its_file_positionally_or_after_json(
    argv: list[str], file: str | None, as_json: object
) -> None:
    args = build_parser().parse_args(argv)

    assert (args.file, args.json) == (file, as_json)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["call"], "the call file is missing"),
        (["call", "--json"], "the call file is missing"),
        (["call", "a.json", "--json", "b.json"], "give the call file once"),
    ],
)
def test_call_without_exactly_one_file_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(argv)

    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ltm call")
    assert message in err


def test_a_missing_call_file_is_a_usage_error_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["call", str(tmp_path / "missing.json")])

    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "ltm call: error: cannot read" in err and "missing.json" in err
    assert "No such file or directory" in err
    assert "Traceback" not in err


def test_a_file_that_is_not_a_tool_call_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "call.json"
    path.write_text("[1, 2]")

    assert main(["call", str(path)]) == 2

    err = capsys.readouterr().err
    assert "ltm call: the file is not a tool call: the file must hold a JSON object" in err


def test_a_broker_that_does_not_answer_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_AMQP_URL", f"amqp://guest:guest@127.0.0.1:{free_port()}/")
    assert main(["dlq", "list"]) == 1
    err = capsys.readouterr().err
    assert "ltm dlq: AMQPConnectionError" in err
    assert "Traceback" not in err


def test_a_database_that_does_not_answer_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{free_port()}/x")
    assert main(["audit", "history", "1"]) == 1
    err = capsys.readouterr().err
    assert "ltm audit: OperationalError" in err
    assert "Traceback" not in err
