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

__all__ = ["PIPELINES", "TOOLS", "pipeline_for"]

# In the order a batch runs them: each batch takes its locks in one order (the update's
# memory rows, then the create tool's scope anchors), so that two workers' batches that mix
# tools never wait on each other in a circle.
PIPELINES: Final[tuple[ToolPipeline, ...]] = (UPDATE, CREATE)

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
