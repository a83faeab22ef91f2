"""The invariants a chaos run checks once everything settled: every call answered and none
lost, none applied twice, no embed posted twice or missing, every revision chain unbroken, the
model equal to the database, no scope over its limit or saying one thing twice, and no worker
log line the faults do not explain."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import psycopg
from psycopg.rows import dict_row

from bench.chaos.broker import Collected
from bench.chaos.plan import SAVE_OUTCOMES, PlannedCall
from bench.chaos.report import ChaosReport
from bench.chaos.world import ChaosWorld
from contracts import MemoryStatus, ToolCallCompleted
from gateway import discord_nonce
from harness.fake_discord import FakeDiscord
from worker.core.create import content_key

__all__ = [
    "UNRECORDED",
    "DatabaseState",
    "answered",
    "check_run",
    "check_scopes",
    "posts_by_nonce",
    "read_database",
    "unexpected_log_lines",
]

# Answers the inbox does not record: the call is answered again when replayed.
UNRECORDED: Final = frozenset(
    {
        MemoryStatus.DB_ERROR,
        MemoryStatus.INTERNAL_ERROR,
        MemoryStatus.SAVE_DB_ERROR,
        MemoryStatus.SAVE_INTERNAL_ERROR,
    }
)
# Errors a chaos run causes on purpose: aiormq logs each connection the broker closes, and
# each connection refused by a node that was killed (the worker then tries the next node).
_EXPECTED_LOG_ERRORS: Final = (
    "Unexpected connection close from remote",
    "error when creating transport",
    "worker.db_unavailable",
)
Revision = dict[str, Any]


def answered(collected: Collected, planned: PlannedCall) -> bool:
    """Whether the call has an answer the inbox records (not a `…_db_error` one)."""
    return any(r.status not in UNRECORDED for r in collected.results.get(planned.tool_call_id, ()))


@dataclass(frozen=True)
class DatabaseState:
    """The run's rows once it settled: inbox statuses, revisions, and the memories' contents."""

    inbox: dict[str, str]
    revisions: list[Revision]
    current: dict[int, str | None]
    read_at: datetime


async def read_database(
    database_url: str, world: ChaosWorld, planned: Sequence[PlannedCall]
) -> DatabaseState:
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
        current = {int(row["id"]): row["content"] for row in await cursor.fetchall()}
    return DatabaseState(inbox, revisions, current, datetime.now(UTC))


def posts_by_nonce(fake: FakeDiscord) -> Counter[str]:
    return Counter(
        str(request.json.get("nonce"))
        for request in fake.requests
        if request.method == "POST" and isinstance(request.json, dict)
    )


def _describe_posts(fake: FakeDiscord, nonces: set[str]) -> str:
    """When each post of these nonces arrived (seconds, monotonic) and how it was answered."""
    return ", ".join(
        f"{request.status} at {request.at:.3f}"
        for request in fake.requests
        if request.method == "POST"
        and isinstance(request.json, dict)
        and request.json.get("nonce") in nonces
    )


@dataclass
class _Tally:
    """What the per-call checks gather for the checks of the whole run."""

    known_nonces: set[str] = field(default_factory=set)
    deleted_by_success: set[int] = field(default_factory=set)
    successes: list[tuple[int, PlannedCall]] = field(default_factory=list)  # (revision id, call)
    created: dict[int, PlannedCall] = field(default_factory=dict)  # memory id: its creation
    refused_creations: list[tuple[PlannedCall, ToolCallCompleted]] = field(default_factory=list)


@dataclass
class _RunChecker:
    collected: Collected
    fake: FakeDiscord
    state: DatabaseState
    report: ChaosReport
    reply_ttl: timedelta
    tally: _Tally = field(default_factory=_Tally)

    def __post_init__(self) -> None:
        self.posts = posts_by_nonce(self.fake)
        self.by_call: dict[str, list[Revision]] = defaultdict(list)
        for revision in self.state.revisions:
            self.by_call[revision["tool_call_id"]].append(revision)

    def call(self, call: PlannedCall) -> None:
        """One call: answered once, as recorded, as allowed; then its revision and embed."""
        results = self.collected.results.get(call.tool_call_id, [])
        report = self.report
        for result in results:
            if result.status in UNRECORDED:
                report.unrecorded_answers[result.status.value] += 1
        recorded = {r.status for r in results if r.status not in UNRECORDED}
        stored = self.state.inbox.get(call.tool_call_id)
        if not recorded:
            report.lost += 1
            return
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
        if status.success:
            self._success(call, results)
        else:
            self._failure(call, status, results)

    def _nonces(self, call: PlannedCall) -> set[str]:
        embeds = self.collected.embeds.get(call.tool_call_id, {})
        nonces = {discord_nonce(event_id) for event_id in embeds}
        self.tally.known_nonces |= nonces
        return nonces

    def _success(self, call: PlannedCall, results: Sequence[ToolCallCompleted]) -> None:
        own = self.by_call.get(call.tool_call_id, [])
        nonces = self._nonces(call)
        if len(own) > 1:
            self.report.writes_applied_twice += 1
        if not own:
            self.report.chain_errors.append(f"{call.tool_call_id}: succeeded without a revision")
            return
        revision = own[0]
        if call.scope is not None:
            _saved(call, revision, results, self.tally.created, self.report)
        else:
            self._written(call, revision)
        self._embed(call, revision, nonces)

    def _written(self, call: PlannedCall, revision: Revision) -> None:
        """An update's or delete's revision: the memory and the content it planned."""
        if call.memory_id is not None:
            self.tally.successes.append((revision["revision_id"], call))
        if call.content is None:
            self.tally.deleted_by_success.add(revision["memory_id"])
        expected = (call.memory_id, call.content)
        if (revision["memory_id"], revision["content_after"]) != expected:
            self.report.model_errors.append(
                f"{call.tool_call_id}: wrote {revision['memory_id']}"
                f" {revision['content_after']!r}, planned {expected}"
            )

    def _embed(self, call: PlannedCall, revision: Revision, nonces: set[str]) -> None:
        """One embed event, posted once (or not yet, when its reply outlived its time)."""
        report = self.report
        embeds = self.collected.embeds.get(call.tool_call_id, {})
        if len(embeds) != 1:
            report.embed_errors.append(f"{call.tool_call_id}: {len(embeds)} embed events")
        counts = [self.posts.get(nonce, 0) for nonce in nonces]
        if any(n > 1 for n in counts):
            report.embeds_posted_twice += 1
            report.embed_errors.append(
                f"{call.tool_call_id}: embed posted {max(counts)} times"
                f" ({_describe_posts(self.fake, nonces)})"
            )
        expired = revision["occurred_at"] + self.reply_ttl < self.state.read_at
        if sum(counts) == 0 and not expired:
            report.embeds_missing += 1

    def _failure(
        self, call: PlannedCall, status: MemoryStatus, results: Sequence[ToolCallCompleted]
    ) -> None:
        """A failed call wrote nothing and posted nothing; a refused creation is kept for the
        scope checks."""
        own = self.by_call.get(call.tool_call_id, [])
        nonces = self._nonces(call)
        if call.scope is not None and status in SAVE_OUTCOMES:
            self.tally.refused_creations.extend((call, r) for r in results if r.status is status)
        if own:
            self.report.chain_errors.append(
                f"{call.tool_call_id}: failed ({status.value}) but wrote {len(own)} revision(s)"
            )
        embeds = self.collected.embeds.get(call.tool_call_id, {})
        if embeds or any(self.posts.get(nonce) for nonce in nonces):
            self.report.embed_errors.append(f"{call.tool_call_id}: an embed for a failed call")

    def not_found(self, planned: Sequence[PlannedCall]) -> None:
        """A call that could write and was told "not found": its memory must have been
        deleted."""
        for call in planned:
            results = self.collected.results.get(call.tool_call_id, [])
            if (
                call.memory_id is not None
                and any(r.status is MemoryStatus.NOT_FOUND for r in results)
                and call.memory_id not in self.tally.deleted_by_success
            ):
                self.report.status_errors.append(
                    f"{call.tool_call_id}: not found, but memory {call.memory_id} was never deleted"
                )

    def unknown_posts(self) -> None:
        unknown = {nonce for nonce in self.posts if nonce not in self.tally.known_nonces}
        if unknown:
            self.report.embed_errors.append(f"{len(unknown)} post(s) of no known embed")


def _saved(
    call: PlannedCall,
    revision: Revision,
    results: Sequence[ToolCallCompleted],
    created: dict[int, PlannedCall],
    report: ChaosReport,
) -> None:
    """A creation's one revision: `created`, from nothing, the planned text, the id answered."""
    answered_ids = {r.data.memory_id for r in results if r.success}
    got = (revision["action"], revision["content_before"], revision["content_after"])
    if got != ("created", "", call.content) or answered_ids != {revision["memory_id"]}:
        report.model_errors.append(
            f"{call.tool_call_id}: saved {got} as {revision['memory_id']}, answered"
            f" {sorted(answered_ids, key=str)}, planned {call.content!r}"
        )
        return
    created[revision["memory_id"]] = call
    report.created += 1


