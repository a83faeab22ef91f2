"""`ltm memory restore`: what putting a memory back as it was before a revision changes.

A revision's `content_before` is the empty string when the memory did not exist before it (a
creation, or a restore that re-created it): restoring that revision removes the memory.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Remove", "RestorePlan", "Unchanged", "Write", "plan_restore"]


@dataclass(frozen=True, slots=True)
class Unchanged:
    """The memory already is as it was: nothing is written, no revision, no event."""


@dataclass(frozen=True, slots=True)
class Remove:
    """The memory did not exist before the revision: it goes."""


@dataclass(frozen=True, slots=True)
class Write:
    """The memory gets its earlier content back (re-created under its id when gone)."""

    content: str


RestorePlan = Unchanged | Remove | Write


def plan_restore(content_before: str, current: str | None) -> RestorePlan:
    """`current`: the memory's content now, None when it does not exist."""
    wanted = content_before or None
    if wanted == current:
        return Unchanged()
    if wanted is None:
        return Remove()
    return Write(wanted)
