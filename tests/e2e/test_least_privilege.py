"""Every process under its own role, on the broker and in the database (docs/security.md): a
worker whose accounts are only the worker's runs every tool call, a gateway only the bots'
publishes and is answered, the operator's commands replay, tail and restore."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import (
    CREATE_LONG_TERM_MEMORY,
    REMEMBER_THIS_FACT,
    UPDATE_LONG_TERM_MEMORY,
    Participant,
)
from gateway import Gateway
from gateway.console import ConsoleSender
from gateway.tool_client import MessageContext
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import Persona, Server, World, participant
from infra.messaging.accounts import Role
from infra.settings import Settings
from tests.support.commands import run_ltm
from tests.support.deployment import RoleDeployment, role_deployment


@pytest.fixture(scope="module")
def deployment(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RoleDeployment]:
    with role_deployment(settings, tmp_path_factory.mktemp("roles"), label="lp") as made:
        yield made


@pytest.fixture(scope="module")
def worker(
    deployment: RoleDeployment, services: TestServices, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LtmProcess]:
    trusted = f"{deployment.user(Role.BOT)},{deployment.user(Role.OPERATOR)}"
    env = deployment.env(Role.WORKER, LTM_TRUSTED_PUBLISHERS=trusted)
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with LtmProcess(services, ("worker",), log, env=env) as process:
        process.wait_ready()
        yield process


@pytest.fixture(scope="module")
async def gateway(deployment: RoleDeployment, worker: LtmProcess) -> AsyncIterator[Gateway]:
    """The bots' side, in this process, with the bots' broker account and database role."""
    running = Gateway(deployment.settings(Role.BOT), sender=ConsoleSender(), shards=(0,))
    await running.start()
    yield running
    await running.stop(grace_s=5)


async def _call(
    gateway: Gateway,
    tool_name: str,
    arguments: dict[str, Any],
    server: Server,
    persona: Persona,
    triggerer: str,
    *people: Participant,
    tool_call_id: str | None = None,
    channel_id: str | None = None,
) -> dict[str, Any]:
    return await gateway.tool_client.call(
        tool_call_id or f"lp-{uuid.uuid4()}",
        tool_name,
        arguments,
        MessageContext(
            guild_id=server.disc_id,
            channel_id=channel_id or snowflake(),
            triggerer_id=triggerer,
            bot_user_id=snowflake(),
            persona_id=persona.persona_id,
            shard_id=0,
            participants=(participant(triggerer, "Bob"), *people),
        ),
        timeout_s=20,
    )


async def test_a_worker_of_the_worker_role_runs_every_call(gateway: Gateway, world: World) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    owner_id, owner = await world.user()
    personal_id = await world.personal_memory(owner_id, persona.lineage, "owns a cat")
    triggerer = snowflake()
    carol = participant(owner, "Carol")

    update = {"memory_id": memory_id, "memory_content": "likes green tea"}
    updated = await _call(gateway, UPDATE_LONG_TERM_MEMORY, update, server, persona, triggerer)
    assert updated["status"] == "memory_updated_successfully", updated
    delete = {"memory_id": personal_id, "memory_content": "", "target_user": "@Carol"}
    deleted = await _call(
        gateway, UPDATE_LONG_TERM_MEMORY, delete, server, persona, triggerer, carol
    )
    assert deleted["status"] == "memory_deleted_successfully", deleted
    create = {"memory_content": "movie night is on Fridays", "memory_scope": "server_wide"}
    created = await _call(gateway, CREATE_LONG_TERM_MEMORY, create, server, persona, triggerer)
    assert created["status"] == "memory_saved_successfully", created
    remember = {
        "memory_content": "{user} plays the violin",
        "memory_scope": "target_user",
        "target_user": "Carol",
    }
    remembered = await _call(
        gateway, REMEMBER_THIS_FACT, remember, server, persona, triggerer, carol
    )
    assert remembered["status"] == "memory_saved_successfully", remembered
    # The same call again: answered from the idempotency record.
    same = {"tool_call_id": f"lp-again-{uuid.uuid4()}", "channel_id": snowflake()}
    first = await _call(
        gateway, UPDATE_LONG_TERM_MEMORY, update, server, persona, triggerer, **same
    )
    again = await _call(
        gateway, UPDATE_LONG_TERM_MEMORY, update, server, persona, triggerer, **same
    )
    assert again == first

    assert await world.content(memory_id) == "likes green tea"
    assert await world.content(personal_id) is None
    assert len(await world.revisions(memory_id)) == 2


async def test_the_operators_commands_run_under_the_operator_role(
    deployment: RoleDeployment, gateway: Gateway, services: TestServices, world: World
) -> None:
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    update = {"memory_id": memory_id, "memory_content": "likes coffee"}
    answer = await _call(gateway, UPDATE_LONG_TERM_MEMORY, update, server, persona, snowflake())
    assert answer["success"] is True
    [revision] = await world.revisions(memory_id)
    operator = deployment.env(Role.OPERATOR)

    history = await run_ltm(services, "audit", "history", str(memory_id), "--json", **operator)
    assert history.code == 0, history.stderr
    restored = await run_ltm(
        services, "memory", "restore", str(revision["revision_id"]), **operator
    )
    assert restored.code == 0, restored.stderr
    assert await world.content(memory_id) == "likes tea"
    tail = await run_ltm(services, "audit", "tail", "--from", "first", "--json", **operator)
    assert tail.code == 0, tail.stderr
    assert any(json.loads(line).get("memory_id") == memory_id for line in tail.stdout.splitlines())
    listed = await run_ltm(services, "dlq", "list", **operator)
    assert listed.code == 0, listed.stderr
    listing = await run_ltm(
        services, "memory", "list", "--guild", server.disc_id,
        "--persona", str(persona.persona_id), **operator,
    )  # fmt: skip
    assert listing.code == 0 and "likes tea" in listing.stdout, listing.stderr


async def test_ltm_call_runs_under_the_bots_role(
    deployment: RoleDeployment, worker: LtmProcess, services: TestServices, world: World,
    tmp_path: Path,
) -> None:  # fmt: skip
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    call = tmp_path / "call.json"
    triggerer = snowflake()
    call.write_text(
        json.dumps(
            {
                "arguments": {"memory_id": memory_id, "memory_content": "likes cocoa"},
                "context": {
                    "guild_id": server.disc_id,
                    "channel_id": snowflake(),
                    "triggerer_id": triggerer,
                    "bot_user_id": snowflake(),
                    "persona_id": persona.persona_id,
                    "shard_id": 0,
                },
            }
        )
    )
    done = await run_ltm(services, "call", str(call), **deployment.env(Role.BOT))
    assert done.code == 0, done.stderr
    assert await world.content(memory_id) == "likes cocoa"
