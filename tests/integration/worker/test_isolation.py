"""Scopes: a write reaches only its own row; not-found hints name only what is within reach."""

from __future__ import annotations

from typing import Literal

import pytest

from contracts import MemoryStatus, Participant
from harness.world import participant
from tests.integration.worker.checks import Pipeline, Scene, assert_failure
from worker.core import messages

NEVER_ISSUED = 2**53 - 1  # a valid id the shared sequence will not reach in a test run


def server_not_found(memory_id: int) -> dict[str, object]:
    return {"scope": "server_wide", "memory_id": memory_id}


def personal_not_found(memory_id: int, label: str) -> dict[str, object]:
    return {"scope": "target_user", "memory_id": memory_id, "target_user": label}


async def server_path_not_found(
    pipeline: Pipeline,
    scene: Scene,
    memory_id: int,
    *participants: Participant,
    hint: bool,
    content: str = "changed",
) -> str:
    """Runs a server-path call of the id; asserts the failure and returns its message."""
    call = scene.call({"memory_id": memory_id, "memory_content": content}, *participants)
    result = await assert_failure(
        pipeline.world,
        await pipeline.run(call),
        call,
        MemoryStatus.NOT_FOUND,
        server_not_found(memory_id),
    )
    if hint:
        assert result.message == messages.not_found_server_is_personal_memory(memory_id)
        assert "target_user" in result.message
    else:
        assert result.message == messages.not_found_server(memory_id)
        assert "personal" not in result.message
        assert "target_user" not in result.message
    return result.message


async def personal_path_not_found(
    pipeline: Pipeline,
    scene: Scene,
    memory_id: int,
    target: str,
    label: str,
    *,
    hint: bool,
    content: str = "x",
) -> str:
    """Runs a personal-path call of the id for `target` (shown as `label`); asserts the failure
    and returns its message."""
    call = scene.call({"memory_id": memory_id, "memory_content": content, "target_user": target})
    result = await assert_failure(
        pipeline.world,
        await pipeline.run(call),
        call,
        MemoryStatus.NOT_FOUND,
        personal_not_found(memory_id, label),
    )
    if hint:
        assert result.message == messages.not_found_personal_is_server_memory(memory_id, label)
        assert "without target_user" in result.message
    else:
        assert result.message == messages.not_found_personal(memory_id, label)
        assert "server memory" not in result.message
        assert "without target_user" not in result.message
    return result.message


@pytest.mark.parametrize("where", ["guild", "dm"])
@pytest.mark.parametrize("action", ["update", "delete"])
async def test_server_memory_not_found(
    pipeline: Pipeline, where: Literal["guild", "dm"], action: str
) -> None:
    scene = await (pipeline.guild() if where == "guild" else pipeline.dm())
    await server_path_not_found(
        pipeline, scene, NEVER_ISSUED, hint=False, content="x" if action == "update" else ""
    )


@pytest.mark.parametrize("action", ["update", "delete"])
async def test_another_servers_memory_is_never_touched(pipeline: Pipeline, action: str) -> None:
    scene = await pipeline.guild()
    other = await pipeline.guild()
    # Even a persona of the same lineage on the other server: the server decides.
    twin = await pipeline.world.persona(other.server, lineage=scene.persona.lineage)
    theirs = await pipeline.server_memory(twin, "their secret plan")
    dm = await pipeline.dm()
    dms = await pipeline.server_memory(dm.persona, "a DM's fact")

    for memory_id in (theirs, dms):
        message = await server_path_not_found(
            pipeline, scene, memory_id, hint=False, content="x" if action == "update" else ""
        )
        assert "secret" not in message
        assert other.server.disc_id not in message

    assert await pipeline.world.content(theirs) == "their secret plan"
    assert await pipeline.world.content(dms) == "a DM's fact"
    assert await pipeline.world.revisions(theirs) == []


@pytest.mark.parametrize("action", ["update", "delete"])
async def test_another_lineage_of_the_same_server_is_never_touched(
    pipeline: Pipeline, action: str
) -> None:
    scene = await pipeline.guild()
    other_persona = await pipeline.world.persona(scene.server, nickname="Other")
    theirs = await pipeline.server_memory(other_persona, "the other persona's memory")
    # A server memory whose row has lineage 0 is not global: server memories have no such rule.
    zero = await pipeline.server_memory(scene.persona, "lineage zero row", lineage=0)

    for memory_id in (theirs, zero):
        await server_path_not_found(
            pipeline, scene, memory_id, hint=False, content="x" if action == "update" else ""
        )

    assert await pipeline.world.content(theirs) == "the other persona's memory"
    assert await pipeline.world.content(zero) == "lineage zero row"


