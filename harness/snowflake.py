"""Discord-shaped ids for the rows and calls of a run: fresh every time, whatever the seed.

Tests share one database without cleaning up, and a chaos run seeds from a seeded `Random`:
an id drawn from either could meet one drawn before. These never do within a process (a
counter from a random start fills the low bits), nor across runs in practice.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Final

__all__ = ["snowflake"]

# Discord's epoch (2015-01-01): the high bits of an id are milliseconds since then.
_DISCORD_EPOCH_MS: Final = 1_420_070_400_000
_LOW_BITS: Final = 22
_sequence = itertools.count(random.SystemRandom().getrandbits(_LOW_BITS))


def snowflake() -> str:
    """A plausible Discord id (19 digits): the time of now, and a sequence in the low bits."""
    now_ms = int(time.time() * 1000) - _DISCORD_EPOCH_MS
    return str((now_ms << _LOW_BITS) | (next(_sequence) % (1 << _LOW_BITS)))
