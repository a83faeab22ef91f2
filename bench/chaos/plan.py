"""The calls a chaos run makes, and the answers each may get: updates and deletes of memories
in reach, ids out of reach or missing, invalid arguments and content, people who cannot be
named or reached, and creations in both scopes (meeting on a few texts, so that duplicates and
full scopes happen); then the order they are published in, copies included.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from bench.chaos.world import ChaosWorld, Memory, Persona, Place, ScopeRef, User
from contracts import (
    CREATE_LONG_TERM_MEMORY,
    REMEMBER_THIS_FACT,
    UPDATE_LONG_TERM_MEMORY,
    MemoryStatus,
    Participant,
    ToolCallContext,
    ToolCallRequested,
)
from harness.snowflake import snowflake
from harness.world import BOT_USER_ID
from infra.settings import Settings
from worker.core.update import MAX_MEMORY_ID

__all__ = ["SAVE_OUTCOMES", "PlannedCall", "Planner", "Publish", "publishes_of"]

# The workers' default LTM_MAX_MEMORY_LENGTH: the runs leave it as it is.
MAX_MEMORY_LENGTH: Final = int(Settings.model_fields["max_memory_length"].default)
# What a creation may be answered when its person allows it: which one depends on the calls
# that reach its scope first.
SAVE_OUTCOMES: Final = frozenset(
    {MemoryStatus.SAVED, MemoryStatus.SAVE_DUPLICATE, MemoryStatus.SAVE_LIMIT_EXCEEDED}
)
# A few texts per scope, so that creations meet on the same one.
FACTS: Final = 8


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
    def __init__(self, world: ChaosWorld, rng: random.Random, shards: int) -> None:
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
                channel_id=snowflake(),
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
