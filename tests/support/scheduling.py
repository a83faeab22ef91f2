"""How `make test` shares the tests between its two pytest-xdist processes.

Each process is a test run of its own (its own database and virtual host), so a module's
tests stay together (its module fixtures, a worker process or a console, start once), and
every module that starts broker nodes or PostgreSQL instances of its own runs in the one
process that starts them first: one cluster for the run, never two fighting for the cores.

xdist's scheduler only sees test ids, so which modules start nodes is read from their source
(`starts_nodes`); `check_node_modules`, run where the tests are collected, fails the run
when a test starts nodes through a fixture its module's source does not name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

__all__ = ["NODES_GROUP", "ModuleScheduling", "check_node_modules", "starts_nodes"]

NODES_GROUP = "localnodes"
ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _naming(fixtures: frozenset[str]) -> re.Pattern[str]:
    words = "|".join(sorted(map(re.escape, fixtures)))
    return re.compile(rf"\bmark\.localnodes\b|\b(?:{words})\b")


@functools.cache
def starts_nodes(module: str, fixtures: frozenset[str]) -> bool:
    """Whether the test module at `module` (a path from the repository's root) marks a test
    `localnodes` or names one of `fixtures`."""
    path = ROOT / module
    return path.suffix == ".py" and bool(_naming(fixtures).search(path.read_text()))


def check_node_modules(items: Iterable[pytest.Item], fixtures: frozenset[str]) -> None:
    """Fails the collection when a test starts nodes (by its mark or a fixture it depends on,
    however indirectly) in a module whose source names neither: the scheduler would put it
    beside another cluster."""
    unnamed = sorted(
        {
            item.nodeid.partition("::")[0]
            for item in items
            if (
                item.get_closest_marker("localnodes") is not None
                or fixtures & set(getattr(item, "fixturenames", ()))
            )
            and not starts_nodes(item.nodeid.partition("::")[0], fixtures)
        }
    )
    if unnamed:
        raise pytest.UsageError(
            "these modules start nodes of their own through a fixture they do not name; "
            f"mark their tests `localnodes`: {', '.join(unnamed)}"
        )


class ModuleScheduling(LoadScopeScheduling):
    """xdist's `loadscope` by module, with every module that starts nodes in one unit, and
    that unit handed out first: it is the run's longest."""

    def __init__(self, config: pytest.Config, log: Any, fixtures: frozenset[str]) -> None:
        super().__init__(config, log)
        self.fixtures = fixtures

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.partition("::")[0]
        return NODES_GROUP if starts_nodes(module, self.fixtures) else module

    def _assign_work_unit(self, node: Any) -> None:
        if NODES_GROUP in self.workqueue:
            self.workqueue.move_to_end(NODES_GROUP, last=False)
        super()._assign_work_unit(node)
