"""Which pipeline runs a call: by its `tool_name`, for every name bound to the worker's queue.

A new tool is a module with its pipeline, an entry here, and its name in
`contracts.TOOL_NAMES` (the bindings `ltm topology` declares).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from contracts import CREATE_LONG_TERM_MEMORY, REMEMBER_THIS_FACT, UPDATE_LONG_TERM_MEMORY
from worker.tools.base import ToolPipeline
from worker.tools.create import CREATE
from worker.tools.update import UPDATE

__all__ = ["TOOLS", "pipeline_for"]

TOOLS: Final[Mapping[str, ToolPipeline]] = MappingProxyType(
    {
        UPDATE_LONG_TERM_MEMORY: UPDATE,
        CREATE_LONG_TERM_MEMORY: CREATE,
        REMEMBER_THIS_FACT: CREATE,
    }
)


def pipeline_for(tool_name: str) -> ToolPipeline | None:
    """The tool's pipeline; None for a name no pipeline takes."""
    return TOOLS.get(tool_name)
