"""Step 1: the tool call's arguments, exactly as docs/behaviour.md describes them."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import MemoryStatus
from worker.core.arguments import MAX_MEMORY_ID, parse_arguments
from worker.core.model import MemoryArguments, Rejection


def valid(**extra: Any) -> dict[str, Any]:
    return {"memory_id": 24, "memory_content": "likes tea", **extra}


def rejected(raw: object) -> Rejection:
    result = parse_arguments(raw)
    assert isinstance(result, Rejection), result
    assert result.status is MemoryStatus.INVALID_ARGS
    assert result.message
    return result


def accepted(raw: object) -> MemoryArguments:
    result = parse_arguments(raw)
    assert isinstance(result, MemoryArguments), result
    return result


def test_a_plain_call() -> None:
    assert parse_arguments(valid()) == MemoryArguments(
        memory_id=24, content="likes tea", target_user=None
    )


@pytest.mark.parametrize(
    ("memory_id", "expected"),
    [
        (1, 1),
        (24, 24),
        (24.0, 24),
        (1.0, 1),
        (2**53 - 1, 2**53 - 1),
        (MAX_MEMORY_ID, MAX_MEMORY_ID),
        (1e2, 100),
    ],
)
def test_accepted_memory_ids(memory_id: object, expected: int) -> None:
    parsed = accepted(valid(memory_id=memory_id))
    assert parsed.memory_id == expected
    assert type(parsed.memory_id) is int


@pytest.mark.parametrize(
    "memory_id",
    [
        "24",
        "",
        True,
        False,
        24.5,
        0.1,
        0,
        0.0,
        -0.0,
        -1,
        -24.0,
        None,
        2**53,
        2**53 + 1,
        float(2**53),
        2**64,
        1e300,
        math.nan,
        math.inf,
        -math.inf,
        [24],
        {"id": 24},
    ],
)
def test_rejected_memory_ids(memory_id: object) -> None:
    assert "memory_id" in rejected(valid(memory_id=memory_id)).message


def test_missing_memory_id() -> None:
    assert "memory_id" in rejected({"memory_content": "x"}).message


def test_memory_ids_as_json_reads_them() -> None:
    # The bodies come from JSON: `24.0` is a float there, `true` a bool.
    assert accepted(json.loads('{"memory_id": 24.0, "memory_content": ""}')).memory_id == 24
    rejected(json.loads('{"memory_id": true, "memory_content": ""}'))
    rejected(json.loads('{"memory_id": 9007199254740992, "memory_content": ""}'))
    assert (
        accepted(json.loads('{"memory_id": 9007199254740991, "memory_content": ""}')).memory_id
        == 2**53 - 1
    )


@pytest.mark.parametrize("content", [None, 1, 1.5, True, ["a"], {"a": "b"}])
def test_rejected_memory_content(content: object) -> None:
    assert "memory_content" in rejected(valid(memory_content=content)).message


def test_missing_memory_content() -> None:
    assert "memory_content" in rejected({"memory_id": 24}).message


@pytest.mark.parametrize("content", ["", "   ", "likes {tea}", "  spaced  "])
def test_memory_content_is_kept_as_given(content: str) -> None:
    # Trimming and sanitizing are step 4's business.
    assert accepted(valid(memory_content=content)).content == content


@pytest.mark.parametrize("raw", [None, [], ["memory_id", 24], "text", 24, True, 1.5])
def test_arguments_that_are_not_an_object(raw: object) -> None:
    rejected(raw)


def test_unknown_extra_arguments_are_ignored() -> None:
    parsed = accepted(valid(reason="outdated", tags=["x"], memory_id_old=3))
    assert parsed == MemoryArguments(memory_id=24, content="likes tea", target_user=None)


def test_the_first_problem_is_reported() -> None:
    assert "memory_id" in rejected({"memory_id": "24", "memory_content": 5}).message
    assert "memory_content" in rejected({"memory_id": 24, "target_user": 5}).message


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"target_user": "Alice"}, "Alice"),
        ({"target_user": "  Alice  "}, "Alice"),  # trimmed, not otherwise normalized
        ({"target_user": "@Alice  Smith"}, "@Alice  Smith"),
        ({"target_user": None}, None),
        ({"target_user": ""}, None),
        ({"target_user": " \t\n"}, None),
        ({}, None),
        # Legacy names, read when target_user is absent or blank, in this order.
        ({"target_user_nickname": "Ali"}, "Ali"),
        ({"target_user_discord_id": "123456789012345678"}, "123456789012345678"),
        ({"target_user_nickname": "Ali", "target_user_discord_id": "1234"}, "Ali"),
        ({"target_user": "Alice", "target_user_nickname": "Ali"}, "Alice"),
        ({"target_user": "  ", "target_user_nickname": "Ali"}, "Ali"),
        ({"target_user": None, "target_user_nickname": " Ali "}, "Ali"),
        ({"target_user": "", "target_user_discord_id": "1234"}, "1234"),
        ({"target_user_nickname": " ", "target_user_discord_id": "1234"}, "1234"),
        ({"target_user_nickname": None, "target_user_discord_id": "1234"}, "1234"),
        ({"target_user": "", "target_user_nickname": "", "target_user_discord_id": ""}, None),
        (
            {"target_user": "A", "target_user_nickname": "B", "target_user_discord_id": "1"},
            "A",
        ),
    ],
)
def test_target_user(arguments: dict[str, Any], expected: str | None) -> None:
    assert accepted(valid(**arguments)).target_user == expected


@pytest.mark.parametrize("name", ["target_user", "target_user_nickname", "target_user_discord_id"])
@pytest.mark.parametrize("value", [1, 123456789012345678, True, 1.5, ["Alice"], {"n": "A"}])
def test_target_user_arguments_must_be_strings(name: str, value: object) -> None:
    assert name in rejected(valid(**{name: value})).message


@pytest.mark.parametrize("name", ["target_user_nickname", "target_user_discord_id"])
def test_legacy_names_are_type_checked_even_when_target_user_is_given(name: str) -> None:
    assert name in rejected(valid(target_user="Alice", **{name: 42})).message


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=10,
    )
)
def test_any_json_value_gives_an_answer(raw: object) -> None:
    result = parse_arguments(raw)
    if isinstance(result, Rejection):
        assert result.status is MemoryStatus.INVALID_ARGS
    else:
        assert 0 < result.memory_id <= MAX_MEMORY_ID


@given(st.integers(min_value=1, max_value=MAX_MEMORY_ID), st.text())
def test_every_valid_id_and_content_is_accepted(memory_id: int, content: str) -> None:
    assert accepted({"memory_id": memory_id, "memory_content": content}) == MemoryArguments(
        memory_id=memory_id, content=content, target_user=None
    )