@pytest.mark.parametrize("action", ["update", "delete"])
async def test_personal_memory_not_found(pipeline: Pipeline, action: str) -> None:
    """Nonexistent, another lineage, another owner: not found, the rows untouched."""
    scene = await pipeline.guild()
    world = pipeline.world
    alice_user_id, alice = await world.user()
    await world.member(scene.server, alice, "alice_w", display_name="Alice")
    bob_user_id, bob = await world.user()
    await world.member(scene.server, bob, "bob_b", display_name="Bob")
    other_lineage = await pipeline.personal_memory(alice_user_id, world.new_lineage(), "other")
    bobs = await pipeline.personal_memory(bob_user_id, scene.persona.lineage, "Bob's")
    bobs_global = await pipeline.personal_memory(bob_user_id, 0, "Bob's global")

    for memory_id in (NEVER_ISSUED, other_lineage, bobs, bobs_global):
        message = await personal_path_not_found(
            pipeline,
            scene,
            memory_id,
            "Alice",
            "Alice (@alice_w)",
            hint=False,
            content="x" if action == "update" else "",
        )
        assert "Bob" not in message

    assert await world.content(other_lineage) == "other"
    assert await world.content(bobs) == "Bob's"
    assert await world.content(bobs_global) == "Bob's global"


Owner = Literal["participant", "member", "triggerer_in_dm"]


@pytest.mark.parametrize("owner", ["participant", "member", "triggerer_in_dm"])
@pytest.mark.parametrize("global_memory", [False, True], ids=["persona_lineage", "lineage_0"])
async def test_server_path_hints_at_a_personal_memory_within_reach(
    pipeline: Pipeline, owner: Owner, global_memory: bool
) -> None:
    world = pipeline.world
    extra: tuple[Participant, ...] = ()
    if owner == "triggerer_in_dm":
        scene = await pipeline.dm()
        owner_user_id = scene.triggerer_user_id
    else:
        scene = await pipeline.guild()
        owner_user_id, owner_id = await world.user()
        if owner == "member":  # in the directory, not in the conversation
            await world.member(scene.server, owner_id, "carol_c", display_name="Carol")
        else:  # in the conversation, not (yet) in the directory
            extra = (participant(owner_id, "Carol"),)
    lineage = 0 if global_memory else scene.persona.lineage
    memory_id = await pipeline.personal_memory(owner_user_id, lineage, "Carol's cat is Tom.")

    message = await server_path_not_found(pipeline, scene, memory_id, *extra, hint=True)

    assert "Tom" not in message
    assert await world.content(memory_id) == "Carol's cat is Tom."
    assert await world.revisions(memory_id) == []


Reach = Literal["stranger", "member_elsewhere", "other_lineage"]


@pytest.mark.parametrize("out_of_reach", ["stranger", "member_elsewhere", "other_lineage"])
async def test_server_path_never_mentions_a_personal_memory_out_of_reach(
    pipeline: Pipeline, out_of_reach: Reach
) -> None:
    scene = await pipeline.guild()
    world = pipeline.world
    owner_user_id, owner_id = await world.user()
    lineage = scene.persona.lineage
    extra: tuple[Participant, ...] = ()
    if out_of_reach == "member_elsewhere":
        elsewhere = await pipeline.guild()
        await world.member(elsewhere.server, owner_id, "dave_d", display_name="Dave")
    elif out_of_reach == "other_lineage":
        await world.member(scene.server, owner_id, "dave_d", display_name="Dave")
        extra = (participant(owner_id, "Dave"),)
        lineage = world.new_lineage()
    memory_id = await pipeline.personal_memory(owner_user_id, lineage, "Dave's secret.")

    message = await server_path_not_found(
        pipeline, scene, memory_id, *extra, hint=False, content=""
    )

    assert "Dave" not in message
    assert await world.content(memory_id) == "Dave's secret."


@pytest.mark.parametrize("where", ["guild", "dm"])
async def test_personal_path_hints_at_a_server_memory_of_this_server_and_lineage(
    pipeline: Pipeline, where: Literal["guild", "dm"]
) -> None:
    scene = await (pipeline.guild() if where == "guild" else pipeline.dm())
    memory_id = await pipeline.server_memory(scene.persona, "Movie night is on Fridays.")

    await personal_path_not_found(pipeline, scene, memory_id, "Trig", "Trig", hint=True)

    assert await pipeline.world.content(memory_id) == "Movie night is on Fridays."
    assert await pipeline.world.revisions(memory_id) == []


@pytest.mark.parametrize("elsewhere", ["other_server", "other_lineage"])
async def test_personal_path_never_mentions_a_server_memory_out_of_reach(
    pipeline: Pipeline, elsewhere: str
) -> None:
    scene = await pipeline.guild()
    if elsewhere == "other_server":
        other = await pipeline.guild()
        twin = await pipeline.world.persona(other.server, lineage=scene.persona.lineage)
        memory_id = await pipeline.server_memory(twin, "Their movie night.")
    else:
        other_persona = await pipeline.world.persona(scene.server)
        memory_id = await pipeline.server_memory(other_persona, "Their movie night.")

    message = await personal_path_not_found(
        pipeline, scene, memory_id, "Trig", "Trig", hint=False, content=""
    )

    assert "movie" not in message.lower()
    assert await pipeline.world.content(memory_id) == "Their movie night."


async def test_a_deleted_memory_is_not_found_afterwards(pipeline: Pipeline) -> None:
    scene = await pipeline.guild()
    memory_id = await pipeline.server_memory(scene.persona, "short-lived")
    delete = scene.call({"memory_id": memory_id, "memory_content": ""})
    assert (await pipeline.run(delete)).result.status is MemoryStatus.DELETED

    await server_path_not_found(pipeline, scene, memory_id, hint=False, content="back again")

    assert await pipeline.world.content(memory_id) is None
    assert len(await pipeline.world.revisions(memory_id)) == 1
