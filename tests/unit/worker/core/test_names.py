"""Name normalization, the single way names are compared when resolving `target_user`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.core.names import normalize_name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Alice", "alice"),
        ("  Alice  ", "alice"),
        ("@alice", "alice"),
        ("  @ alice ", "alice"),
        ("@@alice", "@alice"),  # only one leading @ goes
        ("alice@home", "alice@home"),
        ("Mary   Jane", "mary jane"),
        ("Mary\t\n Jane", "mary jane"),
        ("Mary\u3000Jane", "mary jane"),  # ideographic space is white space too
        ("STRASSE", "strasse"),
        ("Straße", "strasse"),  # case-folding, not lower-casing
        ("ΣΊΣΥΦΟΣ", "σίσυφοσ"),
        ("", ""),
        ("@", ""),
        ("   ", ""),
        ("日本", "日本"),
    ],
)
def test_normalize_name(name: str, expected: str) -> None:
    assert normalize_name(name) == expected


@given(st.text())
def test_normalize_name_is_idempotent_apart_from_a_leading_at(name: str) -> None:
    once = normalize_name(name)
    if not once.startswith("@"):
        assert normalize_name(once) == once


@given(st.text())
def test_normalized_names_have_no_outer_or_repeated_white_space(name: str) -> None:
    normalized = normalize_name(name)
    assert normalized == normalized.strip()
    assert "  " not in normalized
    assert all(char == " " or not char.isspace() for char in normalized)
