"""The operator console in a real browser (chromium through Playwright), with a real worker,
broker and database: log in, watch the overview move, replay a dead letter, read a memory's
history and restore it, follow the audit stream live; a request without a session or
without its CSRF token changes nothing.

Screenshots go to `LTM_SCREENSHOTS` when set (`make screenshots` keeps them in
docs/screenshots), else to the test's own folder.
"""

from __future__ import annotations

import asyncio
import os
import re
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from aio_pika.abc import AbstractChannel
from playwright.async_api import Page, expect

from console.passwords import hash_password
from contracts import (
    DeadLettersReplayed,
    MemoryRestored,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
)
from harness.broker import EventTap, own_topology, publish_tool_call, queue_depth, tap_events
from harness.processes import LtmProcess, free_port
from harness.services import TestServices
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona, World, tool_call
from infra.settings import Settings
from tests.integration.operators.seeding import worker_dead_letter
from tests.support.browser import chromium

pytestmark = pytest.mark.browser

PASSWORD: Final = "correct horse battery"
OPERATOR: Final = "ann"
# Playwright's own waits (expect, clicks): long enough for a refresh of the overview.
WAIT_MS: Final = 15_000


@dataclass
class Deployment:
    settings: Settings
    topology: Topology
    channel: AbstractChannel
    events: EventTap
    console_url: str
    shots: Path


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("LTM_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def log_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console")


@pytest.fixture(scope="module")
async def deployment(
    settings: Settings, services: TestServices, log_folder: Path, shots: Path
) -> AsyncIterator[Deployment]:
    """A topology of the module's own, a worker and `ltm console` on it."""
    async with own_topology(settings, "browser", publisher_confirms=True) as (own, topology, ch):
        env = {"LTM_AMQP_PREFIX": own.amqp_prefix}
        port = free_port()
        console_env = {
            **env,
            "LTM_CONSOLE_PASSWORD_HASH": hash_password(PASSWORD),
            "LTM_CONSOLE_REFRESH_S": "0.5",
        }
        with (
            LtmProcess(services, ("worker",), log_folder / "worker.log", env=env) as worker,
            LtmProcess(
                services,
                ("console", "--port", str(port)),
                log_folder / "console.log",
                env=console_env,
            ) as console,
        ):
            await worker.wait_ready_async()
            url = f"http://127.0.0.1:{port}"
            await _answers(url + "/healthz", console)
            async with tap_events(ch, topology.events_exchange) as events:
                yield Deployment(own, topology, ch, events, url, shots)


async def _answers(url: str, process: LtmProcess) -> None:
    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            assert process.process is not None and process.process.poll() is None, process.output()
            return False

    async def ready() -> bool:
        return await asyncio.to_thread(probe)

    await eventually(ready, timeout=30, what=f"{url} to answer")


@pytest.fixture(scope="module")
async def page(deployment: Deployment) -> AsyncIterator[Page]:
    """One browser tab for the module, logged in by the first test (the tests run in the
    file's order)."""
    expect.set_options(timeout=WAIT_MS)
    async with chromium() as browser:
        context = await browser.new_context(
            base_url=deployment.console_url, viewport={"width": 1280, "height": 860}
        )
        context.set_default_timeout(WAIT_MS)
        tab = await context.new_page()
        yield tab
        await context.close()


@pytest.fixture(scope="module")
def world(settings: Settings) -> World:
    return World(settings.database_url)


async def _persona(world: World) -> Persona:
    server = await world.server()
    return await world.persona(server)


async def _answered(deployment: Deployment, *calls: ToolCallRequested) -> None:
    for call in calls:
        await deployment.events.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)


async def test_log_in_and_watch_the_overview_count_new_tool_calls(
    page: Page, deployment: Deployment, world: World
) -> None:
    await page.goto("/")
    await expect(page).to_have_url(deployment.console_url + "/login?next=/")
    await page.screenshot(path=deployment.shots / "login.png")
    await page.get_by_label("Your name").fill(OPERATOR)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    answered = page.locator('[data-tile="answered_last_hour"]')
    await expect(answered).to_have_text(_a_number())
    before = int(await answered.inner_text())

    persona = await _persona(world)
    memory_id = await world.server_memory(persona, "v0")
    calls = [
        tool_call(
            persona, {"memory_id": memory_id, "memory_content": f"v{n}"}, triggerer_id=snowflake()
        )
        for n in range(1, 4)
    ]
    for call in calls:
        await publish_tool_call(deployment.channel, deployment.topology, call)
    await _answered(deployment, *calls)

    async def counted() -> int | None:
        shown = await answered.inner_text()
        return int(shown) if shown.isdigit() and int(shown) >= before + 3 else None

    await eventually(counted, timeout=15, what="the overview to count the new calls")
    await expect(page.locator('[data-tile="p50_ms"]')).to_have_text(_a_number(decimal=True))
    await expect(page.locator('[data-tile="workers"]')).to_have_text("1")
    await page.screenshot(path=deployment.shots / "overview.png", full_page=True)


