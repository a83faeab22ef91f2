"""What a restore changes: the content before the revision, nothing, or the memory's removal."""

from __future__ import annotations

import pytest

from worker.core.restore import Remove, RestorePlan, Unchanged, Write, plan_restore


@pytest.mark.parametrize(
    ("content_before", "current", "plan"),
    [
        ("likes tea", "likes coffee", Write("likes tea")),
        ("likes tea", None, Write("likes tea")),  # a deleted memory comes back
        ("likes tea", "likes tea", Unchanged()),
        ("", "likes tea", Remove()),  # a created memory goes
        ("", None, Unchanged()),  # ... and once gone, stays so
    ],
)
def test_the_plan(content_before: str, current: str | None, plan: RestorePlan) -> None:
    assert plan_restore(content_before, current) == plan
