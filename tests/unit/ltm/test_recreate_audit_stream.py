"""`ltm topology --recreate-audit-stream`: asked on a terminal, refused without one."""

from __future__ import annotations

import io

import pytest

from infra.settings import Settings
from ltm.commands import build_parser
from ltm.commands.setup import confirm_recreating_audit_stream
from operators.display import ExitCode


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


SETTINGS = Settings(amqp_prefix="ltm")


@pytest.mark.parametrize(
    ("answer", "code"),
    [("y\n", ExitCode.OK), ("yes\n", ExitCode.OK), ("n\n", ExitCode.FAILED), ("", ExitCode.FAILED)],
)
def test_on_a_terminal_only_yes_goes_on(answer: str, code: ExitCode) -> None:
    out, err = io.StringIO(), io.StringIO()

    assert (
        confirm_recreating_audit_stream(SETTINGS, stdin=_Terminal(answer), out=out, err=err) == code
    )
    assert "delete ltm.audit and every event it holds" in out.getvalue()


def test_without_a_terminal_it_is_refused_as_a_usage_problem() -> None:
    err = io.StringIO()

    code = confirm_recreating_audit_stream(
        SETTINGS, stdin=io.StringIO("y\n"), out=io.StringIO(), err=err
    )

    assert code == ExitCode.USAGE
    assert "pass --yes" in err.getvalue()


def test_the_options_parse() -> None:
    args = build_parser().parse_args(["topology", "--recreate-audit-stream", "--yes"])

    assert args.recreate_audit_stream and args.yes
    plain = build_parser().parse_args(["topology"])
    assert not plain.recreate_audit_stream and not plain.yes
