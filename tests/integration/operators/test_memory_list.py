"""`ltm memory list` as a real process on the real database: text, `--json`, exit codes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.processes import free_port
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import World
from tests.support.read_back import shape_memory

REPOSITORY = Path(__file__).resolve().parents[3]
CREATED = datetime(2026, 11, 30, 18, 30, 5, tzinfo=UTC)


@pytest.fixture(scope="module")
def world(services: TestServices) -> World:
    return World(services.database_url)


async def ltm(services: TestServices, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "ltm", *args],
        env=services.env(LTM_LOG_FORMAT="console", **env),
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_text_lists_the_server_then_each_person_newest_first(
    services: TestServices, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    alice_id, alice = await world.user()
    bob = snowflake()
    older = await world.server_memory(persona, "movie night is on Fridays")
    await shape_memory(world, older, created_at=CREATED, tags=("events",))
    newer = await world.server_memory(persona, "{user} brings snacks\nalways chips")
    personal = await world.personal_memory(alice_id, 0, "{user} plays the violin")

    done = await ltm(
        services,
        *("memory", "list", "--guild", server.disc_id, "--persona", str(persona.persona_id)),
        *("--user", alice, "--user", bob),
    )

    assert done.returncode == 0, done.stderr
    lineage = persona.lineage
    assert done.stdout.splitlines() == [
        f"Server memories of {server.disc_id}, persona {persona.persona_id} (lineage {lineage}): 2",
        f"ID:{newer} {{user}} brings snacks\\nalways chips",
        f"ID:{older} [tags: events] movie night is on Fridays",
        "",
        f"Personal memories of {alice} (lineage {lineage} and global 0): 1",
        f"ID:{personal} {{user}} plays the violin",
        "",
        f"Personal memories of {bob} (lineage {lineage} and global 0): none",
    ]


async def test_json_is_one_object_of_server_and_personal_memories(
    services: TestServices, world: World
) -> None:
    user_id, user_disc = await world.user()
    dm = await world.server(user_disc, is_dm=True)  # a DM: the server is the user's id
    persona = await world.persona(dm)
    teacher_id, teacher_disc = await world.user()
    taught = await world.server_memory(persona, "{user} and {bot} talk about books")
    await shape_memory(world, taught, created_at=CREATED, tags=("books", "talk"))
    await shape_memory(world, taught, teacher_user_id=teacher_id)
    untaught = await world.server_memory(persona, "{user} lives in Lyon")
    personal = await world.personal_memory(user_id, persona.lineage, "{user} reads sci-fi")
    await shape_memory(world, personal, created_at=CREATED - timedelta(days=1))

    done = await ltm(
        services,
        *("memory", "list", "--guild", user_disc, "--persona", str(persona.persona_id)),
        *("--user", user_disc, "--json"),
    )

    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert set(listing) == {"server", "personal"}
    assert [memory["memory_id"] for memory in listing["server"]] == [untaught, taught]
    assert listing["server"][1] == {
        "memory_id": taught,
        "content": "{user} and {bot} talk about books",
        "tags": ["books", "talk"],
        "created_at": "2026-11-30T18:30:05Z",
        "updated_at": "2026-11-30T18:30:05Z",
        "persona_lineage_id": persona.lineage,
        "revision_id": 0,  # seeded: no revision
        "teacher_id": teacher_disc,
    }
    assert listing["server"][0]["teacher_id"] is None
    [mine] = listing["personal"][user_disc]
    assert mine["memory_id"] == personal and mine["content"] == "{user} reads sci-fi"
    assert mine["created_at"] == "2026-11-29T18:30:05Z"
    assert set(mine) == {
        "memory_id",
        "content",
        "tags",
        "created_at",
        "updated_at",
        "persona_lineage_id",
        "revision_id",
    }


async def test_an_unknown_server_or_persona_is_said_so_with_exit_3(
    services: TestServices, world: World
) -> None:
    server = await world.server()
    stranger = snowflake()

    no_server = await ltm(services, "memory", "list", "--guild", stranger, "--persona", "1")
    no_persona = await ltm(
        services, "memory", "list", "--guild", server.disc_id, "--persona", "2147483647"
    )

    assert no_server.returncode == 3
    assert no_server.stdout == ""
    assert no_server.stderr.strip() == (
        f"ltm memory list: no server {stranger} (a guild's id, or the user's id for a DM)"
    )
    assert no_persona.returncode == 3
    assert no_persona.stderr.strip() == (
        f"ltm memory list: server {server.disc_id} has no persona 2147483647"
    )


async def test_a_bad_id_is_a_usage_error_and_an_unreachable_database_a_failure(
    services: TestServices,
) -> None:
    bad = await ltm(services, "memory", "list", "--guild", "general", "--persona", "1")
    unreachable = await ltm(
        services,
        *("memory", "list", "--guild", snowflake(), "--persona", "1"),
        LTM_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{free_port()}/ltm",
    )

    assert bad.returncode == 2
    assert "argument --guild: not a Discord id (digits): 'general'" in bad.stderr
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("ltm memory: OperationalError")
    assert "Traceback" not in unreachable.stderr
