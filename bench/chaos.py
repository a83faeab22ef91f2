"""Chaos run: thousands of tool calls while workers die, the broker drops every connection and
the database goes away, then a check that nothing was lost, applied twice or posted twice.

`python -m bench.chaos` (`make chaos`) makes a database and a broker virtual host of its own,
seeds a world of servers, personas, people and memories, and publishes random tool calls (both
scopes, creations, updates and deletes, invalid arguments, ids out of reach or missing, copies
of the same tool call) at a steady pace to two real `ltm worker` processes. Meanwhile it
SIGKILLs workers (sometimes bringing one back with a failpoint that kills it between commit
and ack), closes every broker connection of its virtual host, stalls the workers' network
path to the broker (a TCP proxy) until their heartbeats give it up, and restarts PostgreSQL
once. An in-process
gateway consumes the shard queues and posts embeds to a fake Discord. Afterwards it replays
whatever was dead-lettered and checks:

- every call got its result (a `…_db_error` answer counts until the dead-lettered call is
  replayed; then its recorded result is expected);
- every answer agrees with the recorded result, and is one the call could get;
- every successful call has exactly one revision, every failed one none;
- each memory's revisions form a chain (each `content_before` is the previous
  `content_after`, the first is the seeded content, the last is what the table holds);
- a model that applies the successful calls' sanitized content in revision order, from the
  seeded contents, and adds the memories the creations saved, predicts the table exactly;
- a memory the create tool saved begins its chain with its `created` revision, and no other
  memory has one;
- replayed in revision order, no scope ever holds more memories than its limit after a
  creation, nor two that say the same; a duplicate answer names a memory of the scope that
  says it, a limit answer a full scope;
- the gateway posted each successful call's embed exactly once, and nothing else;
- the workers logged no error but the ones a broker closure brings (and a call the database
  outlived the retry budget for), and nothing that is not a JSON log line (a traceback).

`run_chaos` is the same run as a function, which the test suite calls with a few hundred
calls (`tests/e2e/test_chaos.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import logging
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

import aio_pika
import aiormq
import hikari
import psycopg
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage
from psycopg.rows import dict_row

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    REMEMBER_THIS_FACT,
    UPDATE_LONG_TERM_MEMORY,
    EmbedRequested,
    InvalidEnvelope,
    MemoryStatus,
    Participant,
    ToolCallCompleted,
    ToolCallContext,
    ToolCallRequested,
    Topology,
    amqp_properties,
    decode_event,
    encode_event,
)
from gateway import DiscordSender, Gateway, RetryPolicy, discord_nonce
from infra.settings import Settings
from infra.topology import declare_topology
from tests.support.amqp_proxy import AmqpProxy
from tests.support.broker import delete_topology
from tests.support.fake_discord import FakeDiscord
from tests.support.processes import LtmProcess
from tests.support.services import TestServices, rabbitmqctl, refuse_connections, test_services
from worker.core.create import content_key
from worker.ops.commands import ReplayDeadLetters
from worker.ops.dead_letters import replay_dead_letters
from worker.usecases.dead_letter_queue import inspect_dead_letters

__all__ = ["ChaosReport", "DbFault", "check_scopes", "main", "run_chaos"]

DbFault = Literal["restart", "outage", "none"]

MAX_MEMORY_ID: Final = 2**53 - 1
MAX_MEMORY_LENGTH: Final = 1000  # the workers' default (LTM_MAX_MEMORY_LENGTH)
BOT_USER_ID: Final = "100000000000000001"
FAILPOINTS: Final = ("after_commit", "after_publish", "after_mark")
UNRECORDED: Final = frozenset(
    {
        MemoryStatus.DB_ERROR,
        MemoryStatus.INTERNAL_ERROR,
        MemoryStatus.SAVE_DB_ERROR,
        MemoryStatus.SAVE_INTERNAL_ERROR,
    }
)
# What a creation may be answered when its person allows it: which one depends on the calls
# that reach its scope first.
SAVE_OUTCOMES: Final = frozenset(
    {MemoryStatus.SAVED, MemoryStatus.SAVE_DUPLICATE, MemoryStatus.SAVE_LIMIT_EXCEEDED}
)
# A few texts per scope, so that creations meet on the same one.
FACTS: Final = 8
# (scope, the server's server_id or the owner's user_id, lineage): where a creation counts.
ScopeRef = tuple[str, int, int]


def _disc_id() -> str:
    """A Discord-shaped id, unique whatever seed the plan uses."""
    return str(10**18 + uuid.uuid4().int % (8 * 10**18))


# -- the world -----------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    user_id: int
    disc_id: str
    name: str
    privacy: int


@dataclass(frozen=True)
class Persona:
    persona_id: int
    lineage: int


@dataclass(frozen=True)
class Place:
    """A guild, or a DM (keyed by its one user's id)."""

    server_id: int
    disc_id: str
    is_dm: bool
    personas: tuple[Persona, ...]
    members: tuple[User, ...]  # in a DM: the user


@dataclass(frozen=True)
class Memory:
    memory_id: int
    scope: Literal["server_wide", "target_user"]
    content: str
    lineage: int
    server_id: int | None = None  # server memories
    owner: User | None = None  # personal memories


@dataclass
class World:
    places: list[Place]
    users: list[User]
    memories: dict[int, Memory]
    # The workers' LTM_MAX_SERVER_MEMORIES and LTM_MAX_PERSONAL_MEMORIES: a few above what the
    # seeded scopes hold, so that creations reach them.
    server_limit: int = 25
    personal_limit: int = 25

    def limit(self, scope: ScopeRef) -> int:
        return self.server_limit if scope[0] == "server_wide" else self.personal_limit

    def seeded_in(self, scope: ScopeRef) -> list[Memory]:
        """The seeded memories a creation in `scope` is counted and compared with."""
        kind, anchor, lineage = scope
        if kind == "server_wide":
            return [
                m
                for m in self.memories.values()
                if m.scope == kind and m.server_id == anchor and m.lineage == lineage
            ]
        return [
            m
            for m in self.memories.values()
            if m.scope == kind
            and m.owner is not None
            and m.owner.user_id == anchor
            and m.lineage in (lineage, 0)
        ]

    def server_memories(self, place: Place, lineage: int) -> list[Memory]:
        return [
            memory
            for memory in self.memories.values()
            if memory.scope == "server_wide"
            and memory.server_id == place.server_id
            and memory.lineage == lineage
        ]

    def personal_memories(self, owner: User, lineages: Sequence[int]) -> list[Memory]:
        return [
            memory
            for memory in self.memories.values()
            if memory.scope == "target_user"
            and memory.owner == owner
            and memory.lineage in lineages
        ]


async def seed_world(database_url: str, rng: random.Random, calls: int) -> World:
    """Guilds with a preset persona (one lineage everywhere) and one of their own, a DM, people
    (a few of them privacy-restricted), memories of both scopes: about one memory per six
    calls, so that calls meet on the same memories."""
    guilds = max(3, min(12, calls // 150))
    per_persona = max(3, calls // (guilds * 2 * 6 + 6))
    preset = rng.randint(10**6, 2**40)
    async with await psycopg.AsyncConnection.connect(database_url) as connection:
        cursor = connection.cursor(row_factory=dict_row)

        async def insert(query: str, *params: Any) -> int:
            await cursor.execute(query, params)
            row = await cursor.fetchone()
            assert row is not None
            return int(next(iter(row.values())))

        users: list[User] = []
        for n in range(guilds * 3 + 2):
            privacy = 1 if n % 9 == 4 else 0
            disc_id = _disc_id()
            user_id = await insert(
                "INSERT INTO users (user_disc_id, privacy_level) VALUES (%s, %s) RETURNING user_id",
                disc_id,
                privacy,
            )
            users.append(User(user_id, disc_id, f"Chaos{n}", privacy))

        places: list[Place] = []
        memories: dict[int, Memory] = {}

        async def server_memory(place_id: int, persona: Persona | None, lineage: int) -> None:
            content = f"seeded server memory {len(memories)}"
            memory_id = await insert(
                "INSERT INTO server_memories (server_id, persona_id, persona_lineage_id, content)"
                " VALUES (%s, %s, %s, %s) RETURNING server_memory_id",
                place_id,
                persona.persona_id if persona else None,
                lineage,
                content,
            )
            memories[memory_id] = Memory(memory_id, "server_wide", content, lineage, place_id)

        for n in range(guilds + 1):
            is_dm = n == guilds
            dm_user = users[-1]
            disc_id = dm_user.disc_id if is_dm else _disc_id()
            server_id = await insert(
                "INSERT INTO servers (server_disc_id) VALUES (%s) RETURNING server_id", disc_id
            )
            lineages = [preset] if is_dm else [preset, rng.randint(10**6, 2**40)]
            personas = []
            for lineage in lineages:
                persona_id = await insert(
                    "INSERT INTO personas (server_id, persona_lineage_id, nickname)"
                    " VALUES (%s, %s, %s) RETURNING persona_id",
                    server_id,
                    lineage,
                    f"Persona{n}",
                )
                personas.append(Persona(persona_id, lineage))
            if is_dm:
                members: tuple[User, ...] = (dm_user,)
            else:
                members = tuple(rng.sample(users[:-1], k=min(len(users) - 1, rng.randint(4, 6))))
                for member in members:
                    await cursor.execute(
                        "INSERT INTO guild_members (server_id, user_disc_id, display_name,"
                        " username) VALUES (%s, %s, %s, %s)",
                        (server_id, member.disc_id, member.name, member.name.lower()),
                    )
                # The bot is a member too, as a bot.
                await cursor.execute(
                    "INSERT INTO guild_members (server_id, user_disc_id, display_name, username,"
                    " is_bot) VALUES (%s, %s, 'Tomori', 'tomori', true)",
                    (server_id, BOT_USER_ID),
                )
            for persona in personas:
                for _ in range(per_persona):
                    await server_memory(server_id, persona, persona.lineage)
            # A memory of this server under a lineage no persona here has: out of reach.
            await server_memory(server_id, None, rng.randint(10**6, 2**40))
            places.append(Place(server_id, disc_id, is_dm, tuple(personas), members))

        own_lineages = [place.personas[-1].lineage for place in places if not place.is_dm]
        for user in users:
            for lineage in (0, preset, rng.choice(own_lineages), rng.randint(10**6, 2**40)):
                content = f"seeded personal memory {len(memories)}"
                memory_id = await insert(
                    "INSERT INTO personal_memories (user_id, persona_lineage_id, content)"
                    " VALUES (%s, %s, %s) RETURNING personal_memory_id",
                    user.user_id,
                    lineage,
                    content,
                )
                memories[memory_id] = Memory(memory_id, "target_user", content, lineage, owner=user)
        await connection.commit()
    return World(places, users, memories, server_limit=per_persona + 3, personal_limit=5)


# -- the calls -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedCall:
    """A call, the answers it may get, and (for a write) the memory and content it may write."""

    call: ToolCallRequested
    kind: str
    allowed: frozenset[MemoryStatus]
    memory_id: int | None = None  # the memory it may write, when it may write one
    content: str | None = None  # what a successful update stores; None for a delete
    scope: ScopeRef | None = None  # a creation's, with `content` what it saves there

    @property
    def tool_call_id(self) -> str:
        return self.call.tool_call_id


def _new_content(rng: random.Random, n: int) -> tuple[str, str]:
    """(what the LLM sends, what the worker must store): trimmed, foreign placeholders unbraced."""
    shape = rng.randrange(4)
    if shape == 0:
        return f"  chaos {n}: {{topic_{n}}} with {{user}} and {{{{Bot}}}}  ", (
            f"chaos {n}: topic_{n} with {{user}} and {{{{Bot}}}}"
        )
    if shape == 1:
        return f"chaos {n} 日本語 ünïcødé 🙂 `code`", f"chaos {n} 日本語 ünïcødé 🙂 `code`"
    if shape == 2:
        # Longer than the limit as sent, within it once sanitized.
        return "{a}" * 400 + f" {n}", "a" * 400 + f" {n}"
    return f"{{{{{{alice}}}}}} remembers {n}", f"alice remembers {n}"


class Planner:
    def __init__(self, world: World, rng: random.Random, shards: int) -> None:
        self.world = world
        self.rng = rng
        self.shards = shards
        self.counter = itertools.count()
        self.run_tag = uuid.uuid4().hex[:8]

    def _participant(self, user: User, *, is_member: bool = True) -> Participant:
        return Participant(
            user_id=user.disc_id,
            display_label=user.name,
            aliases=(user.name,),
            is_member=is_member,
        )

    def _call(
        self,
        place: Place,
        persona: Persona,
        triggerer: User,
        arguments: Any,
        people: Sequence[Participant] = (),
        *,
        tool_name: str = UPDATE_LONG_TERM_MEMORY,
    ) -> ToolCallRequested:
        participants = [self._participant(triggerer), *people]
        return ToolCallRequested(
            tool_call_id=f"chaos-{self.run_tag}-{next(self.counter)}",
            tool_name=tool_name,
            arguments=arguments,
            context=ToolCallContext(
                guild_id=None if place.is_dm else place.disc_id,
                channel_id=_disc_id(),
                triggerer_id=triggerer.disc_id,
                bot_user_id=BOT_USER_ID,
                persona_id=persona.persona_id,
                shard_id=self.rng.randrange(self.shards),
                participants=tuple(participants),
            ),
        )

    def plan(self, count: int) -> list[PlannedCall]:
        kinds = [
            ("server_write", 34),
            ("personal_write", 24),
            ("float_id", 4),
            ("out_of_reach", 12),
            ("missing", 4),
            ("invalid_args", 10),
            ("invalid_content", 3),
            ("target_problem", 5),
            ("disallowed", 4),
            ("create_server", 10),
            ("create_personal", 7),
            ("create_fallback", 3),
            ("create_invalid", 3),
        ]
        names, weights = zip(*kinds, strict=True)
        planned: list[PlannedCall] = []
        while len(planned) < count:
            made = getattr(self, f"_{self.rng.choices(names, weights)[0]}")()
            if made is not None:
                planned.append(made)
        return planned

    def _scene(self, *, guild: bool | None = None) -> tuple[Place, Persona, User]:
        places = [p for p in self.world.places if guild is None or (not p.is_dm) == guild]
        place = self.rng.choice(places)
        return place, self.rng.choice(place.personas), self.rng.choice(place.members)

    def _bystanders(self, place: Place, *exclude: User) -> list[Participant]:
        others = [member for member in place.members if member not in exclude]
        picked = self.rng.sample(others, k=min(len(others), self.rng.randint(0, 2)))
        return [self._participant(user) for user in picked]

    def _write(self, memory: Memory) -> tuple[dict[str, Any], str | None, MemoryStatus]:
        n = next(self.counter)
        if self.rng.random() < 0.22:
            return (
                {"memory_id": memory.memory_id, "memory_content": self.rng.choice(["", "   "])},
                None,
                MemoryStatus.DELETED,
            )
        sent, stored = _new_content(self.rng, n)
        return {"memory_id": memory.memory_id, "memory_content": sent}, stored, MemoryStatus.UPDATED

    def _server_write(self, *, as_float: bool = False) -> PlannedCall | None:
        place, persona, triggerer = self._scene()
        memories = self.world.server_memories(place, persona.lineage)
        if not memories:
            return None
        memory = self.rng.choice(memories)
        arguments, content, success = self._write(memory)
        if as_float:
            arguments["memory_id"] = float(memory.memory_id)
        call = self._call(place, persona, triggerer, arguments, self._bystanders(place, triggerer))
        return PlannedCall(
            call,
            "float_id" if as_float else "server_write",
            frozenset({success, MemoryStatus.NOT_FOUND}),
            memory.memory_id,
            content,
        )

    def _float_id(self) -> PlannedCall | None:
        return self._server_write(as_float=True)

    def _personal_write(self) -> PlannedCall | None:
        place, persona, triggerer = self._scene()
        target = triggerer if place.is_dm else self.rng.choice(place.members)
        memories = self.world.personal_memories(target, (persona.lineage, 0))
        if not memories:
            return None
        memory = self.rng.choice(memories)
        arguments, content, success = self._write(memory)
        # Named by the conversation's alias, or (not in it) by the server's directory.
        arguments["target_user"] = self.rng.choice([target.name, f"@{target.name}"])
        people = self._bystanders(place, triggerer, target)
        if target != triggerer and (place.is_dm or self.rng.random() < 0.7):
            people.append(self._participant(target))
        call = self._call(place, persona, triggerer, arguments, people)
        if content is not None and target.privacy != 0:
            return PlannedCall(call, "personal_write", frozenset({MemoryStatus.PRIVACY_RESTRICTED}))
        return PlannedCall(
            call,
            "personal_write",
            frozenset({success, MemoryStatus.NOT_FOUND}),
            memory.memory_id,
            content,
        )

    def _out_of_reach(self) -> PlannedCall | None:
        """An id of a memory this call may not touch: another server, lineage, owner, scope."""
        place, persona, triggerer = self._scene(guild=True)
        personal = self.rng.random() < 0.5
        if personal:
            target = self.rng.choice(place.members)
            reachable = {
                m.memory_id for m in self.world.personal_memories(target, (persona.lineage, 0))
            }
        else:
            target = None
            reachable = {m.memory_id for m in self.world.server_memories(place, persona.lineage)}
        memory = self.rng.choice(
            [m for m in self.world.memories.values() if m.memory_id not in reachable]
        )
        arguments: dict[str, Any] = {
            "memory_id": memory.memory_id,
            "memory_content": self.rng.choice(["", "an attempt from outside"]),
        }
        people = self._bystanders(place, triggerer)
        status = MemoryStatus.NOT_FOUND
        if target is not None:
            arguments["target_user"] = target.name
            if arguments["memory_content"] and target.privacy != 0:
                status = MemoryStatus.PRIVACY_RESTRICTED
        return PlannedCall(
            self._call(place, persona, triggerer, arguments, people),
            "out_of_reach",
            frozenset({status}),
        )

    def _missing(self) -> PlannedCall:
        place, persona, triggerer = self._scene()
        arguments = {
            "memory_id": MAX_MEMORY_ID - self.rng.randrange(1000),
            "memory_content": self.rng.choice(["", "no such memory"]),
        }
        return PlannedCall(
            self._call(place, persona, triggerer, arguments),
            "missing",
            frozenset({MemoryStatus.NOT_FOUND}),
        )

    def _invalid_args(self) -> PlannedCall:
        place, persona, triggerer = self._scene()
        real = self.rng.choice(list(self.world.memories))
        arguments: Any = self.rng.choice(
            [
                {"memory_id": str(real), "memory_content": "x"},
                {"memory_id": True, "memory_content": "x"},
                {"memory_id": 0, "memory_content": "x"},
                {"memory_id": -real, "memory_content": "x"},
                {"memory_id": real + 0.5, "memory_content": "x"},
                {"memory_id": MAX_MEMORY_ID + 1, "memory_content": "x"},
                {"memory_id": real},
                {"memory_id": real, "memory_content": None},
                {"memory_id": real, "memory_content": ["x"]},
                {"memory_id": real, "memory_content": "x", "target_user": 42},
                {"memory_id": real, "memory_content": "", "target_user_nickname": False},
                [real, "x"],
                f"memory_id={real}",
            ]
        )
        return PlannedCall(
            self._call(place, persona, triggerer, arguments),
            "invalid_args",
            frozenset({MemoryStatus.INVALID_ARGS}),
        )

    def _invalid_content(self) -> PlannedCall:
        place, persona, triggerer = self._scene()
        real = self.rng.choice(list(self.world.memories))
        text = "x" * (MAX_MEMORY_LENGTH + 1 + self.rng.randrange(50))
        return PlannedCall(
            self._call(place, persona, triggerer, {"memory_id": real, "memory_content": text}),
            "invalid_content",
            frozenset({MemoryStatus.INVALID_CONTENT}),
        )

    def _target_problem(self) -> PlannedCall:
        """Nobody, several people, or the bot itself."""
        place, persona, triggerer = self._scene(guild=True)
        real = self.rng.choice(list(self.world.memories))
        problem = self.rng.randrange(3)
        people = self._bystanders(place, triggerer)
        if problem == 0:
            target, status = "nobody by that name", MemoryStatus.USER_NOT_FOUND
        elif problem == 1:
            target, status = "Sam", MemoryStatus.AMBIGUOUS_USER
            sams = [m for m in place.members if m != triggerer][:2]
            people = [
                Participant(user_id=u.disc_id, display_label=f"Sam ({u.name})", aliases=("Sam",))
                for u in sams
            ]
            if len(people) < 2:
                target, status = "nobody by that name", MemoryStatus.USER_NOT_FOUND
        else:
            # The bot, mentioned: found (it is a member here, as a bot), then refused.
            target, status = f"<@{BOT_USER_ID}>", MemoryStatus.INVALID_TARGET
        arguments = {"memory_id": real, "memory_content": "x", "target_user": target}
        return PlannedCall(
            self._call(place, persona, triggerer, arguments, people),
            "target_problem",
            frozenset({status}),
        )

    def _disallowed(self) -> PlannedCall | None:
        """Personal memories of someone the call cannot reach: no longer a member here, or
        another person than the triggerer in a DM."""
        place, persona, triggerer = self._scene(guild=True)
        strangers = [u for u in self.world.users if u not in place.members]
        if not strangers:
            return None
        stranger = self.rng.choice(strangers)
        memories = self.world.personal_memories(stranger, (persona.lineage, 0))
        if not memories:
            return None
        arguments = {
            "memory_id": self.rng.choice(memories).memory_id,
            "memory_content": "",
            "target_user": stranger.name,
        }
        people = [self._participant(stranger, is_member=False)]
        return PlannedCall(
            self._call(place, persona, triggerer, arguments, people),
            "disallowed",
            frozenset({MemoryStatus.INVALID_SCOPE}),
        )

    # -- creations --------------------------------------------------------------------------

    def _create_name(self) -> str:
        return self.rng.choice(
            [CREATE_LONG_TERM_MEMORY, CREATE_LONG_TERM_MEMORY, REMEMBER_THIS_FACT]
        )

    def _fact(self, template: str = "chaos fact {k}") -> tuple[str, str]:
        """(what the LLM sends, what is saved): one of a few texts, as the LLM might write it
        again (case, spaces), so that creations of a scope meet on it."""
        text = template.format(k=self.rng.randrange(FACTS))
        sent = self.rng.choice([text, text.upper(), f"  {text} ", text.replace(" ", "  ")])
        return sent, sent.strip()

    def _create_server(self) -> PlannedCall:
        place, persona, triggerer = self._scene()
        sent, saved = self._fact()
        scope = self.rng.choice(["server_wide", " Server_Wide "])
        call = self._call(
            place,
            persona,
            triggerer,
            {"memory_content": sent, "memory_scope": scope},
            self._bystanders(place, triggerer),
            tool_name=self._create_name(),
        )
        where = ("server_wide", place.server_id, persona.lineage)
        return PlannedCall(call, "create_server", SAVE_OUTCOMES, content=saved, scope=where)

    def _create_personal(self) -> PlannedCall:
        place, persona, triggerer = self._scene()
        target = triggerer if place.is_dm else self.rng.choice(place.members)
        sent, saved = self._fact("{{user}} knows chaos fact {k}")
        arguments = {
            "memory_content": sent,
            "memory_scope": "target_user",
            "target_user": self.rng.choice([target.name, f"@{target.name}"]),
        }
        people = self._bystanders(place, triggerer, target)
        if target != triggerer and self.rng.random() < 0.7:
            people.append(self._participant(target))
        call = self._call(
            place, persona, triggerer, arguments, people, tool_name=self._create_name()
        )
        if target.privacy != 0:
            return PlannedCall(
                call, "create_personal", frozenset({MemoryStatus.SAVE_PRIVACY_RESTRICTED})
            )
        where = ("target_user", target.user_id, persona.lineage)
        return PlannedCall(call, "create_personal", SAVE_OUTCOMES, content=saved, scope=where)

    def _create_fallback(self) -> PlannedCall:
        """About the bot (`self`, or its mention in a guild) or a bridged Matrix user: saved
        server-wide, a bridged user's name written in place of {user}."""
        place, persona, triggerer = self._scene()
        people = self._bystanders(place, triggerer)
        who = self.rng.randrange(3 if not place.is_dm else 2)
        if who == 0:
            target = self.rng.choice(["self", "SELF", "@self"])
            sent, saved = self._fact("{{bot}} likes chaos fact {k}")
        elif who == 1:
            n = self.rng.randrange(2)
            bridged = Participant(
                user_id=f"@bridged{n}:matrix.org",
                display_label=f"Bridged{n} (Matrix)",
                aliases=(f"Bridged{n}",),
            )
            people.append(bridged)
            target = self.rng.choice([bridged.user_id, f"Bridged{n}"])
            sent, saved = self._fact("{{USER}} shares chaos fact {k}")
            saved = saved.replace("{USER}", f"Bridged{n}")
        else:
            target = f"<@{BOT_USER_ID}>"  # a member here, as a bot
            sent, saved = self._fact("{{bot}} likes chaos fact {k}")
        arguments = {"memory_content": sent, "memory_scope": "target_user", "target_user": target}
        call = self._call(
            place, persona, triggerer, arguments, people, tool_name=self._create_name()
        )
        where = ("server_wide", place.server_id, persona.lineage)
        return PlannedCall(call, "create_fallback", SAVE_OUTCOMES, content=saved, scope=where)

    def _create_invalid(self) -> PlannedCall:
        place, persona, triggerer = self._scene()
        arguments, status = self.rng.choice(
            [
                (
                    {"memory_content": "x", "memory_scope": "channel"},
                    MemoryStatus.SAVE_INVALID_ARGS,
                ),
                ({"memory_scope": "server_wide"}, MemoryStatus.SAVE_INVALID_ARGS),
                (
                    {"memory_content": "x", "memory_scope": "target_user"},
                    MemoryStatus.SAVE_INVALID_ARGS,
                ),
                (
                    {"memory_content": ["x"], "memory_scope": "server_wide"},
                    MemoryStatus.SAVE_INVALID_ARGS,
                ),
                ("remember that", MemoryStatus.SAVE_INVALID_ARGS),
                (
                    {"memory_content": "  ", "memory_scope": "server_wide"},
                    MemoryStatus.SAVE_INVALID_CONTENT,
                ),
                (
                    {"memory_content": "\u200b", "memory_scope": "server_wide"},
                    MemoryStatus.SAVE_INVALID_CONTENT,
                ),
                (
                    {
                        "memory_content": "x" * (MAX_MEMORY_LENGTH + 1),
                        "memory_scope": "server_wide",
                    },
                    MemoryStatus.SAVE_INVALID_CONTENT,
                ),
            ]
        )
        call = self._call(place, persona, triggerer, arguments, tool_name=self._create_name())
        return PlannedCall(call, "create_invalid", frozenset({status}))


@dataclass(frozen=True)
class Publish:
    planned: PlannedCall
    message: ToolCallRequested  # the call, or a copy under a new event id
    duplicate: bool


def publishes_of(
    planned: list[PlannedCall], rng: random.Random, duplicates: float
) -> list[Publish]:
    """Every call once, and some again, later: the same message, or the same tool call id under
    a new event id (a bot that published twice)."""
    slots: list[list[Publish]] = [[Publish(p, p.call, False)] for p in planned]
    for index, call in enumerate(planned):
        if rng.random() < duplicates:
            copy = call.call
            if rng.random() < 0.5:
                copy = call.call.model_copy(update={"event_id": uuid.uuid4()})
            later = min(len(slots) - 1, index + rng.randint(0, 40))
            slots[later].append(Publish(call, copy, True))
    return [publish for slot in slots for publish in slot]


# -- the broker, as the harness sees it ----------------------------------------------------


@dataclass
class Collected:
    results: dict[str, list[ToolCallCompleted]] = field(default_factory=lambda: defaultdict(list))
    embeds: dict[str, dict[uuid.UUID, EmbedRequested]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    seen: set[uuid.UUID] = field(default_factory=set)
    undecodable: int = 0


class HarnessBroker:
    """The harness's own connection, supervised: publishing tool calls (confirmed, retried
    after the broker drops the connection) and a durable tap on results and embeds."""

    def __init__(self, settings: Settings, topology: Topology) -> None:
        self.settings = settings
        self.topology = topology
        self.tap_queue = f"{topology.prefix}.chaos.tap"
        self.collected = Collected()
        self.reconnects = 0
        self._channel: AbstractChannel | None = None
        self._ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name="chaos-harness-broker")
        await asyncio.wait_for(self._ready.wait(), 30)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task

    async def _supervise(self) -> None:
        first = True
        while not self._stopping.is_set():
            try:
                connection = await aio_pika.connect(
                    self.settings.amqp_url, client_properties={"connection_name": "chaos-harness"}
                )
            except (OSError, aiormq.exceptions.AMQPError):
                await asyncio.sleep(0.2)
                continue
            if not first:
                self.reconnects += 1
            first = False
            try:
                await self._serve(connection)
            except Exception:  # the broker went away while setting up: connect again
                await asyncio.sleep(0.2)
            finally:
                self._ready.clear()
                self._channel = None
                with contextlib.suppress(Exception):
                    await connection.close()

    async def _serve(self, connection: AbstractConnection) -> None:
        lost = asyncio.Event()
        connection.close_callbacks.add(lambda *_: lost.set())
        channel = await connection.channel(publisher_confirms=True)
        await declare_topology(channel, self.topology)
        consume = await connection.channel()
        # A channel the broker closed (the connection still up) also means: start again.
        for opened in (channel, consume):
            opened.close_callbacks.add(lambda *_: lost.set())
        await consume.set_qos(prefetch_count=500)
        queue = await consume.declare_queue(self.tap_queue, durable=True)
        events = await consume.get_exchange(self.topology.events_exchange, ensure=False)
        for key in ("result.shard.*", "embed.shard.*"):
            await queue.bind(events, routing_key=key)
        await queue.consume(self._collect)
        self._channel = channel
        self._ready.set()
        stopping = asyncio.create_task(self._stopping.wait())
        closed = asyncio.create_task(lost.wait())
        await asyncio.wait({stopping, closed}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        closed.cancel()
        if self._stopping.is_set():
            with contextlib.suppress(Exception):
                await consume.queue_delete(self.tap_queue)

    async def _collect(self, message: AbstractIncomingMessage) -> None:
        try:
            event = decode_event(message.body)
        except InvalidEnvelope:
            self.collected.undecodable += 1
            await message.ack()
            return
        if event.event_id not in self.collected.seen:
            self.collected.seen.add(event.event_id)
            if isinstance(event, ToolCallCompleted):
                self.collected.results[event.tool_call_id].append(event)
            elif isinstance(event, EmbedRequested):
                self.collected.embeds[event.tool_call_id][event.event_id] = event
        await message.ack()

    async def publish(self, call: ToolCallRequested) -> None:
        """Until the broker confirms it; a copy may get through twice, as with any bot."""
        body = encode_event(call)
        for _ in range(600):
            await asyncio.wait_for(self._ready.wait(), 60)
            channel = self._channel
            if channel is None:
                continue
            try:
                exchange = await channel.get_exchange(
                    self.topology.tool_calls_exchange, ensure=False
                )
                await exchange.publish(
                    aio_pika.Message(body, **amqp_properties(call)), routing_key=call.tool_name
                )
                return
            except Exception:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"could not publish {call.tool_call_id}")

    async def depth(self, queue: str) -> int | None:
        """Ready messages in the queue; None while the connection is down."""
        channel = self._channel
        if channel is None:
            return None
        try:
            declared = await channel.declare_queue(queue, passive=True)
        except Exception:
            return None
        return int(declared.declaration_result.message_count or 0)


# -- the workers ---------------------------------------------------------------------------


class WorkerSlot:
    """One worker's place: a real `ltm worker`, started again whenever it dies."""

    def __init__(self, name: str, services: TestServices, env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.services = services
        self.env = env
        self.logs = logs
        self.incarnations = 0
        self.failpoint_deaths = 0
        self.exits: list[int] = []
        self.process: LtmProcess | None = None
        self.next_failpoint: str | None = None
        self._killed = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"chaos-{self.name}")

    async def _run(self) -> None:
        while not self._stopping:
            env = dict(self.env)
            failpoint, self.next_failpoint = self.next_failpoint, None
            if failpoint is not None:
                env["LTM_FAILPOINTS"] = failpoint
            self.incarnations += 1
            log = self.logs / f"{self.name}-{self.incarnations}.log"
            self._killed = False
            with LtmProcess(self.services, ("worker",), log, env=env) as process:
                self.process = process
                assert process.process is not None
                code = await asyncio.to_thread(process.process.wait)
            self.process = None
            self.exits.append(code)
            if code == -9 and failpoint is not None and not self._killed:
                self.failpoint_deaths += 1

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.process
            if process is not None:
                with contextlib.suppress(AssertionError):
                    await asyncio.to_thread(process.wait_ready, 5.0)
                    return
            await asyncio.sleep(0.1)
        raise AssertionError(f"worker {self.name} not ready within {timeout}s")

    @property
    def alive(self) -> bool:
        process = self.process
        return (
            process is not None and process.process is not None and process.process.poll() is None
        )

    def kill(self, *, then_failpoint: str | None = None) -> bool:
        process = self.process
        if process is None or process.process is None or process.process.poll() is not None:
            return False
        self.next_failpoint = then_failpoint
        self._killed = True
        process.kill()
        return True

    async def stop(self) -> None:
        self._stopping = True
        process = self.process
        if process is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(process.terminate, 30.0)
        if self._task is not None:
            await self._task


# -- faults --------------------------------------------------------------------------------


async def _database_answers(database_url: str) -> bool:
    try:
        async with await psycopg.AsyncConnection.connect(database_url, connect_timeout=2) as c:
            await c.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


async def _wait_for(
    probe: Callable[[], Awaitable[bool]], *, timeout: float, interval: float = 0.2
) -> bool:
    """Polls until `probe()` holds or the deadline passes; says which."""
    deadline = time.monotonic() + timeout
    while True:
        if await probe():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)


async def database_fault(
    kind: DbFault, database_url: str, *, outage_s: float, pg_cluster: tuple[str, str]
) -> None:
    """`restart`: PostgreSQL itself (every database on the machine). `outage`: this run's
    database alone refuses connections and loses the open ones for `outage_s`."""
    if kind == "restart":
        version, cluster = pg_cluster
        await asyncio.to_thread(
            subprocess.run,
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "restart"],
            check=True,
            capture_output=True,
            timeout=120,
        )
    elif kind == "outage":
        await asyncio.to_thread(refuse_connections, database_url, refuse=True)
        try:
            await asyncio.sleep(outage_s)  # the outage itself: its length is the fault
        finally:
            await asyncio.to_thread(refuse_connections, database_url, refuse=False)
    if kind != "none" and not await _wait_for(lambda: _database_answers(database_url), timeout=60):
        raise RuntimeError("the database did not come back after the fault")


# -- the report ----------------------------------------------------------------------------


@dataclass
class ChaosReport:
    sent: int = 0
    publishes: int = 0
    duplicate_publishes: int = 0
    answered: int = 0
    lost: int = 0
    writes_applied_twice: int = 0
    embeds_posted_twice: int = 0
    embeds_posted: int = 0
    embeds_missing: int = 0
    dead_lettered: int = 0
    dead_letter_reasons: Counter[str] = field(default_factory=Counter)
    replayed: int = 0
    kills: int = 0
    failpoint_deaths: int = 0
    broker_closures: int = 0
    stalls: int = 0
    db_faults: int = 0
    db_fault_kind: str = "none"
    unrecorded_answers: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    revisions: int = 0
    duration_s: float = 0.0
    chain_errors: list[str] = field(default_factory=list)
    model_errors: list[str] = field(default_factory=list)
    status_errors: list[str] = field(default_factory=list)
    embed_errors: list[str] = field(default_factory=list)
    scope_errors: list[str] = field(default_factory=list)
    created: int = 0
    undecodable_events: int = 0
    harness_reconnects: int = 0
    log_errors: list[str] = field(default_factory=list)
    log_dir: str = ""

    @property
    def duplicated(self) -> int:
        return self.writes_applied_twice + self.embeds_posted_twice

    def problems(self) -> list[str]:
        found = []
        if self.lost:
            found.append(f"{self.lost} call(s) never answered")
        if self.writes_applied_twice:
            found.append(f"{self.writes_applied_twice} write(s) applied more than once")
        if self.embeds_posted_twice:
            found.append(f"{self.embeds_posted_twice} embed(s) posted more than once")
        if self.embeds_missing:
            found.append(f"{self.embeds_missing} successful call(s) without their embed")
        if self.undecodable_events:
            found.append(f"{self.undecodable_events} undecodable message(s) on the shard keys")
        for kind, errors in (
            ("chain", self.chain_errors),
            ("model", self.model_errors),
            ("status", self.status_errors),
            ("embed", self.embed_errors),
            ("scope", self.scope_errors),
            ("worker log", self.log_errors),
        ):
            found += [f"{kind}: {error}" for error in errors[:20]]
            if len(errors) > 20:
                found.append(f"{kind}: ... and {len(errors) - 20} more")
        return found

    def table(self) -> str:
        fault = f"db {self.db_fault_kind}s" if self.db_fault_kind != "none" else "db faults"
        rows = [
            ("sent (distinct tool calls)", self.sent),
            ("publishes (with duplicates)", f"{self.publishes} ({self.duplicate_publishes} dup)"),
            ("answered", self.answered),
            ("lost", self.lost),
            (
                "duplicated (writes twice + embeds twice)",
                f"{self.duplicated} ({self.writes_applied_twice} + {self.embeds_posted_twice})",
            ),
            ("dead-lettered", self.dead_lettered),
            ("replayed", self.replayed),
            ("kills (SIGKILL by the harness)", self.kills),
            ("failpoint deaths (SIGKILL at a failpoint)", self.failpoint_deaths),
            ("broker closures", self.broker_closures),
            ("broker path stalls (until heartbeats give up)", self.stalls),
            (fault, self.db_faults),
            ("duration", f"{self.duration_s:.1f} s"),
            ("harness reconnects (its own connection)", self.harness_reconnects),
            ("revisions written", self.revisions),
            ("memories created", self.created),
            ("embeds posted", self.embeds_posted),
            ("embeds missing", self.embeds_missing),
            ("unrecorded answers (db_error, internal)", dict(self.unrecorded_answers) or 0),
            (
                "chain / model / status / embed / scope errors",
                f"{len(self.chain_errors)} / {len(self.model_errors)}"
                f" / {len(self.status_errors)} / {len(self.embed_errors)}"
                f" / {len(self.scope_errors)}",
            ),
            ("unexpected worker log lines", len(self.log_errors)),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
        lines.append("statuses:")
        lines += [f"  {status}: {n}" for status, n in sorted(self.statuses.items())]
        if self.dead_letter_reasons:
            lines.append("dead-letter reasons:")
            lines += [f"  {reason}: {n}" for reason, n in self.dead_letter_reasons.most_common()]
        return "\n".join(lines)


# Longer than the 6 s after which a worker with a 1 s heartbeat gives its connection up.
_STALL_S: Final = 8.0

# Errors a chaos run causes on purpose: aiormq logs each connection the broker closes.
_EXPECTED_LOG_ERRORS: Final = (
    "Unexpected connection close from remote",
    "worker.db_unavailable",
)


def unexpected_log_lines(paths: Iterable[Path]) -> list[str]:
    """Error lines the faults do not explain, and lines that are not JSON log lines at all."""
    found = []
    for path in sorted(paths):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                entry = None
            if not isinstance(entry, dict):
                found.append(f"{path.name}: {line[:300]}")
            elif entry.get("level") in ("error", "critical") and not str(
                entry.get("event", "")
            ).startswith(_EXPECTED_LOG_ERRORS):
                found.append(f"{path.name}: {str(entry.get('event'))[:300]}")
    return found


# -- the run -------------------------------------------------------------------------------


@asynccontextmanager
async def _gateway(settings: Settings, shards: int) -> AsyncIterator[tuple[Gateway, FakeDiscord]]:
    async with FakeDiscord() as fake:
        app = hikari.RESTApp(url=fake.url, max_retries=0)
        await app.start()
        try:
            async with app.acquire("fake-token-chaos", "Bot") as rest:
                gateway = Gateway(
                    settings,
                    sender=DiscordSender(
                        rest, policy=RetryPolicy(retry_for_s=5.0, first_wait_s=0.05, max_wait_s=0.2)
                    ),
                    shards=range(shards),
                    shard_count=shards,
                    reconnect_interval_s=0.5,
                )
                await gateway.start()
                try:
                    yield gateway, fake
                finally:
                    await gateway.stop(grace_s=5.0)
        finally:
            await app.close()


def _schedule(
    rng: random.Random,
    *,
    span_s: float,
    kills: int,
    closures: int,
    stalls: int,
    db_fault: DbFault,
) -> list[tuple[float, str]]:
    """When each fault strikes, spread over the publishing time (the first tenth is calm)."""
    faults: list[tuple[float, str]] = []
    for kind, count in (("kill", kills), ("closure", closures), ("stall", stalls)):
        for n in range(count):
            at = span_s * (0.1 + 0.8 * (n + rng.random()) / count)
            faults.append((at, kind))
    if db_fault != "none":
        faults.append((span_s * 0.55, "db"))
    return sorted(faults)


async def run_chaos(
    services: TestServices,
    *,
    calls: int = 3000,
    kills: int = 8,
    broker_closures: int = 3,
    stalls: int = 1,
    db_fault: DbFault = "restart",
    workers: int = 2,
    shards: int = 2,
    publish_s: float | None = None,
    duplicates: float = 0.1,
    seed: int | None = None,
    log_dir: Path | None = None,
    settle_timeout_s: float = 120.0,
    db_retry_s: float = 1.0,
    outage_s: float = 3.0,
    pg_cluster: tuple[str, str] = ("15", "main"),
) -> ChaosReport:
    """One chaos run on `services` (its database and virtual host), under a prefix of its own."""
    started = time.monotonic()
    rng = random.Random(seed)
    report = ChaosReport(db_fault_kind=db_fault)
    logs = log_dir or Path(tempfile.mkdtemp(prefix="ltm-chaos-"))
    logs.mkdir(parents=True, exist_ok=True)
    report.log_dir = str(logs)
    if broker_closures and services.vhost is None:
        raise RuntimeError("closing broker connections needs rabbitmqctl and a vhost of our own")
    prefix = f"{services.amqp_prefix}-chaos{uuid.uuid4().hex[:6]}"
    settings = Settings(
        database_url=services.database_url,
        amqp_url=services.amqp_url,
        amqp_prefix=prefix,
        metrics_port=0,
    )
    topology = Topology(prefix)
    span = publish_s if publish_s is not None else max(10.0, calls / 50)

    world = await seed_world(services.database_url, rng, calls)
    planned = Planner(world, rng, shards).plan(calls)
    publishes = publishes_of(planned, rng, duplicates)
    report.sent = len(planned)
    report.publishes = len(publishes)
    report.duplicate_publishes = sum(p.duplicate for p in publishes)

    harness = HarnessBroker(settings, topology)
    await harness.start()
    env = {
        "LTM_AMQP_PREFIX": prefix,
        "LTM_DB_RETRY_SECONDS": str(db_retry_s),
        "LTM_OUTBOX_SWEEP_INTERVAL_S": "0.5",
        "LTM_SHUTDOWN_GRACE_S": "10",
        "LTM_PREFETCH": "32",
        "LTM_MAX_SERVER_MEMORIES": str(world.server_limit),
        "LTM_MAX_PERSONAL_MEMORIES": str(world.personal_limit),
    }
    # The workers and the gateway reach the broker through a proxy that can stall the path;
    # with a short heartbeat they give a stalled connection up after 3 x (1 + 1) s.
    proxy = AmqpProxy(services.amqp_url)
    slots = [WorkerSlot(f"worker{n}", services, env, logs) for n in range(workers)]
    try:
        async with (
            proxy,
            _gateway(
                settings.model_copy(update={"amqp_url": proxy.url(heartbeat_s=1)}), shards
            ) as (gateway, fake),
        ):
            env["LTM_AMQP_URL"] = proxy.url(heartbeat_s=1)
            for slot in slots:
                slot.start()
            await asyncio.gather(*(slot.wait_ready() for slot in slots))

            faults = asyncio.create_task(
                _inflict(
                    rng,
                    slots,
                    services=services,
                    report=report,
                    span=span,
                    kills=kills,
                    closures=broker_closures,
                    stalls=stalls,
                    proxy=proxy,
                    db_fault=db_fault,
                    outage_s=outage_s,
                    pg_cluster=pg_cluster,
                )
            )
            await _publish_paced(harness, publishes, span)
            await faults
            await asyncio.gather(*(slot.wait_ready() for slot in slots))

            await _settle_answers(
                harness,
                settings=settings,
                topology=topology,
                planned=planned,
                report=report,
                timeout=settle_timeout_s,
            )
            await _settle_embeds(
                harness,
                gateway=gateway,
                fake=fake,
                database_url=services.database_url,
                topology=topology,
                planned=planned,
                shards=shards,
                timeout=settle_timeout_s,
            )
            for slot in slots:
                await slot.stop()
            await _check(
                harness.collected,
                fake=fake,
                database_url=services.database_url,
                world=world,
                planned=planned,
                report=report,
                reply_ttl=timedelta(seconds=settings.reply_ttl_s),
            )
            report.log_errors = unexpected_log_lines(logs.glob("*.log"))
            report.failpoint_deaths = sum(slot.failpoint_deaths for slot in slots)
            report.harness_reconnects = harness.reconnects
            report.undecodable_events = harness.collected.undecodable
    finally:
        for slot in slots:
            await slot.stop()
        await harness.stop()
        await _delete_topology(settings, topology, shards)
    report.duration_s = time.monotonic() - started
    return report


async def _publish_paced(harness: HarnessBroker, publishes: list[Publish], span: float) -> None:
    """At a steady pace over `span` seconds, so that every fault lands among calls in flight."""
    begin = time.monotonic()
    for n, publish in enumerate(publishes):
        due = begin + span * n / len(publishes)
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await harness.publish(publish.message)


async def _inflict(
    rng: random.Random,
    slots: list[WorkerSlot],
    *,
    services: TestServices,
    report: ChaosReport,
    span: float,
    kills: int,
    closures: int,
    stalls: int,
    proxy: AmqpProxy,
    db_fault: DbFault,
    outage_s: float,
    pg_cluster: tuple[str, str],
) -> None:
    begin = time.monotonic()
    failpoints = itertools.cycle(FAILPOINTS)
    for at, kind in _schedule(
        rng, span_s=span, kills=kills, closures=closures, stalls=stalls, db_fault=db_fault
    ):
        delay = begin + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if kind == "kill":
            # A live worker: the supervisor may still be bringing the last one back.
            failpoint = next(failpoints) if report.kills % 2 == 1 else None
            for _ in range(400):
                alive = [slot for slot in slots if slot.alive]
                # Every other death brings the worker back with a failpoint armed.
                if alive and rng.choice(alive).kill(then_failpoint=failpoint):
                    report.kills += 1
                    break
                await asyncio.sleep(0.05)
        elif kind == "closure":
            assert services.vhost is not None
            await asyncio.to_thread(
                rabbitmqctl, "close_all_connections", "-p", services.vhost, "chaos run"
            )
            report.broker_closures += 1
        elif kind == "stall":
            proxy.stall()
            await asyncio.sleep(_STALL_S)
            proxy.resume()
            report.stalls += 1
        else:
            await database_fault(
                db_fault, services.database_url, outage_s=outage_s, pg_cluster=pg_cluster
            )
            report.db_faults += 1


def _answered(collected: Collected, planned: PlannedCall) -> bool:
    return any(r.status not in UNRECORDED for r in collected.results.get(planned.tool_call_id, ()))


async def _settle_answers(
    harness: HarnessBroker,
    *,
    settings: Settings,
    topology: Topology,
    planned: list[PlannedCall],
    report: ChaosReport,
    timeout: float,
) -> None:
    """Until every call has its recorded answer; dead letters are replayed once the work queue
    is idle (a call answered `db_error` waits there)."""
    deadline = time.monotonic() + timeout
    dead_ids: set[str] = set()
    while time.monotonic() < deadline:
        if all(_answered(harness.collected, call) for call in planned):
            break
        ready = await harness.depth(topology.worker_queue)
        dead = await harness.depth(topology.dead_letter_queue)
        if ready == 0 and dead:
            entries, _ = await inspect_dead_letters(settings)
            for entry in entries:
                key = entry.event_id or str(uuid.uuid4())
                if key not in dead_ids:
                    dead_ids.add(key)
                    reason = re.sub(r"\(.*", "", entry.reason).strip()
                    report.dead_letter_reasons[f"{entry.source}: {reason[:60]}"] += 1
            out, err = io.StringIO(), io.StringIO()
            await replay_dead_letters(settings, ReplayDeadLetters(None), out=out, err=err)
            replayed = re.search(r"replayed (\d+) of", out.getvalue())
            report.replayed += int(replayed.group(1)) if replayed else 0
        await asyncio.sleep(0.5)
    report.dead_lettered = len(dead_ids)


async def _settle_embeds(
    harness: HarnessBroker,
    *,
    gateway: Gateway,
    fake: FakeDiscord,
    database_url: str,
    topology: Topology,
    planned: list[PlannedCall],
    shards: int,
    timeout: float,
) -> None:
    """Until the outbox holds nothing unpublished, the shard queues are empty and the gateway
    idle, and each successful call's embed reached the fake Discord."""
    ids = [call.tool_call_id for call in planned]

    async def quiet() -> bool:
        try:
            async with await psycopg.AsyncConnection.connect(database_url) as connection:
                row = await (
                    await connection.execute(
                        "SELECT count(*) FROM outbox WHERE published_at IS NULL"
                        " AND correlation_id = ANY(%s)",
                        (ids,),
                    )
                ).fetchone()
        except psycopg.Error:
            return False
        if row is None or row[0]:
            return False
        for shard in range(shards):
            if await harness.depth(topology.shard_queue(shard)) != 0:
                return False
        if gateway.shard_consumer.in_flight:
            return False
        posted = _posts_by_nonce(fake)
        for call in planned:
            results = harness.collected.results.get(call.tool_call_id, [])
            if any(r.success for r in results):
                embeds = harness.collected.embeds.get(call.tool_call_id, {})
                if not any(posted.get(discord_nonce(e)) for e in embeds):
                    return False
        return True

    await _wait_for(quiet, timeout=timeout, interval=0.5)


def _describe_posts(fake: FakeDiscord, nonces: set[str]) -> str:
    """When each post of these nonces arrived (seconds, monotonic) and how it was answered."""
    return ", ".join(
        f"{request.status} at {request.at:.3f}"
        for request in fake.requests
        if request.method == "POST"
        and isinstance(request.json, dict)
        and request.json.get("nonce") in nonces
    )


def _posts_by_nonce(fake: FakeDiscord) -> Counter[str]:
    return Counter(
        str(request.json.get("nonce"))
        for request in fake.requests
        if request.method == "POST" and isinstance(request.json, dict)
    )


async def _check(
    collected: Collected,
    *,
    fake: FakeDiscord,
    database_url: str,
    world: World,
    planned: list[PlannedCall],
    report: ChaosReport,
    reply_ttl: timedelta,
) -> None:
    ids = [call.tool_call_id for call in planned]
    memory_ids = list(world.memories)
    async with await psycopg.AsyncConnection.connect(database_url) as connection:
        cursor = connection.cursor(row_factory=dict_row)
        await cursor.execute(
            "SELECT tool_call_id, status FROM tool_call_inbox WHERE tool_call_id = ANY(%s)", (ids,)
        )
        inbox = {row["tool_call_id"]: row["status"] for row in await cursor.fetchall()}
        await cursor.execute(
            "SELECT * FROM memory_revisions WHERE memory_id = ANY(%s) OR tool_call_id = ANY(%s)"
            " ORDER BY revision_id",
            (memory_ids, ids),
        )
        revisions = await cursor.fetchall()
        # The memories the run's creations saved, besides the seeded ones.
        memory_ids += [r["memory_id"] for r in revisions if r["action"] == "created"]
        await cursor.execute(
            "SELECT server_memory_id AS id, content FROM server_memories"
            " WHERE server_memory_id = ANY(%s)"
            " UNION ALL SELECT personal_memory_id, content FROM personal_memories"
            " WHERE personal_memory_id = ANY(%s)",
            (memory_ids, memory_ids),
        )
        current: dict[int, str | None] = {
            int(row["id"]): row["content"] for row in await cursor.fetchall()
        }
        now = datetime.now(UTC)

    report.revisions = len(revisions)
    by_call: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for revision in revisions:
        by_call[revision["tool_call_id"]].append(revision)
    posts = _posts_by_nonce(fake)
    report.embeds_posted = sum(posts.values())
    known_nonces: set[str] = set()
    deleted_by_success: set[int] = set()
    successes: list[tuple[int, PlannedCall]] = []  # (revision id, call)
    created: dict[int, PlannedCall] = {}  # memory id: the creation that saved it
    refused_creations: list[tuple[PlannedCall, ToolCallCompleted]] = []

    for call in planned:
        results = collected.results.get(call.tool_call_id, [])
        for result in results:
            if result.status in UNRECORDED:
                report.unrecorded_answers[result.status.value] += 1
        recorded = {r.status for r in results if r.status not in UNRECORDED}
        stored = inbox.get(call.tool_call_id)
        if not recorded:
            report.lost += 1
            continue
        report.answered += 1
        if len(recorded) > 1 or stored is None or {stored} != {s.value for s in recorded}:
            report.status_errors.append(
                f"{call.tool_call_id}: answers {sorted(s.value for s in recorded)},"
                f" recorded {stored}"
            )
        (status,) = sorted(recorded)[:1]
        report.statuses[status.value] += 1
        if status not in call.allowed:
            report.status_errors.append(
                f"{call.tool_call_id} ({call.kind}): {status.value}, expected one of"
                f" {sorted(s.value for s in call.allowed)}"
            )
        own = by_call.get(call.tool_call_id, [])
        embeds = collected.embeds.get(call.tool_call_id, {})
        nonces = {discord_nonce(event_id) for event_id in embeds}
        known_nonces |= nonces
        if status.success:
            if len(own) > 1:
                report.writes_applied_twice += 1
            if not own:
                report.chain_errors.append(f"{call.tool_call_id}: succeeded without a revision")
                continue
            revision = own[0]
            if call.scope is not None:
                _saved(call, revision, results, created, report)
            else:
                if call.memory_id is not None:
                    successes.append((revision["revision_id"], call))
                if call.content is None:
                    deleted_by_success.add(revision["memory_id"])
                expected = (call.memory_id, call.content)
                if (revision["memory_id"], revision["content_after"]) != expected:
                    report.model_errors.append(
                        f"{call.tool_call_id}: wrote {revision['memory_id']}"
                        f" {revision['content_after']!r}, planned {expected}"
                    )
            if len(embeds) != 1:
                report.embed_errors.append(f"{call.tool_call_id}: {len(embeds)} embed events")
            counts = [posts.get(nonce, 0) for nonce in nonces]
            if any(n > 1 for n in counts):
                report.embeds_posted_twice += 1
                report.embed_errors.append(
                    f"{call.tool_call_id}: embed posted {max(counts)} times"
                    f" ({_describe_posts(fake, nonces)})"
                )
            expired = revision["occurred_at"] + reply_ttl < now
            if sum(counts) == 0 and not expired:
                report.embeds_missing += 1
        else:
            if call.scope is not None and status in SAVE_OUTCOMES:
                refused_creations.extend((call, r) for r in results if r.status is status)
            if own:
                report.chain_errors.append(
                    f"{call.tool_call_id}: failed ({status.value}) but wrote {len(own)} revision(s)"
                )
            if embeds or any(posts.get(nonce) for nonce in nonces):
                report.embed_errors.append(f"{call.tool_call_id}: an embed for a failed call")

    # A call that could write and was told "not found": its memory must have been deleted.
    for call in planned:
        results = collected.results.get(call.tool_call_id, [])
        if (
            call.memory_id is not None
            and any(r.status is MemoryStatus.NOT_FOUND for r in results)
            and call.memory_id not in deleted_by_success
        ):
            report.status_errors.append(
                f"{call.tool_call_id}: not found, but memory {call.memory_id} was never deleted"
            )

    unknown = {nonce for nonce in posts if nonce not in known_nonces}
    if unknown:
        report.embed_errors.append(f"{len(unknown)} post(s) of no known embed")

    # Chains: each revision starts where the previous one ended; the last is the table.
    chains: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for revision in revisions:
        chains[revision["memory_id"]].append(revision)
    starts: dict[int, str | None] = {m: memory.content for m, memory in world.memories.items()}
    for memory_id in created:
        starts[memory_id] = None  # it did not exist before its creation
        first = chains[memory_id][0]
        if (first["action"], first["content_before"]) != ("created", ""):
            report.chain_errors.append(
                f"memory {memory_id}: created by a call, but its first revision is"
                f" {first['action']} from {first['content_before']!r}"
            )
    for memory_id in world.memories:
        if any(revision["action"] == "created" for revision in chains.get(memory_id, [])):
            report.chain_errors.append(f"memory {memory_id}: seeded, yet has a created revision")
    for memory_id, start in starts.items():
        content: str | None = start
        for revision in chains.get(memory_id, []):
            if revision["action"] == "created":
                content = ""  # a `created` revision begins from nothing
            if revision["content_before"] != content:
                report.chain_errors.append(
                    f"memory {memory_id}: revision {revision['revision_id']} starts from"
                    f" {revision['content_before']!r}, the memory held {content!r}"
                )
            content = revision["content_after"]
        if content != current.get(memory_id):
            report.chain_errors.append(
                f"memory {memory_id}: revisions end at {content!r},"
                f" the table holds {current.get(memory_id)!r}"
            )

    # The model: seeded contents, then every successful call's content in revision order.
    model: dict[int, str | None] = {m: memory.content for m, memory in world.memories.items()}
    model.update({memory_id: call.content for memory_id, call in created.items()})
    for _, call in sorted(successes, key=lambda pair: pair[0]):
        assert call.memory_id is not None  # only calls that may write are in `successes`
        if model.get(call.memory_id) is None:
            report.model_errors.append(
                f"{call.tool_call_id}: changed memory {call.memory_id} after it was deleted"
            )
        model[call.memory_id] = call.content
    for memory_id, predicted in model.items():
        if current.get(memory_id) != predicted:
            report.model_errors.append(
                f"memory {memory_id}: the model says {predicted!r},"
                f" the table holds {current.get(memory_id)!r}"
            )

    check_scopes(world, revisions, created, refused_creations, report)


def _saved(
    call: PlannedCall,
    revision: dict[str, Any],
    results: Sequence[ToolCallCompleted],
    created: dict[int, PlannedCall],
    report: ChaosReport,
) -> None:
    """A creation's one revision: `created`, from nothing, the planned text, the id answered."""
    answered = {r.data.memory_id for r in results if r.success}
    got = (revision["action"], revision["content_before"], revision["content_after"])
    if got != ("created", "", call.content) or answered != {revision["memory_id"]}:
        report.model_errors.append(
            f"{call.tool_call_id}: saved {got} as {revision['memory_id']}, answered"
            f" {sorted(answered, key=str)}, planned {call.content!r}"
        )
        return
    created[revision["memory_id"]] = call
    report.created += 1


def check_scopes(
    world: World,
    revisions: Sequence[dict[str, Any]],
    created: dict[int, PlannedCall],
    refused: Sequence[tuple[PlannedCall, ToolCallCompleted]],
    report: ChaosReport,
) -> None:
    """Each scope a creation reached, replayed in revision order: after every creation it holds
    no more than its limit and no two memories that say the same.

    The order is that of the creations: they lock their scope before reading it and take their
    revision ids while holding the lock; a delete they saw committed took its id earlier.
    """
    scopes = {call.scope for call in created.values()} | {call.scope for call, _ in refused}
    for scope in sorted(s for s in scopes if s is not None):
        live = {m.memory_id: content_key(m.content) for m in world.seeded_in(scope)}
        members = set(live) | {m for m, call in created.items() if call.scope == scope}
        limit = world.limit(scope)
        for revision in revisions:
            memory_id = revision["memory_id"]
            if memory_id not in members:
                continue
            after = revision["content_after"]
            if revision["action"] == "created":
                if content_key(after) in live.values():
                    report.scope_errors.append(
                        f"{scope}: memory {memory_id} says what another already said: {after!r}"
                    )
                live[memory_id] = content_key(after)
                if len(live) > limit:
                    report.scope_errors.append(
                        f"{scope}: {len(live)} memories after creating {memory_id}, limit {limit}"
                    )
            elif after is None:
                live.pop(memory_id, None)
            else:
                live[memory_id] = content_key(after)

    for call, result in refused:
        assert call.scope is not None and call.content is not None
        named = result.data.memory_id
        if result.status is MemoryStatus.SAVE_DUPLICATE:
            same = created.get(named) if named is not None else None
            if (
                same is None
                or same.scope != call.scope
                or (content_key(same.content or "") != content_key(call.content))
            ):
                report.scope_errors.append(
                    f"{call.tool_call_id}: a duplicate of {named}, which does not say"
                    f" {call.content!r} in {call.scope}"
                )
        elif result.status is MemoryStatus.SAVE_LIMIT_EXCEEDED:
            limit = world.limit(call.scope)
            if result.data.max_allowed != limit or (result.data.current_count or 0) < limit:
                report.scope_errors.append(
                    f"{call.tool_call_id}: refused at {result.data.current_count}"
                    f" of {result.data.max_allowed}, the limit being {limit}"
                )


async def _delete_topology(settings: Settings, topology: Topology, shards: int) -> None:
    """This run's queues and exchanges, so that the virtual host is left as it was."""
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect(settings.amqp_url)
        async with connection:
            channel = await connection.channel()
            for queue in (
                f"{topology.prefix}.chaos.tap",
                *(topology.shard_queue(shard) for shard in range(shards)),
            ):
                await channel.queue_delete(queue)
            await delete_topology(channel, topology)


# -- the command ---------------------------------------------------------------------------


def _cluster_name(database_url: str) -> str:
    """Debian's clusters name themselves VERSION/NAME, as pg_ctlcluster wants them."""
    import psycopg

    with psycopg.connect(database_url) as connection:
        row = connection.execute("SHOW cluster_name").fetchone()
    return str(row[0]) if row and row[0] else "15/main"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description="Tool calls under worker kills, broker closures and a database restart.",
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--closures", type=int, default=3, help="broker connection closures")
    parser.add_argument(
        "--stalls", type=int, default=1, help="stalls of the workers' path to the broker"
    )
    parser.add_argument(
        "--db-fault",
        choices=["restart", "outage", "none"],
        default="restart",
        help="restart: PostgreSQL itself, once (every database on the machine); "
        "outage: this run's database only",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--publish-seconds", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--pg-cluster",
        default=None,
        help="VERSION/NAME for pg_ctlcluster (default: the server's own cluster_name)",
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)

    from infra.logs import configure_logging

    configure_logging("WARNING", "console")
    # The in-process gateway's broker connection reports every forced close with a traceback.
    for noisy in ("aiormq", "aio_pika"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    with test_services() as services:
        version, _, cluster = str(
            args.pg_cluster or _cluster_name(services.database_url)
        ).partition("/")
        report = asyncio.run(
            run_chaos(
                services,
                calls=args.calls,
                kills=args.kills,
                broker_closures=args.closures,
                stalls=args.stalls,
                db_fault=args.db_fault,
                workers=args.workers,
                publish_s=args.publish_seconds,
                seed=seed,
                pg_cluster=(version, cluster or "main"),
            )
        )
    print(f"chaos run, seed {seed}, worker logs in {report.log_dir}")
    print(report.table())
    problems = report.problems()
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("OK: nothing lost, nothing applied or posted twice" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
