"""Which tool runs a call: by its `tool_name`, for every name bound to the worker's queue.

A new tool is a module with its `Tool`, an entry here, and its name in `contracts.TOOL_NAMES`
(the bindings `ltm topology` declares).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from contracts import CREATE_LONG_TERM_MEMORY, REMEMBER_THIS_FACT, UPDATE_LONG_TERM_MEMORY
from worker.tools.base import Tool
from worker.tools.create import CREATE
from worker.tools.update import UPDATE

__all__ = ["TOOLS", "TOOLS_IN_ORDER", "tool_for"]

# In the order a batch runs them: each batch takes its locks in one order (the update's
# memory rows, then the create tool's scope anchors), so that two workers' batches that mix
# tools never wait on each other in a circle.
TOOLS_IN_ORDER: Final[tuple[Tool, ...]] = (UPDATE, CREATE)

TOOLS: Final[Mapping[str, Tool]] = MappingProxyType(
    {
        UPDATE_LONG_TERM_MEMORY: UPDATE,
        CREATE_LONG_TERM_MEMORY: CREATE,
        REMEMBER_THIS_FACT: CREATE,
    }
)


def tool_for(tool_name: str) -> Tool | None:
    """The tool of that name; None for a name no tool takes."""
    return TOOLS.get(tool_name)
