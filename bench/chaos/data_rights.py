"""Data requests in a chaos run: a few users beside the world the calls are planned in, each
with marked texts in memories, revisions and a tool-call record, exported then erased while
the faults strike; afterwards every erasure must be done and none of their texts left.

The subjects are nobody the planned calls name, so that the run's model of the memories
stays exact. Their requests carry no context: the answer is only in `data_requests`.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import psycopg

from bench.chaos.report import ChaosReport
from contracts import DataRequestRequested
from contracts.data_requests import RequestedBy, Subject

__all__ = [
    "ErasableSubject",
    "check_erasures",
    "publish_data_requests",
    "request_ids",
    "seed_subjects",
]

_FIRST_ID = 888_000_000_000_000_000


@dataclass(frozen=True)
class ErasableSubject:
    disc_id: str
    texts: tuple[str, ...]  # its memories' (the nickname last)

    def request(self, kind: str) -> DataRequestRequested:
        return DataRequestRequested(
            request_id=f"chaos-{kind}-{self.disc_id}",
            kind=kind,  # type: ignore[arg-type]
            subject=Subject(user_id=self.disc_id),
            requested_by=RequestedBy(kind="user", id=self.disc_id),
        )


def request_ids(subjects: Sequence[ErasableSubject]) -> list[str]:
    """The `request_id` of each subject's export and erasure."""
    return [s.request(kind).request_id for s in subjects for kind in ("export", "erase")]


async def seed_subjects(
    database_url: str, rng: random.Random, count: int = 3
) -> list[ErasableSubject]:
    """`count` users with three personal memories each, their `created` revisions, and a
    tool-call record they triggered whose result repeats a text."""
    subjects = []
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
        for n in range(count):
            disc_id = str(_FIRST_ID + rng.randrange(10**9) * 10 + n)
            mark = uuid.uuid4().hex[:10]
            texts = tuple(f"erasable-{mark}-{k}" for k in range(3))
            row = await (
                await db.execute(
                    "INSERT INTO users (user_disc_id, user_nickname) VALUES (%s, %s)"
                    " RETURNING user_id",
                    (disc_id, f"nick-{mark}"),
                )
            ).fetchone()
            assert row is not None
            for k, text in enumerate(texts):  # the memories' texts
                memory = await (
                    await db.execute(
                        "INSERT INTO personal_memories (user_id, persona_lineage_id, content)"
                        " VALUES (%s, 0, %s) RETURNING personal_memory_id",
                        (row[0], text),
                    )
                ).fetchone()
                assert memory is not None
                call_id = f"chaos-erasable-{mark}-{k}"
                await db.execute(
                    "INSERT INTO memory_revisions (scope, memory_id, action, content_before,"
                    " content_after, owner_user_id, persona_lineage_id, actor_disc_id,"
                    " tool_call_id) VALUES ('target_user', %s, 'created', '', %s, %s, 0, %s, %s)",
                    (memory[0], text, row[0], disc_id, call_id),
                )
                await db.execute(
                    "INSERT INTO tool_call_inbox (tool_call_id, event_id, tool_name, channel_id,"
                    " shard_id, status, result, fingerprint, triggerer_id, completed_at)"
                    " VALUES (%s, %s, 'create_long_term_memory', '1', 0,"
                    " 'memory_saved_successfully', jsonb_build_object('status',"
                    " 'memory_saved_successfully', 'message', %s::text), 'f', %s, now())",
                    (call_id, uuid.uuid4(), f"Saved: {text}", disc_id),
                )
            subjects.append(ErasableSubject(disc_id, (*texts, f"nick-{mark}")))
    return subjects


async def publish_data_requests(
    publish: Callable[[DataRequestRequested], Awaitable[None]],
    subjects: Sequence[ErasableSubject],
    rng: random.Random,
    *,
    span: float,
) -> None:
    """Each subject's export, then its erasure, at random moments of the publishing span."""
    moments = sorted(
        (rng.uniform(0, span), n, kind)
        for n, _ in enumerate(subjects)
        for kind in ("export", "erase")
    )
    # An export before its erasure: the second moment of a subject is its erasure.
    seen: set[int] = set()
    begin = time.monotonic()
    for moment, n, _ in moments:
        kind = "erase" if n in seen else "export"
        seen.add(n)
        delay = begin + moment - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await publish(subjects[n].request(kind))


async def check_erasures(
    database_url: str,
    subjects: Sequence[ErasableSubject],
    report: ChaosReport,
    *,
    timeout: float,
) -> None:
    """Every request done, once; none of the erased subjects' texts anywhere."""
    wanted = request_ids(subjects)
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
        while True:
            rows = await (
                await db.execute(
                    "SELECT request_id, kind, status FROM data_requests WHERE request_id = ANY(%s)",
                    (wanted,),
                )
            ).fetchall()
            done = {request_id: kind for request_id, kind, status in rows if status == "done"}
            if len(done) == len(wanted) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        statuses = {request_id: status for request_id, _, status in rows}
        report.exports = sum(kind == "export" for kind in done.values())
        report.erasures = sum(kind == "erase" for kind in done.values())
        report.erasure_errors += [
            f"request {r} not done ({statuses.get(r, 'no row')})" for r in wanted if r not in done
        ]
        texts = [text for subject in subjects for text in subject.texts]
        for table, column in (
            ("personal_memories", "content"),
            ("server_memories", "content"),
            ("memory_revisions", "coalesce(content_before, '') || coalesce(content_after, '')"),
            ("tool_call_inbox", "coalesce(result::text, '')"),
            ("outbox", "convert_from(body, 'UTF8')"),
            ("users", "coalesce(user_nickname, '')"),
        ):
            found = await (
                await db.execute(
                    f"SELECT count(*) FROM {table} WHERE {column} LIKE ANY(%s)",
                    ([f"%{text}%" for text in texts],),
                )
            ).fetchone()
            if found is not None and found[0]:
                report.erasure_errors.append(f"{found[0]} row(s) of {table} hold an erased text")
