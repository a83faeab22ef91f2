"""`ltm migrate --roles`: the roles exist without login, each login role that is a member of
one of them can do what its part does and is refused the rest (docs/security.md)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import hikari
import psycopg
import pytest

from gateway import GatewayCaches, MemberDirectory
from gateway.memories import MemoryReader
from harness.snowflake import snowflake
from harness.world import World
from infra.settings import Settings
from infra.storage.roles import GRANTS, ROLES, SEQUENCE_GRANTS, TABLES
from ltm.main import main
from tests.support.database_roles import LoginRoles, login_roles


@pytest.fixture(scope="module")
def logins(settings: Settings) -> Iterator[LoginRoles]:
    with login_roles(settings.database_url) as made:
        yield made


@pytest.fixture(scope="module")
def world(settings: Settings) -> World:
    return World(settings.database_url)


def _as(settings: Settings, logins: LoginRoles, role: str) -> Settings:
    return settings.model_copy(update={"database_url": logins.url(role)})


async def _refused(url: str, statement: str, *params: object) -> str:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as raised:
            await connection.execute(statement, params)
    return str(raised.value)


async def _allowed(url: str, statement: str, *params: object) -> None:
    async with await psycopg.AsyncConnection.connect(url) as connection:
        await connection.execute(statement, params)
        await connection.rollback()  # tried, not kept


def test_migrate_roles_twice_creates_roles_without_login(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LTM_DATABASE_URL", settings.database_url)
    assert main(["migrate", "--roles"]) == 0
    assert main(["migrate", "--roles"]) == 0
    assert "roles ltm_worker, ltm_gateway, ltm_operator exist" in capsys.readouterr().out
    with psycopg.connect(settings.database_url) as connection:
        found = connection.execute(
            "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = ANY(%s)", (list(ROLES),)
        ).fetchall()
    assert sorted(found) == sorted((role, False) for role in ROLES)


def test_every_table_and_sequence_of_the_schema_is_decided(settings: Settings) -> None:
    with psycopg.connect(settings.database_url) as connection:
        tables = {
            row[0]
            for row in connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            )
        }
        sequences = {
            row[0]
            for row in connection.execute(
                "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'"
            )
        }
    assert tables == set(TABLES), "a table without grants: add it to infra.storage.roles"
    for role in ROLES:
        assert set(GRANTS[role]) <= tables
        assert set(SEQUENCE_GRANTS[role]) <= sequences


async def test_a_gateway_login_cannot_write_a_memory_or_a_revision(
    logins: LoginRoles, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    owner, _ = await world.user()
    personal_id = await world.personal_memory(owner, 0, "owns a cat")
    gateway = logins.url("ltm_gateway")
    reason = await _refused(
        gateway,
        "UPDATE server_memories SET content = 'forged' WHERE server_memory_id = %s",
        memory_id,
    )
    assert "permission denied for table server_memories" in reason
    await _refused(
        gateway, "DELETE FROM personal_memories WHERE personal_memory_id = %s", personal_id
    )
    await _refused(
        gateway,
        "INSERT INTO server_memories (server_id, persona_lineage_id, content)"
        " VALUES (%s, %s, 'forged')",
        server.server_id,
        persona.lineage,
    )
    await _refused(
        gateway,
        "INSERT INTO memory_revisions (scope, memory_id, action, content_before,"
        " persona_lineage_id, actor_disc_id, tool_call_id)"
        " VALUES ('server_wide', 1, 'updated', '', 0, 'x', 'x')",
    )
    await _refused(gateway, "UPDATE users SET privacy_level = 0")
    await _refused(gateway, "SELECT * FROM tool_call_inbox")
    assert await world.content(memory_id) == "likes tea"
    assert await world.content(personal_id) == "owns a cat"


async def test_a_gateway_login_keeps_the_directory_and_reads_memories(
    settings: Settings, logins: LoginRoles, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    as_gateway = _as(settings, logins, "ltm_gateway")
    reader = MemoryReader.from_settings(as_gateway, GatewayCaches.from_settings(as_gateway))
    try:
        listing = await reader.read(server.disc_id, persona.persona_id)
    finally:
        await reader.close()
    assert [memory.memory_id for memory in listing.server] == [memory_id]

    directory = MemberDirectory.from_settings(as_gateway)
    guild = int(snowflake())  # a server the directory has to create
    try:
        assert await directory.upsert_members(guild, [_member(guild, "alice")]) == 1
        assert await directory.keep_only(guild, []) == 1
    finally:
        await directory.close()


def _member(guild_id: int, username: str) -> hikari.Member:
    token = base64.b64encode(snowflake().encode()).decode().rstrip("=")
    bot = hikari.GatewayBot(f"{token}.fake.token", banner=None, logs=None)
    user_id = int(snowflake())
    return bot.entity_factory.deserialize_member(
        {
            "user": {"id": str(user_id), "username": username, "discriminator": "0",
                     "global_name": None, "avatar": None},
            "nick": None,
            "roles": [],
            "joined_at": datetime.now(UTC).isoformat(),
            "deaf": False,
            "mute": False,
            "flags": 0,
        },
        guild_id=hikari.Snowflake(guild_id),
    )  # fmt: skip


async def test_a_worker_login_is_refused_what_is_not_the_pipelines(
    logins: LoginRoles, world: World
) -> None:
    server = await world.server()
    worker = logins.url("ltm_worker")
    await _refused(
        worker, "UPDATE servers SET server_disc_id = 'x' WHERE server_id = %s", server.server_id
    )
    await _refused(worker, "INSERT INTO guild_members (server_id, user_disc_id, username)"
                   " VALUES (%s, '1', 'x')", server.server_id)  # fmt: skip
    await _refused(worker, "UPDATE users SET user_disc_id = 'x'")
    await _refused(worker, "DELETE FROM memory_revisions")
    await _refused(worker, "UPDATE memory_revisions SET tool_call_id = 'x'")
    await _refused(worker, "UPDATE personas SET nickname = 'x'")
    await _refused(worker, "INSERT INTO posted_notices (event_id, shard_id, channel_id,"
                   " message_id, memory_id, scope) VALUES (gen_random_uuid(), 0, '1', '1', 1,"
                   " 'target_user')")  # fmt: skip
    # What an erasure does: the users row forgotten, the history redacted (the trigger
    # allows nothing else), the directory's rows gone, the notices read.
    await _allowed(worker, "UPDATE users SET user_nickname = NULL, privacy_level = 2")
    await _allowed(worker, "DELETE FROM guild_members WHERE server_id = %s", server.server_id)
    await _allowed(worker, "SELECT * FROM posted_notices")
    await _allowed(worker, "SELECT * FROM data_requests")
    # What the create tool does to serialize a scope: a row lock on the server.
    await _allowed(
        worker,
        "SELECT server_id FROM servers WHERE server_id = %s FOR NO KEY UPDATE",
        server.server_id,
    )


async def test_an_operator_login_reads_everything_and_writes_only_what_a_restore_writes(
    logins: LoginRoles, world: World
) -> None:
    operator = logins.url("ltm_operator")
    for table in TABLES:
        await _allowed(operator, f"SELECT * FROM {table} LIMIT 1")
    await _refused(operator, "UPDATE tool_call_inbox SET status = 'x'")
    await _refused(operator, "INSERT INTO guild_members (server_id, user_disc_id, username)"
                   " VALUES (1, '1', 'x')")  # fmt: skip
    await _refused(operator, "UPDATE users SET privacy_level = 0")
    await _refused(operator, "DELETE FROM outbox")


async def test_the_gateway_keeps_its_posted_notices_and_the_worker_reads_them(
    settings: Settings, logins: LoginRoles
) -> None:
    gateway, worker = logins.url("ltm_gateway"), logins.url("ltm_worker")
    event_id = uuid.uuid4()
    async with await psycopg.AsyncConnection.connect(gateway, autocommit=True) as connection:
        await connection.execute(
            "INSERT INTO posted_notices (event_id, shard_id, channel_id, message_id, memory_id,"
            " scope) VALUES (%s, 0, '1', '2', 3, 'server_wide')",
            (event_id,),
        )
        await connection.execute(
            "UPDATE posted_notices SET retract_error = 'forbidden' WHERE channel_id = '1'"
            " AND message_id = '2'"
        )
    async with await psycopg.AsyncConnection.connect(worker) as connection:
        cursor = await connection.execute(
            "SELECT retract_error FROM posted_notices WHERE event_id = %s", (event_id,)
        )
        assert await cursor.fetchone() == ("forbidden",)
    await _refused(worker, "DELETE FROM posted_notices WHERE event_id = %s", event_id)
    await _allowed(gateway, "DELETE FROM posted_notices WHERE event_id = %s", event_id)
