"""Encryption in transit, end to end, on a broker node and a PostgreSQL instance of the test's
own, both with TLS and the test's CA (the machine's services are never touched): a worker and
`ltm call` over `amqps://` with a client certificate and `sslmode=verify-full`; a database
certificate of another host or of an unknown CA fails with a clear error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harness.localnodes import PostgresPair, RabbitCluster, TlsFiles
from harness.processes import LtmProcess
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.world import World, participant
from tests.support.commands import run_ltm
from tests.support.localnodes import self_signed_tls

pytestmark = [pytest.mark.localnodes, pytest.mark.timeout(240)]


def _database_url(pair: PostgresPair, ca: Path, *, host: str = "localhost", extra: str = "") -> str:
    return (
        f"postgresql://postgres@{host}:{pair.primary.port}/ltm"
        f"?sslmode=verify-full&sslrootcert={ca}{extra}"
    )


@pytest.fixture(scope="module")
def tls_env(
    tls_node: RabbitCluster, tls_postgres: PostgresPair, localnodes_tls: TlsFiles
) -> dict[str, str]:
    """Every setting of a process that talks TLS to both, as that process reads them."""
    amqps = tls_node.amqp_url(tls_node.first.name, tls=True).replace("127.0.0.1", "localhost")
    return {
        "LTM_AMQP_URL": amqps,
        "LTM_AMQP_CA_FILE": str(localnodes_tls.ca),
        "LTM_AMQP_CERT_FILE": str(localnodes_tls.cert),
        "LTM_AMQP_KEY_FILE": str(localnodes_tls.key),
        "LTM_AMQP_PREFIX": "ltmtls",
        "LTM_DATABASE_URL": _database_url(tls_postgres, localnodes_tls.ca),
    }


@pytest.fixture(scope="module")
async def worker(
    services: TestServices, tls_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LtmProcess]:
    migrated = await run_ltm(services, "migrate", **tls_env)
    assert migrated.code == 0, migrated.stderr
    log = tmp_path_factory.mktemp("tls") / "worker.log"
    with LtmProcess(services, ("worker",), log, env=tls_env) as process:
        await process.wait_ready_async(timeout=60)
        yield process


async def test_a_call_goes_through_over_tls_end_to_end(
    services: TestServices, tls_env: dict[str, str], worker: LtmProcess, tmp_path: Path
) -> None:
    world = World(tls_env["LTM_DATABASE_URL"])
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "likes tea")
    triggerer = snowflake()
    call = tmp_path / "call.json"
    call.write_text(
        json.dumps(
            {
                "arguments": {"memory_id": memory_id, "memory_content": "likes tea over TLS"},
                "context": {
                    "guild_id": server.disc_id,
                    "channel_id": snowflake(),
                    "triggerer_id": triggerer,
                    "bot_user_id": snowflake(),
                    "persona_id": persona.persona_id,
                    "shard_id": 0,
                    "participants": [participant(triggerer, "Bob").model_dump()],
                },
            }
        )
    )
    done = await run_ltm(services, "call", str(call), "--json", **tls_env)
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "memory_updated_successfully"
    assert await world.content(memory_id) == "likes tea over TLS"
    with_ssl = await world.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    assert with_ssl == [{"ssl": True}]


async def test_a_database_certificate_of_another_host_fails_clearly(
    services: TestServices, tls_postgres: PostgresPair, localnodes_tls: TlsFiles
) -> None:
    # libpq connects to hostaddr and checks the certificate against host.
    url = _database_url(
        tls_postgres, localnodes_tls.ca, host="db.elsewhere.invalid", extra="&hostaddr=127.0.0.1"
    )
    done = await run_ltm(services, "migrate", LTM_DATABASE_URL=url)
    assert done.code == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("ltm migrate: OperationalError")
    assert 'does not match host name "db.elsewhere.invalid"' in line


async def test_a_database_certificate_of_an_unknown_ca_fails_clearly(
    services: TestServices, tls_postgres: PostgresPair, tmp_path: Path
) -> None:
    other = self_signed_tls(tmp_path / "other")
    done = await run_ltm(
        services, "migrate", LTM_DATABASE_URL=_database_url(tls_postgres, other.ca)
    )
    assert done.code == 1
    [line] = done.stderr.splitlines()
    assert "certificate verify failed" in line
