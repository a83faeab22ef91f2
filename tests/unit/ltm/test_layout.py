"""The entry points stay where they are: only `ltm` builds processes, and the operator
commands and their use cases stay small enough to read."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# Packages that must not reach up into the entry points or the other processes.
NEVER_IMPORTED = {
    "worker": ("ltm", "gateway", "console"),
    "console": ("ltm",),
    "gateway": ("ltm", "worker", "console"),
}
SMALL = ("ltm", "worker/ops", "operators")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules(folder: str) -> Iterator[Path]:
    yield from sorted((ROOT / folder).rglob("*.py"))


def _imported(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


@pytest.mark.parametrize("package", sorted(NEVER_IMPORTED))
def test_a_package_never_imports_the_entry_points_or_another_process(package: str) -> None:
    forbidden = NEVER_IMPORTED[package]
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _modules(package)
        for name in _imported(ast.parse(path.read_text(encoding="utf-8")))
        if name.split(".")[0] in forbidden
    ]

    assert found == []


@pytest.mark.parametrize("folder", SMALL)
def test_entry_points_commands_and_use_cases_are_small(folder: str) -> None:
    too_long = []
    for path in _modules(folder):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}: {node.name}, {length} lines")

    assert too_long == []
