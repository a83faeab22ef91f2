"""`make run` loads examples/demo.sql on every run: each load puts the demo back as the README
shows it, whatever the example calls changed or saved, and touches no other rows; the example
calls do what the README's walk-through shows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from contracts import TOOL_NAMES, MemoryStatus, ToolCallRequested
from harness.services import TestServices, own_database
from harness.world import World
from infra.run_local import load_demo
from infra.settings import Settings
from infra.storage.engine import create_engine
from operators.tool_call import complete_envelope
from tests.integration.worker.checks import Pipeline
from worker.adapters.memory_store import MemoryStore

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FRIDAYS = "The server's movie night is on Fridays."
VIOLIN = "{user} is learning the violin."


@pytest.fixture
async def demo(services: TestServices) -> AsyncIterator[tuple[Settings, Pipeline]]:
    """A database of its own (the demo's ids are fixed), and the pipeline on it."""
    with own_database(services, "demo") as url:
        settings = Settings(database_url=url)
        store = MemoryStore(create_engine(settings.sqlalchemy_url, pool_size=1))
        try:
            yield settings, Pipeline(store, World(url))
        finally:
            await store.close()


def example(name: str, **arguments: Any) -> ToolCallRequested:
    """An example call as `ltm call` sends it, its arguments changed as given."""
    fields = orjson.loads((EXAMPLES / name).read_bytes())
    fields["arguments"].update(arguments)
    return complete_envelope(orjson.dumps(fields))


async def assert_documented_state(world: World) -> None:
    assert await world.content(24) == FRIDAYS
    assert await world.content(25) == VIOLIN
    assert await world.revisions(24) == []
    assert await world.revisions(25) == []
    assert await world.inbox("demo-call-1") is None


async def test_each_load_puts_the_demo_back_as_documented(
    demo: tuple[Settings, Pipeline],
) -> None:
    settings, pipeline = demo
    world = pipeline.world
    load_demo(settings)
    await assert_documented_state(world)
    first = await pipeline.run(example("first_call.json"))
    assert first.result.status is MemoryStatus.UPDATED
    deleted = await pipeline.run(example("personal_call.json", memory_content=""))
    assert deleted.result.status is MemoryStatus.DELETED
    assert await world.content(25) is None

    load_demo(settings)

    await assert_documented_state(world)
    # The README's first call applies again, from the documented "Before", instead of
    # answering the first run's result from its idempotency record.
    again = await pipeline.run(example("first_call.json"))
    assert not again.replayed
    assert again.result.status is MemoryStatus.UPDATED
    [revision] = await world.revisions(24)
    assert revision["content_before"] == FRIDAYS
    assert await world.content(24) == "Movie night moved to Saturdays, says {user}."


async def test_a_load_touches_no_other_rows(demo: tuple[Settings, Pipeline]) -> None:
    settings, pipeline = demo
    world = pipeline.world
    scene = await pipeline.guild()
    # Memory 24 taken by another server before the demo came: the demo leaves it alone.
    await world.execute(
        "INSERT INTO server_memories (server_memory_id, server_id, persona_id,"
        " persona_lineage_id, content) VALUES (24, %s, %s, %s, 'not the demo''s')",
        scene.server.server_id,
        scene.persona.persona_id,
        scene.persona.lineage,
    )
    load_demo(settings)
    other = await world.server_memory(scene.persona, "before")
    changed = await pipeline.run(scene.call({"memory_id": other, "memory_content": "after"}))
    assert changed.result.status is MemoryStatus.UPDATED

    load_demo(settings)

    assert await world.content(24) == "not the demo's"
    assert await world.content(other) == "after"
    assert len(await world.revisions(other)) == 1
    assert await world.inbox(changed.result.tool_call_id) is not None
    assert await world.content(25) == VIOLIN


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda path: path.name)
def test_every_example_is_a_tool_call(path: Path) -> None:
    call = complete_envelope(path.read_bytes())
    assert call.tool_name in TOOL_NAMES


async def test_the_create_examples_save_what_the_readme_shows(
    demo: tuple[Settings, Pipeline],
) -> None:
    settings, pipeline = demo
    world = pipeline.world
    load_demo(settings)

    first = await pipeline.run(example("create_server_call.json"))
    personal = await pipeline.run(example("create_personal_call.json"))
    bridged = await pipeline.run(example("create_fallback_call.json"))
    again = await pipeline.run(example("create_server_call.json"))
    changed = await pipeline.run(example("update_created_call.json"))

    # On the demo as loaded, the first new memory is ID:1001, which update_created_call.json
    # changes.
    assert (first.result.status, first.result.data.memory_id) == (MemoryStatus.SAVED, 1001)
    assert (personal.result.status, personal.result.data.target_user) == (
        MemoryStatus.SAVED,
        "Alice (@alice)",
    )
    assert (bridged.result.status, bridged.result.data.fallback) == (
        MemoryStatus.SAVED,
        "bridge_user",
    )
    assert bridged.result.data.content_saved == "Carol streams speedruns on Fridays."
    assert (again.result.status, again.result.data.memory_id) == (
        MemoryStatus.SAVE_DUPLICATE,
        1001,
    )
    assert changed.result.status is MemoryStatus.UPDATED
    assert [r["revision_id"] for r in await world.revisions(1001)] == [1, 5]


async def test_each_load_removes_what_the_create_examples_saved(
    demo: tuple[Settings, Pipeline],
) -> None:
    """Every `make run` loads the demo again: the memories the creations saved go, with their
    history, and the next creation is ID:1001 again, with revision 1, as the README shows."""
    settings, pipeline = demo
    world = pipeline.world
    for _ in range(2):
        load_demo(settings)
        await assert_documented_state(world)
        created = await pipeline.run(example("create_server_call.json"))
        assert created.result.status is MemoryStatus.SAVED, created.result.message
        assert created.result.data.memory_id == 1001
        personal = await pipeline.run(example("create_personal_call.json"))
        assert personal.result.status is MemoryStatus.SAVED, personal.result.message
        assert [r["revision_id"] for r in await world.revisions(1001)] == [1]
