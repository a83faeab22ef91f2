"""The console's pool after its database sessions were cut (as a failover cuts them): the
next page reads through a new session instead of failing once."""

from __future__ import annotations

from harness.waiting import eventually
from harness.world import World
from tests.integration.console.conftest import Scene

_SESSIONS = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE application_name = 'ltm-console' AND datname = current_database()"
)


async def test_a_page_after_the_consoles_sessions_were_cut_is_served(
    scene: Scene, world: World
) -> None:
    assert await scene.log_in() == 303
    search = "/memories?text=anything"
    assert (await scene.client.get(search)).status == 200

    sessions = {row["pid"] for row in await world.execute(_SESSIONS)}
    assert sessions
    for pid in sessions:
        await world.execute("SELECT pg_terminate_backend(%s)", pid)

    async def gone() -> bool:
        return not sessions & {row["pid"] for row in await world.execute(_SESSIONS)}

    await eventually(gone, timeout=10, what="the console's sessions ended")
    assert (await scene.client.get(search)).status == 200
