"""Scope isolation as a property: a tool call changes at most the one row it is entitled to.

Hypothesis builds a random world (a few servers; personas whose lineages are shared or
distinct; users, some of them members; server memories of any lineage, personal memories
of any lineage including 0) and one random call of a random persona (a memory id among all
of the world's and a few that do not exist, a target user or none, an update or a delete).
Every memory row of the whole database is snapshotted before and after the call: all rows
but the one the call was entitled to change must be byte-identical, and a changed row must
be the one the result names. An entitled call on a reachable row must also succeed, so that
a pipeline that refuses everything does not pass for an isolated one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contracts import MemoryStatus, Participant
from harness.world import Persona, Server, participant, tool_call
from tests.integration.worker.checks import Pipeline
from tests.support.fuzzing import fresh_id

NEVER_ISSUED = 2**53 - 1  # a valid id the shared sequence does not reach in a test run
BOT_USER_ID = "100000000000000001"
LINEAGE_SLOTS = 3  # distinct persona lineages in one world; personal memories add lineage 0

RowKey = tuple[str, int]  # (scope, memory id)


@dataclass(frozen=True)
class WorldPlan:
    """Indices only: the database ids are made when the plan is seeded."""

    servers: int
    personas: tuple[tuple[int, int], ...]  # (server, lineage slot)
    privacy: tuple[int, ...]  # one per user
    members: frozenset[tuple[int, int]]  # (server, user)
    server_memories: tuple[tuple[int, int], ...]  # (server, lineage slot)
    personal_memories: tuple[tuple[int, int | None], ...]  # (user, lineage slot; None = 0)


@dataclass(frozen=True)
class CallPlan:
    persona: int
    triggerer: int
    target: int | None  # a user, named by their name
    target_in_conversation: bool
    target_is_member_in_conversation: bool
    memory: int  # index into the seeded memories, past their end: an id that does not exist
    delete: bool


@st.composite
def worlds(draw: st.DrawFn) -> WorldPlan:
    servers = draw(st.integers(1, 3))
    users = draw(st.integers(2, 4))
    server_index = st.integers(0, servers - 1)
    user_index = st.integers(0, users - 1)
    slot = st.integers(0, LINEAGE_SLOTS - 1)
    # Every server has a persona; more may share a server, a lineage, or both.
    personas = [(server, draw(slot)) for server in range(servers)]
    personas += draw(st.lists(st.tuples(server_index, slot), max_size=2))
    return WorldPlan(
        servers=servers,
        personas=tuple(personas),
        privacy=tuple(
            draw(st.lists(st.sampled_from([0, 0, 0, 0, 1, 2]), min_size=users, max_size=users))
        ),
        members=frozenset(draw(st.sets(st.tuples(server_index, user_index)))),
        server_memories=tuple(
            draw(st.lists(st.tuples(server_index, slot), min_size=1, max_size=6))
        ),
        personal_memories=tuple(
            draw(st.lists(st.tuples(user_index, st.none() | slot), min_size=1, max_size=6))
        ),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[WorldPlan, CallPlan]:
    plan = draw(worlds())
    users = len(plan.privacy)
    memories = len(plan.server_memories) + len(plan.personal_memories)
    persona = draw(st.integers(0, len(plan.personas) - 1))
    owners = sorted({owner for owner, _ in plan.personal_memories})
    target = draw(st.one_of(st.none(), st.sampled_from(owners), st.integers(0, users - 1)))
    server, slot = plan.personas[persona]
    # Calls aim at a row of their own scope (so that writes are common), at near misses
    # (the same server or owner with another lineage, another server or owner with the same
    # lineage, the other scope), or at any id at all (`memories` itself: one that does not
    # exist), each of these about as often.
    rows: list[tuple[str, int, int | None]] = [
        ("server_wide", where, lineage) for where, lineage in plan.server_memories
    ] + [("target_user", owner, lineage) for owner, lineage in plan.personal_memories]

    def group(*wanted: tuple[str, bool, bool]) -> list[int]:
        """Rows by (scope, same server or owner, lineage within reach)."""
        whose = server if target is None else target
        return [
            n
            for n, (scope, where, lineage) in enumerate(rows)
            if (
                scope,
                where == whose,
                lineage == slot or (scope == "target_user" and lineage is None),
            )
            in wanted
        ]

    own_scope = "server_wide" if target is None else "target_user"
    other_scope = "target_user" if target is None else "server_wide"
    mine = group((own_scope, True, True))
    near_misses = [
        group((own_scope, True, False)),  # same server or owner, another lineage
        group((own_scope, False, True)),  # another server or owner, the same lineage
        group(*((other_scope, same, reach) for same in (True, False) for reach in (True, False))),
    ]
    groups = [found for found in (mine, *near_misses) if found]
    likely = st.sampled_from([True, True, True, True, True, False])
    memory = draw(st.one_of(st.integers(0, memories), *(st.sampled_from(g) for g in groups)))
    call = CallPlan(
        persona=persona,
        triggerer=draw(st.integers(0, users - 1)),
        target=target,
        # Mostly people who resolve and are members, so that the personal path gets to write.
        target_in_conversation=draw(likely),
        target_is_member_in_conversation=draw(likely),
        memory=memory,
        delete=draw(st.booleans()),
    )
    return plan, call


@dataclass(frozen=True)
class Seeded:
    servers: list[Server]
    personas: list[Persona]
    users: list[tuple[int, str]]  # (users.user_id, Discord id)
    names: list[str]
    memories: list[RowKey]


_worlds = itertools.count()


async def seed(pipeline: Pipeline, plan: WorldPlan) -> Seeded:
    world = pipeline.world
    tag = next(_worlds)
    lineages = [world.new_lineage() for _ in range(LINEAGE_SLOTS)]
    servers = [await world.server(fresh_id()) for _ in range(plan.servers)]
    personas = [
        await world.persona(servers[server], lineage=lineages[slot], nickname=f"P{n}")
        for n, (server, slot) in enumerate(plan.personas)
    ]
    users = [await world.user(fresh_id(), privacy_level=level) for level in plan.privacy]
    # Names unique to this world: a target resolves to one person or to nobody.
    names = [f"user{tag}x{n}" for n in range(len(users))]
    for server, user in sorted(plan.members):
        await world.member(servers[server], users[user][1], names[user])
    # A server memory's persona_id is some persona of its server; its lineage is the slot's.
    persona_of = {persona.server.server_id: persona for persona in personas}
    memories: list[RowKey] = []
    for server, slot in plan.server_memories:
        persona = persona_of[servers[server].server_id]
        memory_id = await world.server_memory(persona, f"s{len(memories)}", lineage=lineages[slot])
        memories.append(("server_wide", memory_id))
    for user, personal_slot in plan.personal_memories:
        lineage = 0 if personal_slot is None else lineages[personal_slot]
        memory_id = await world.personal_memory(users[user][0], lineage, f"p{len(memories)}")
        memories.append(("target_user", memory_id))
    return Seeded(servers, personas, users, names, memories)


async def snapshot(pipeline: Pipeline) -> dict[RowKey, str]:
    """Every memory row of the database, each as the text of all its columns."""
    rows = await pipeline.sql(
        "SELECT 'server_wide' AS scope, server_memory_id AS id, row_to_json(m)::text AS row"
        " FROM server_memories AS m"
        " UNION ALL"
        " SELECT 'target_user', personal_memory_id, row_to_json(p)::text"
        " FROM personal_memories AS p"
    )
    return {(row["scope"], int(row["id"])): row["row"] for row in rows}


def entitled_row(plan: WorldPlan, call: CallPlan, seeded: Seeded, key: RowKey) -> tuple[bool, bool]:
    """(may change, must change): whether the call may touch this row, and whether it must.

    Server path (no target): the row of this server and the persona's lineage. Personal path:
    the target's row of the persona's lineage or 0, when the target resolves, is a current
    member here, and allows it (privacy minimal, or a delete).
    """
    server_index, slot = plan.personas[call.persona]
    if key not in seeded.memories:
        return False, False
    index = seeded.memories.index(key)
    scope, _ = key
    if call.target is None:
        if scope != "server_wide":
            return False, False
        row_server, row_slot = plan.server_memories[index]
        entitled = row_server == server_index and row_slot == slot
        return entitled, entitled
    if scope != "target_user":
        return False, False
    owner, personal_slot = plan.personal_memories[index - len(plan.server_memories)]
    entitled = owner == call.target and personal_slot in (None, slot)
    member = (server_index, call.target) in plan.members or (
        call.target_in_conversation and call.target_is_member_in_conversation
    )
    resolves = call.target_in_conversation or (server_index, call.target) in plan.members
    allowed = call.delete or plan.privacy[call.target] == 0
    return entitled, entitled and resolves and member and allowed


def conversation(call: CallPlan, seeded: Seeded) -> tuple[Participant, ...]:
    people = [participant(seeded.users[call.triggerer][1], seeded.names[call.triggerer])]
    if call.target is not None and call.target_in_conversation and call.target != call.triggerer:
        people.append(
            participant(
                seeded.users[call.target][1],
                seeded.names[call.target],
                is_member=call.target_is_member_in_conversation,
            )
        )
    return tuple(people)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
async def test_a_call_changes_nothing_outside_its_scope(
    pipeline: Pipeline, scenario: tuple[WorldPlan, CallPlan]
) -> None:
    plan, call_plan = scenario
    seeded = await seed(pipeline, plan)
    if call_plan.target is not None and call_plan.target == call_plan.triggerer:
        # The triggerer is in the conversation as a member: name them as such.
        call_plan = CallPlan(
            persona=call_plan.persona,
            triggerer=call_plan.triggerer,
            target=call_plan.target,
            target_in_conversation=True,
            target_is_member_in_conversation=True,
            memory=call_plan.memory,
            delete=call_plan.delete,
        )
    memory_id = (
        seeded.memories[call_plan.memory][1]
        if call_plan.memory < len(seeded.memories)
        else NEVER_ISSUED
    )
    arguments: dict[str, Any] = {
        "memory_id": memory_id,
        "memory_content": "" if call_plan.delete else "rewritten by the property test",
    }
    if call_plan.target is not None:
        arguments["target_user"] = seeded.names[call_plan.target]
    call = tool_call(
        seeded.personas[call_plan.persona],
        arguments,
        triggerer_id=seeded.users[call_plan.triggerer][1],
        participants=conversation(call_plan, seeded),
        channel_id=fresh_id(),
        bot_user_id=BOT_USER_ID,
    )

    before = await snapshot(pipeline)
    revisions_before = await pipeline.sql("SELECT count(*) AS n FROM memory_revisions")
    result = (await pipeline.run(call)).result
    after = await snapshot(pipeline)
    revisions_after = await pipeline.sql("SELECT count(*) AS n FROM memory_revisions")

    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    path = "personal" if call_plan.target is not None else "server"
    event(f"{result.status.value} on the {path} path, {len(changed)} row changed")
    assert len(changed) <= 1, (changed, result)
    added = revisions_after[0]["n"] - revisions_before[0]["n"]
    if changed:
        (key,) = changed
        may_change, _ = entitled_row(plan, call_plan, seeded, key)
        assert may_change, (key, plan, call_plan, result)
        assert result.success, result
        assert (result.data.scope, result.data.memory_id) == key
        assert result.status is (MemoryStatus.DELETED if call_plan.delete else MemoryStatus.UPDATED)
        assert (key in after) is not call_plan.delete
        assert added == 1
    else:
        assert not result.success, result
        assert added == 0

    # The converse: the one row the call is entitled to, reachable, is changed.
    targeted = [key for key in seeded.memories if key[1] == memory_id]
    must_change = bool(targeted) and entitled_row(plan, call_plan, seeded, targeted[0])[1]
    assert must_change == bool(changed), (plan, call_plan, result)