def check_chains(
    world: ChaosWorld, state: DatabaseState, created: dict[int, PlannedCall], report: ChaosReport
) -> None:
    """Each revision starts where the previous one ended; the last is what the table holds. A
    created memory's chain begins with its `created` revision, a seeded one's never does."""
    chains: dict[int, list[Revision]] = defaultdict(list)
    for revision in state.revisions:
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
        if content != state.current.get(memory_id):
            report.chain_errors.append(
                f"memory {memory_id}: revisions end at {content!r},"
                f" the table holds {state.current.get(memory_id)!r}"
            )


def check_model(
    world: ChaosWorld, state: DatabaseState, tally: _Tally, report: ChaosReport
) -> None:
    """The seeded contents and the creations' texts, then every successful call's content in
    revision order, predict the table exactly."""
    model: dict[int, str | None] = {m: memory.content for m, memory in world.memories.items()}
    model.update({memory_id: call.content for memory_id, call in tally.created.items()})
    for _, call in sorted(tally.successes, key=lambda pair: pair[0]):
        assert call.memory_id is not None  # only calls that may write are in `successes`
        if model.get(call.memory_id) is None:
            report.model_errors.append(
                f"{call.tool_call_id}: changed memory {call.memory_id} after it was deleted"
            )
        model[call.memory_id] = call.content
    for memory_id, predicted in model.items():
        if state.current.get(memory_id) != predicted:
            report.model_errors.append(
                f"memory {memory_id}: the model says {predicted!r},"
                f" the table holds {state.current.get(memory_id)!r}"
            )


