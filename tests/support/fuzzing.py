"""What the fuzz tests of the worker share: JSON of any shape, awkward text, fresh ids."""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

from worker.core.update import MAX_MEMORY_ID

__all__ = ["JSON", "MAX_MEMORY_ID", "TRICKY_TEXT", "fresh_id"]

# Characters that databases, JSON and Discord treat specially.
TRICKY_TEXT = ("\x00", "a\x00b", "\ufeff", "\u2028", "\x7f", "\\u0000", "e\u0301", "\U0001f600" * 3)

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


def fresh_id() -> str:
    """A Discord-shaped id. Not `snowflake()`: Hypothesis seeds `random` for each example,
    uuid4 it does not."""
    return str(10**18 + uuid.uuid4().int % (8 * 10**18))
