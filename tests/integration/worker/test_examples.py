"""The files under `examples/` do what the README's "Try it" says, on the demo data of
`make run` (in a database of their own: the demo's fixed ids would meet other tests' rows)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contracts import TOOL_NAMES, MemoryStatus, ToolCallCompleted
from infra.database import drop_database, migrate, with_database_name
from infra.run_local import DEMO, load_demo
from infra.settings import Settings, to_sqlalchemy_url
from tests.integration.worker.checks import REPLY_TTL_MS
from tests.support.world import World
from worker.adapters.database import MemoryStore, create_engine
from worker.ops.call import complete_envelope
from worker.service import process_tool_call

EXAMPLES = DEMO.parent


@pytest.fixture(scope="module")
async def demo(settings: Settings) -> AsyncIterator[tuple[MemoryStore, World]]:
    url = with_database_name(settings.database_url, f"ltm_demo_{uuid.uuid4().hex[:10]}")
    migrate(url)
    world = World(url)
    load_demo(settings.model_copy(update={"database_url": url}))
    store = MemoryStore(create_engine(to_sqlalchemy_url(url), pool_size=1))
    try:
        yield store, world
    finally:
        await store.close()
        drop_database(url)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda path: path.name)
def test_every_example_is_a_tool_call(path: Path) -> None:
    call = complete_envelope(path.read_bytes())
    assert call.tool_name in TOOL_NAMES


async def test_the_create_examples_save_what_the_readme_shows(
    demo: tuple[MemoryStore, World],
) -> None:
    store, world = demo
    outcomes: dict[str, list[ToolCallCompleted]] = {}
    for name in (
        "create_server_call.json",
        "create_personal_call.json",
        "create_fallback_call.json",
        "create_server_call.json",
    ):
        async with store.transaction() as tx:
            processed = await process_tool_call(
                complete_envelope((EXAMPLES / name).read_bytes()),
                tx,
                max_memory_length=1000,
                reply_ttl_ms=REPLY_TTL_MS,
            )
        outcomes.setdefault(name, []).append(processed.result)

    first, again = outcomes["create_server_call.json"]
    assert first.status is MemoryStatus.SAVED and first.data.scope == "server_wide"
    assert again.status is MemoryStatus.SAVE_DUPLICATE
    assert again.data.memory_id == first.data.memory_id
    [personal] = outcomes["create_personal_call.json"]
    assert (personal.status, personal.data.target_user) == (MemoryStatus.SAVED, "Alice (@alice)")
    [bridged] = outcomes["create_fallback_call.json"]
    assert (bridged.status, bridged.data.fallback) == (MemoryStatus.SAVED, "bridge_user")
    assert bridged.data.content_saved == "Carol streams speedruns on Fridays."
    # On a fresh demo the first new memory is ID:1001, which update_created_call.json changes.
    assert first.data.memory_id == 1001
    assert await world.content(1001) == "{user} hosts the quiz on the first Monday of the month."