async def test_a_dead_letter_replayed_from_the_list_is_answered_and_recorded(
    page: Page, deployment: Deployment, world: World
) -> None:
    persona = await _persona(world)
    memory_id = await world.server_memory(persona, "before the replay")
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "after the replay"},
        triggerer_id=snowflake(),
    )
    # A call the worker gave up on (the database was away, say), now fixed.
    await worker_dead_letter(
        deployment.channel, deployment.topology, call, "database unavailable: test"
    )

    await page.goto("/dead-letters")
    row = page.locator(f'tr.letter[data-tool-call-id="{call.tool_call_id}"]')
    await expect(row).to_contain_text("database unavailable: test")
    await page.locator("tr.body details").first.click()
    await page.screenshot(path=deployment.shots / "dead-letters.png", full_page=True)
    await row.get_by_role("button", name="Replay").click()

    await expect(page.locator(".notice.done")).to_contain_text(
        f"Replayed 1 dead letter(s): {call.tool_call_id}"
    )
    [answer] = await deployment.events.wait_for(ToolCallCompleted, tool_call_id=call.tool_call_id)
    assert answer.success
    assert await world.content(memory_id) == "after the replay"
    [record] = await deployment.events.wait_for(DeadLettersReplayed, actor=f"console:{OPERATOR}")
    assert [replayed.tool_call_id for replayed in record.replayed] == [call.tool_call_id]
    assert await queue_depth(deployment.channel, deployment.topology.dead_letter_queue) == 0


async def test_a_memory_shows_its_update_as_a_diff_and_a_restore_puts_it_back(
    page: Page, deployment: Deployment, world: World
) -> None:
    persona = await _persona(world)
    memory_id = await world.server_memory(persona, "Movie night is on Fridays.")
    call = tool_call(
        persona,
        {"memory_id": memory_id, "memory_content": "Movie night is on Saturdays."},
        triggerer_id=snowflake(),
    )
    await publish_tool_call(deployment.channel, deployment.topology, call)
    await _answered(deployment, call)
    [revision] = await world.revisions(memory_id)

    await page.goto(f"/memories?memory={memory_id}")
    update = page.locator(f'li.revision[data-revision-id="{revision["revision_id"]}"]')
    await expect(update.locator("del")).to_have_text("Fridays")
    await expect(update.locator("ins")).to_have_text("Saturdays")
    await expect(update).to_contain_text(call.tool_call_id)
    await expect(update).to_contain_text(call.context.channel_id)
    await page.screenshot(path=deployment.shots / "memory.png", full_page=True)

    await update.get_by_role("link", name=f"Restore as before #{revision['revision_id']}").click()
    await expect(page.get_by_role("heading")).to_contain_text("Restore memory")
    await page.screenshot(path=deployment.shots / "restore.png")
    await page.get_by_role("button", name="Restore").click()

    await expect(page.locator(".notice.done")).to_contain_text(f"Memory {memory_id} restored")
    await expect(page.locator("#current")).to_have_text("Movie night is on Fridays.")
    assert await world.content(memory_id) == "Movie night is on Fridays."
    restored = (await world.revisions(memory_id))[-1]
    assert (restored["action"], restored["actor_disc_id"]) == ("restored", f"console:{OPERATOR}")
    [audit] = await deployment.events.wait_for(MemoryRestored, memory_id=memory_id)
    assert audit.actor_id == f"console:{OPERATOR}"


async def test_the_audit_page_receives_an_event_live(
    page: Page, deployment: Deployment, world: World
) -> None:
    persona = await _persona(world)
    memory_id = await world.server_memory(persona, "quiet")
    await page.goto(f"/audit?from=last&memory={memory_id}")
    await expect(page.locator("#stream-state")).to_have_attribute("data-live", "true")

    call = tool_call(
        persona, {"memory_id": memory_id, "memory_content": "loud"}, triggerer_id=snowflake()
    )
    await publish_tool_call(deployment.channel, deployment.topology, call)

    row = page.locator('#events tr[data-type="memory.updated"]')
    await expect(row).to_contain_text(call.tool_call_id)
    # The texts come from the change's revision; the stream holds neither them nor results.
    await expect(row).to_contain_text("before: quiet after: loud")
    await expect(page.locator('#events tr[data-type="tool_call.completed"]')).to_have_count(0)
    await page.screenshot(path=deployment.shots / "audit.png")


async def test_requests_without_a_session_or_its_csrf_token_change_nothing(
    page: Page, deployment: Deployment, world: World
) -> None:
    persona = await _persona(world)
    call = tool_call(persona, {"memory_id": 1, "memory_content": "x"}, triggerer_id=snowflake())
    await worker_dead_letter(deployment.channel, deployment.topology, call, "test: keep me")
    queue = deployment.topology.dead_letter_queue
    purge: dict[str, str | float | bool] = {"queue_name": queue}

    # The tab's own session, but no token: what a forged form on another site would send.
    forged = await page.request.post("/dead-letters/purge", form=purge)
    replay = await page.request.post("/dead-letters/replay-all", form={"csrf_token": "guessed"})
    # No session at all.
    stranger = await page.context.browser.new_context(base_url=deployment.console_url)  # type: ignore[union-attr]
    anonymous = await stranger.request.post("/dead-letters/purge", form=purge)
    await stranger.close()

    assert (forged.status, replay.status, anonymous.status) == (403, 403, 401)
    assert await queue_depth(deployment.channel, queue) == 1
    assert await queue_depth(deployment.channel, deployment.topology.worker_queue) == 0
    await page.goto("/dead-letters")
    await expect(
        page.locator(f'tr.letter[data-tool-call-id="{call.tool_call_id}"]')
    ).to_be_visible()


def _a_number(*, decimal: bool = False) -> re.Pattern[str]:
    return re.compile(r"^\d+(\.\d+)?$" if decimal else r"^\d+$")
