"""Named points where a crash test can kill the worker, to prove what survives each crash.

`LTM_FAILPOINTS=after_commit,after_publish` makes the process SIGKILL itself on reaching
either point, exactly as an operator's `kill -9` would land there. Unset, each check is one
frozenset lookup.
"""

from __future__ import annotations

import os
import signal
from typing import Final, Literal

__all__ = ["Failpoint", "reach"]

# `after_dead_letters`: an erasure's dead letters filtered and recorded, nothing else done yet.
Failpoint = Literal["after_commit", "after_publish", "after_mark", "after_dead_letters"]

_ACTIVE: Final = frozenset(
    name.strip() for name in os.environ.get("LTM_FAILPOINTS", "").split(",") if name.strip()
)


def reach(point: Failpoint) -> None:
    if point in _ACTIVE:
        os.kill(os.getpid(), signal.SIGKILL)
