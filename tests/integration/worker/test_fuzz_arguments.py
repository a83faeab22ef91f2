"""Fuzzing the untrusted `arguments` through the real pipeline on the real database.

Whatever JSON the LLM produces, the call is answered: a result with a status and a message,
recorded for idempotency, never an exception. Arguments come from a generic JSON strategy and
from strategies aimed at `memory_id`, `memory_content` and the target-user arguments (their
types, edge values, and names of the people of a seeded scene). Each call travels as it would
on the wire (encoded by the bot, decoded by the worker) before the pipeline runs it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contracts import MemoryStatus, decode_tool_call, encode_event
from harness.world import participant
from tests.integration.worker.checks import Pipeline, Scene
from tests.support.fuzzing import JSON, MAX_MEMORY_ID, TRICKY_TEXT, fresh_id

BOT_USER_ID = "100000000000000001"


@dataclass(frozen=True)
class FuzzScene:
    """A guild where every kind of person can be named: members, a stranger, a bridge user,
    a bot member, a privacy-restricted user, and memories of both scopes."""

    scene: Scene
    memory_ids: tuple[int, ...]
    names: tuple[str, ...]
    people: tuple[Any, ...]  # participants of every call


@pytest.fixture(scope="module")
async def fuzz_scene(pipeline: Pipeline) -> FuzzScene:
    world = pipeline.world
    scene = await pipeline.guild()
    alice_user, alice = await world.user(fresh_id())
    await world.member(scene.server, alice, "alice_w", display_name="Alice")
    private_user, private = await world.user(fresh_id(), privacy_level=1)
    await world.member(scene.server, private, "priv_p", display_name="Private")
    twin_a, twin_b = fresh_id(), fresh_id()
    await world.member(scene.server, twin_a, "twin_one", display_name="Twin")
    await world.member(scene.server, twin_b, "twin_two", display_name="Twin")
    bot = fresh_id()
    await world.member(scene.server, bot, "helper_bot", display_name="Helper", is_bot=True)
    _, stranger = await world.user(fresh_id())
    memory_ids = [await pipeline.server_memory(scene.persona, f"server fact {n}") for n in range(8)]
    for owner in (alice_user, private_user, scene.triggerer_user_id):
        for lineage in (scene.persona.lineage, 0, world.new_lineage()):
            memory_ids.append(await pipeline.personal_memory(owner, lineage, "a personal fact"))
    people = (
        participant(alice, "Alice", "alice"),
        participant(private, "Private"),
        participant("@bridge:matrix.org", "Bridge"),
        participant(stranger, "Stranger", is_member=False),
        participant(BOT_USER_ID, "Tomori", is_bot=True),
    )
    names = (
        "Alice",
        "@alice",
        " ALICE ",
        "Private",
        "Twin",
        "twin_one",
        "Helper",
        "Tomori",
        "Stranger",
        "Trig",
        "@bridge:matrix.org",
        f"<@{alice}>",
        f"<@!{bot}>",
        alice,
        BOT_USER_ID,
        stranger,
        "12345678901234567",
        "nobody at all",
        "@",
        "   ",
    )
    return FuzzScene(scene, tuple(memory_ids), names, people)


def arguments(scene: FuzzScene) -> st.SearchStrategy[Any]:
    """Generic JSON, or an object whose known keys get targeted values."""
    ids = st.sampled_from(scene.memory_ids)
    memory_id = st.one_of(
        ids,
        ids.map(float),
        ids.map(str),
        st.sampled_from([0, -1, 1, MAX_MEMORY_ID, MAX_MEMORY_ID + 1, 2**63, 2**64, -(2**63)]),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([24.0, 24.5, -0.0, 1e300, True, False, None, "", "24", [24], {"id": 24}]),
        JSON,
    )
    content = st.one_of(
        st.text(),
        st.sampled_from(["", " ", "\n\t ", "{user}", "{{foo}}", "{{{user}}}", "`" * 12]),
        st.integers(990, 1010).map(lambda n: "x" * n),
        st.integers(990, 1010).map(lambda n: "{a}" * (n // 3)),
        st.text(alphabet="{}abc_ \n`", max_size=40),
        JSON,
    )
    target = st.one_of(st.sampled_from(scene.names), st.text(max_size=40), JSON)
    targeted = st.fixed_dictionaries(
        {},
        optional={
            "memory_id": memory_id,
            "memory_content": content,
            "target_user": target,
            "target_user_nickname": target,
            "target_user_discord_id": target,
            "unexpected": JSON,
        },
    )
    # Well-typed, so that the later steps (content, resolution, scope, the write) get fuzzed.
    name = st.one_of(st.sampled_from(scene.names), st.text(max_size=20))
    plausible = st.fixed_dictionaries(
        {
            "memory_id": ids | ids.map(float) | st.integers(1, MAX_MEMORY_ID),
            "memory_content": st.one_of(
                st.text(),
                st.text(alphabet="{}abcuser_ \n`@", max_size=60),
                st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=5),  # controls
                st.sampled_from(TRICKY_TEXT),
                st.just(""),
            ),
        },
        optional={"target_user": st.none() | name, "target_user_nickname": name},
    )
    return st.one_of(JSON, targeted, plausible, plausible, plausible)


def _valid_memory_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        if not value.is_integer():
            return False
        value = int(value)
    return isinstance(value, int) and 0 < value <= MAX_MEMORY_ID


def invalid_arguments(raw: Any) -> bool:
    """Update step 1 of docs/behaviour.md, written out again: the arguments' types and ranges."""
    if not isinstance(raw, dict):
        return True
    if not _valid_memory_id(raw.get("memory_id")):
        return True
    if not isinstance(raw.get("memory_content"), str):
        return True
    names = ("target_user", "target_user_nickname", "target_user_discord_id")
    return any(raw.get(name) is not None and not isinstance(raw.get(name), str) for name in names)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_any_arguments_get_a_recorded_result_with_a_status(
    pipeline: Pipeline, fuzz_scene: FuzzScene, data: st.DataObject
) -> None:
    raw = data.draw(arguments(fuzz_scene), label="arguments")
    scene = fuzz_scene.scene
    sent = scene.call(raw, *fuzz_scene.people, tool_call_id=f"fuzz-{uuid.uuid4()}")
    # As on the wire: the bot encodes, the worker decodes.
    call = decode_tool_call(encode_event(sent))

    result = (await pipeline.run(call)).result

    event(result.status.value)
    assert isinstance(result.status, MemoryStatus)
    assert result.success is result.status.success
    assert isinstance(result.message, str) and result.message.strip()
    assert result.tool_call_id == call.tool_call_id
    # The scene is sound and the database is there: neither of these may come out.
    assert result.status not in (MemoryStatus.INTERNAL_ERROR, MemoryStatus.DB_ERROR), result
    assert (result.status is MemoryStatus.INVALID_ARGS) == invalid_arguments(raw), result

    inbox = await pipeline.world.inbox(call.tool_call_id)
    assert inbox is not None and inbox["status"] == result.status.value
    revisions = await pipeline.world.revisions_of_call(call.tool_call_id)
    assert len(revisions) == (1 if result.success else 0), (result, revisions)

    # A second delivery is answered from the stored result, and changes nothing.
    again = (await pipeline.run(call)).result
    assert (again.status, again.message, again.data) == (result.status, result.message, result.data)
    assert len(await pipeline.world.revisions_of_call(call.tool_call_id)) == len(revisions)
