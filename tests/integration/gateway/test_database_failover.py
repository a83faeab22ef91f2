"""The gateway's reads over a two-host database URL: after the primary dies and the standby
is promoted, the next read goes to the new primary."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from gateway.database import open_engine
from harness.localnodes.running import started_pair
from infra.settings import Settings

pytestmark = [pytest.mark.localnodes, pytest.mark.timeout(120)]


@pytest.mark.usefixtures("machine_services")
async def test_the_next_read_after_a_promotion_goes_to_the_new_primary(
    settings: Settings,
) -> None:
    with started_pair() as pair:
        assert pair.standby is not None
        own = settings.model_copy(update={"database_url": pair.url("postgres")})
        engine = open_engine(own)
        try:
            async with engine.connect() as connection:
                served_by = await connection.scalar(text("SELECT inet_server_port()"))
            assert served_by == pair.primary.port

            await asyncio.to_thread(pair.kill_primary)
            await asyncio.to_thread(pair.promote_standby)

            # The pooled connection to the dead primary is found dead and replaced.
            async with engine.connect() as connection:
                served_by = await connection.scalar(text("SELECT inet_server_port()"))
                in_recovery = await connection.scalar(text("SELECT pg_is_in_recovery()"))
            assert (served_by, in_recovery) == (pair.standby.port, False)
        finally:
            await engine.dispose()
