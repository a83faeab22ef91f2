"""What a revert will do, decided from the memories' histories alone: which memories go back
to what, which are left because someone else changed them since, and which already are as
they should be (neither reverted nor counted).

A memory goes back to what it held before the earliest revision of it that matches the
filter: a memory such a revision created is removed, one it deleted comes back. A revision
outside the filter after that one means someone else changed the memory since: it is
skipped, unless forced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from operators.revision_store import Revision
from worker.core.restore import Remove, Unchanged, plan_restore

__all__ = [
    "CHANGED_BY_SOMEONE_ELSE",
    "MAX_MEMORIES",
    "HistoryEntry",
    "MemoryRevert",
    "RevertPlan",
    "SkippedMemory",
    "TooManyMemories",
    "plan_revert",
]

# A revert touches at most this many memories: a filter that matches more is refused, to be
# narrowed, rather than half done.
MAX_MEMORIES: Final = 1000
CHANGED_BY_SOMEONE_ELSE: Final = "changed since by someone else"


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """A revision of a memory the filter touched, and whether it matches the filter."""

    revision: Revision
    matches: bool


@dataclass(frozen=True, slots=True)
class MemoryRevert:
    """One memory put back: `before` is what it holds now, `after` what it will hold (None:
    removed, or, for `before`, gone), as before revision `undone`."""

    memory_id: int
    scope: str
    before: str | None
    after: str | None
    undone: Revision


@dataclass(frozen=True, slots=True)
class SkippedMemory:
    memory_id: int
    scope: str
    why: str


@dataclass(frozen=True, slots=True)
class RevertPlan:
    reverts: tuple[MemoryRevert, ...]
    skipped: tuple[SkippedMemory, ...]
    # Memories a matching revision touched, those already as they should be included.
    touched: int

    @property
    def fingerprint(self) -> str:
        """Names this plan: a plan shown to a person, then carried out once they said yes,
        must still be the plan (the memories could have changed meanwhile)."""
        steps = [(r.memory_id, r.undone.revision_id, r.before, r.after) for r in self.reverts]
        skips = [(s.memory_id, s.why) for s in self.skipped]
        return hashlib.sha256(repr((steps, skips)).encode()).hexdigest()[:16]


class TooManyMemories(ValueError):
    """The filter touches more memories than one revert may."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the filter touches more than {limit} memories, more than one revert takes: narrow it"
        )
        self.limit = limit


def plan_revert(
    history: Iterable[HistoryEntry],
    current: Mapping[int, str],
    *,
    force: bool = False,
    max_memories: int = MAX_MEMORIES,
) -> RevertPlan:
    """`history`: every revision, in order, of each memory a matching revision touched;
    `current`: the content of those that exist now. Memories in id order."""
    by_memory: dict[int, list[HistoryEntry]] = {}
    for entry in sorted(history, key=lambda e: (e.revision.memory_id, e.revision.revision_id)):
        by_memory.setdefault(entry.revision.memory_id, []).append(entry)
    touched = {
        memory_id: entries
        for memory_id, entries in by_memory.items()
        if any(entry.matches for entry in entries)
    }
    if len(touched) > max_memories:
        raise TooManyMemories(max_memories)
    reverts: list[MemoryRevert] = []
    skipped: list[SkippedMemory] = []
    for memory_id, entries in touched.items():
        first = next(index for index, entry in enumerate(entries) if entry.matches)
        undone = entries[first].revision
        now = current.get(memory_id)
        step = plan_restore(undone.content_before, now)
        if isinstance(step, Unchanged):
            continue
        if not force and any(not entry.matches for entry in entries[first + 1 :]):
            skipped.append(SkippedMemory(memory_id, undone.scope, CHANGED_BY_SOMEONE_ELSE))
            continue
        after = None if isinstance(step, Remove) else step.content
        reverts.append(MemoryRevert(memory_id, undone.scope, now, after, undone))
    return RevertPlan(tuple(reverts), tuple(skipped), len(touched))