async def check_run(
    collected: Collected,
    *,
    fake: FakeDiscord,
    database_url: str,
    world: ChaosWorld,
    planned: Sequence[PlannedCall],
    report: ChaosReport,
    reply_ttl: timedelta,
) -> None:
    """Every check of the run, its findings in `report`."""
    state = await read_database(database_url, world, planned)
    report.revisions = len(state.revisions)
    checker = _RunChecker(collected, fake, state, report, reply_ttl)
    report.embeds_posted = sum(checker.posts.values())
    for call in planned:
        checker.call(call)
    checker.not_found(planned)
    checker.unknown_posts()
    tally = checker.tally
    check_chains(world, state, tally.created, report)
    check_model(world, state, tally, report)
    check_scopes(world, state.revisions, tally.created, tally.refused_creations, report)


def check_scopes(
    world: ChaosWorld,
    revisions: Sequence[Revision],
    created: dict[int, PlannedCall],
    refused: Sequence[tuple[PlannedCall, ToolCallCompleted]],
    report: ChaosReport,
) -> None:
    """Each scope a creation reached, replayed in revision order: after every creation it holds
    no more than its limit and no two memories that say the same; each refusal names what it
    refuses for.

    The order is that of the creations: they lock their scope before reading it and take their
    revision ids while holding the lock; a delete they saw committed took its id earlier.
    """
    scopes = {call.scope for call in created.values()} | {call.scope for call, _ in refused}
    for scope in sorted(s for s in scopes if s is not None):
        _replay_scope(world, scope, revisions, created, report)
    for call, result in refused:
        _check_refusal(world, call, result, created, report)


def _replay_scope(
    world: ChaosWorld,
    scope: tuple[str, int, int],
    revisions: Sequence[Revision],
    created: dict[int, PlannedCall],
    report: ChaosReport,
) -> None:
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


def _check_refusal(
    world: ChaosWorld,
    call: PlannedCall,
    result: ToolCallCompleted,
    created: dict[int, PlannedCall],
    report: ChaosReport,
) -> None:
    """A duplicate answer names a memory of the scope that says it, a limit answer a full
    scope."""
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
