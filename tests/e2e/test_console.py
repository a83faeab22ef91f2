"""The operator console in a real browser (chromium through Playwright), with a real worker,
broker and database: log in, watch the overview move, replay a dead letter, read a memory's
history and restore it, follow the audit stream live, revert one user's changes from the
Changes page; a request without a session or without its CSRF token changes nothing; the data
requests listed with their receipts, a user exported, an erasure refused until its subject's id
is typed again (the test answers the data requests in the worker's place).

Screenshots go to `LTM_SCREENSHOTS` when set (`make screenshots` keeps them in
docs/screenshots), else to the test's own folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage
from playwright.async_api import Page, ViewportSize, expect

from console.passwords import hash_password
from contracts import (
    DATA_REQUEST_ROUTING_KEY,
    DataRequestCompleted,
    DataRequestRequested,
    DeadLettersReplayed,
    ExportDocument,
    MemoriesReverted,
    MemoryRestored,
    Receipt,
    ToolCallCompleted,
    ToolCallRequested,
    Topology,
    amqp_properties,
    decode_event,
    encode_event,
    result_routing_key,
)
from contracts.data_requests import ExportedUser
from harness.broker import (
    EventTap,
    own_topology,
    publish_raw,
    publish_tool_call,
    queue_depth,
    tap_events,
)
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


async def test_one_user_s_changes_are_found_and_reverted_from_the_changes_page(
    page: Page, deployment: Deployment, world: World
) -> None:
    persona = await _persona(world)
    vandal, channel_id = snowflake(), snowflake()
    memories = [
        await world.server_memory(persona, f"Movie night {n} is on Fridays.") for n in range(3)
    ]
    calls = [
        tool_call(
            persona,
            {"memory_id": memory_id, "memory_content": f"Movie night {n} is cancelled."},
            triggerer_id=vandal,
            channel_id=channel_id,
        )
        for n, memory_id in enumerate(memories)
    ]
    for call in calls:
        await publish_tool_call(deployment.channel, deployment.topology, call)
    await _answered(deployment, *calls)

    await page.goto("/changes")
    await page.get_by_label("Actor").fill(vandal)
    await page.get_by_label("Channel").fill(channel_id)
    await page.get_by_role("button", name="Show").click()
    await expect(page.locator("li.revision")).to_have_count(3)
    await expect(page.locator("li.revision del").first).to_have_text("on Fridays")
    await page.screenshot(path=deployment.shots / "changes.png", full_page=True)

    await page.get_by_role("link", name="Revert these…").click()
    await expect(page.locator("#plan-summary")).to_have_text("3 to revert, 0 skipped.")
    await page.get_by_label("Reason").fill("vandalism, ticket 4312")
    await page.screenshot(path=deployment.shots / "revert.png", full_page=True)
    await page.get_by_role("button", name="Revert 3 memory(ies)").click()

    await expect(page.locator(".notice.done")).to_contain_text("Reverted 3 memory(ies)")
    await expect(page.locator("li.revision.restored")).to_have_count(3)
    for n, memory_id in enumerate(memories):
        assert await world.content(memory_id) == f"Movie night {n} is on Fridays."
    [record] = await deployment.events.wait_for(MemoriesReverted, operator=f"console:{OPERATOR}")
    assert (record.reason, record.reverted) == ("vandalism, ticket 4312", 3)


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


Answering = Callable[[DataRequestRequested], DataRequestCompleted]


class WorkerStandIn:
    """Answers the data requests published while it runs, in the worker's place, and keeps
    what it was asked: the worker's queue gives up the `data_request` binding meanwhile, so
    that the answer shown is this one's alone."""

    def __init__(self, deployment: Deployment, answer: Answering) -> None:
        self.deployment, self.answer = deployment, answer
        self.asked: list[tuple[DataRequestRequested, AbstractIncomingMessage]] = []

    async def __aenter__(self) -> WorkerStandIn:
        channel, topology = self.deployment.channel, self.deployment.topology
        self.queue = await channel.declare_queue(
            f"test-data-requests-{uuid.uuid4().hex[:8]}", exclusive=True, auto_delete=True
        )
        exchange = await channel.get_exchange(topology.tool_calls_exchange, ensure=False)
        await self.queue.bind(exchange, routing_key=DATA_REQUEST_ROUTING_KEY)
        self.work = await channel.declare_queue(topology.worker_queue, passive=True)
        await self.work.unbind(exchange, routing_key=DATA_REQUEST_ROUTING_KEY)
        self.tag = await self.queue.consume(self._on_request)
        return self

    async def _on_request(self, message: AbstractIncomingMessage) -> None:
        await message.ack()
        request = decode_event(message.body)
        assert isinstance(request, DataRequestRequested) and request.context is not None
        self.asked.append((request, message))
        answer = self.answer(request)
        await publish_raw(
            self.deployment.channel,
            self.deployment.topology.events_exchange,
            encode_event(answer),
            result_routing_key(request.context.shard_id),
            **amqp_properties(answer),
        )

    async def __aexit__(self, *_: object) -> None:
        await self.queue.cancel(self.tag)
        await self.queue.delete(if_unused=False, if_empty=False)
        exchange = await self.deployment.channel.get_exchange(
            self.deployment.topology.tool_calls_exchange, ensure=False
        )
        await self.work.bind(exchange, routing_key=DATA_REQUEST_ROUTING_KEY)


def _done(request: DataRequestRequested, **fields: object) -> DataRequestCompleted:
    return DataRequestCompleted.model_validate(
        {
            "request_id": request.request_id,
            "kind": request.kind,
            "subject": request.subject,
            "requested_by": request.requested_by,
            "status": "done",
            **fields,
        }
    )


def _seed_data_requests(settings: Settings, user_id: str) -> tuple[str, str]:
    """Two answered requests (the older one an erasure with its receipt) and a notice Discord
    refused to retract; returns the two request ids, oldest first."""
    older, newer = f"seeded-{uuid.uuid4()}", f"seeded-{uuid.uuid4()}"
    receipt = json.dumps(Receipt(memories_deleted=2, notices_to_retract=1).model_dump())
    with psycopg.connect(settings.database_url) as connection:
        connection.execute(
            "INSERT INTO data_requests (request_id, kind, subject_kind, subject_id,"
            " requested_by_kind, requested_by_id, received_at, completed_at, status, receipt)"
            " VALUES (%s, 'erase', 'user', %s, 'user', %s, now() - interval '1 hour',"
            " now() - interval '1 hour', 'done', %s::jsonb),"
            " (%s, 'export', 'user', %s, 'operator', 'cli:root', now(), now(), 'done', NULL)",
            (older, user_id, user_id, receipt, newer, user_id),
        )
        connection.execute(
            "INSERT INTO posted_notices (event_id, shard_id, channel_id, message_id, memory_id,"
            " scope, owner_disc_id, guild_id, retract_error)"
            " VALUES (%s, 0, '5005', '6006', 77, 'target_user', %s, NULL, 'forbidden')",
            (uuid.uuid4(), user_id),
        )
    return older, newer


async def test_the_data_requests_page_lists_the_requests_newest_first_with_receipts(
    page: Page, deployment: Deployment, settings: Settings
) -> None:
    older, newer = _seed_data_requests(settings, snowflake())
    await page.goto("/data-requests")
    rows = page.locator("tr.request")
    await expect(rows.first).to_be_visible()
    # Newest first, among the rows other tests' requests left in the same database.
    shown = await rows.evaluate_all("rows => rows.map(row => row.dataset.requestId)")
    assert shown.index(newer) < shown.index(older), shown
    older_row = page.locator(f'tr.request[data-request-id="{older}"]')
    await expect(older_row.locator(".receipt")).to_contain_text("memories_deleted 2")
    await expect(page.locator('tr.unretracted[data-message-id="6006"]')).to_contain_text(
        "forbidden"
    )
    await page.screenshot(path=deployment.shots / "data_requests.png", full_page=True)


async def test_an_export_shows_the_document_and_downloads_it_as_json(
    page: Page, deployment: Deployment
) -> None:
    user_id = snowflake()
    document = ExportDocument(
        user=ExportedUser(user_id=user_id, user_nickname="Ali", privacy_level=1)
    )
    async with WorkerStandIn(deployment, lambda asked: _done(asked, document=document)) as worker:
        await page.goto("/data-requests")
        await page.get_by_label("User id").fill(user_id)
        await page.get_by_role("button", name="Export", exact=True).click()
        await expect(page.locator("#export-document")).to_contain_text(f'"user_id": "{user_id}"')
        async with page.expect_download() as downloading:
            await page.get_by_role("button", name="Download JSON").click()
        downloaded = await downloading.value
        saved = await downloaded.path()
    assert json.loads(saved.read_text())["user"]["user_nickname"] == "Ali"
    assert downloaded.suggested_filename == f"export-{user_id}.json"
    [(request, message), _] = worker.asked
    assert (request.kind, request.subject.user_id) == ("export", user_id)
    assert request.requested_by.model_dump() == {"kind": "operator", "id": f"console:{OPERATOR}"}
    assert message.correlation_id == request.request_id


async def test_an_erasure_is_refused_until_the_subjects_id_is_typed_again(
    page: Page, deployment: Deployment
) -> None:
    user_id = snowflake()
    receipt = Receipt(memories_deleted=3, revisions_redacted=5)
    async with WorkerStandIn(deployment, lambda asked: _done(asked, receipt=receipt)) as worker:
        await page.goto("/data-requests")
        erase = page.locator("form.erase")
        await erase.get_by_label("Id", exact=True).fill(user_id)
        # Its last digit mistyped (never to the digit it was).
        mistyped = user_id[:-1] + ("1" if user_id.endswith("0") else "0")
        await erase.get_by_label("Type the id again").fill(mistyped)
        await erase.get_by_label("Reason").fill("the user asked by mail")
        await erase.get_by_role("button", name="Erase").click()
        await expect(page.locator(".notice.problem")).to_contain_text("Nothing was erased")
        assert worker.asked == []

        await erase.get_by_label("Type the id again").fill(user_id)
        await erase.get_by_role("button", name="Erase").click()
        await expect(page.locator(".notice.done")).to_contain_text(
            f"Erased user {user_id}: memories_deleted 3, revisions_redacted 5"
        )
    [(request, _)] = worker.asked
    assert (request.kind, request.subject.user_id, request.strict) == ("erase", user_id, False)
    assert request.requested_by.id == f"console:{OPERATOR}"


def _a_number(*, decimal: bool = False) -> re.Pattern[str]:
    return re.compile(r"^\d+(\.\d+)?$" if decimal else r"^\d+$")


async def test_replay_matching_sends_back_the_filtered_letters_with_a_reason(
    page: Page, deployment: Deployment, world: World
) -> None:
    persona = await _persona(world)
    # What earlier tests of the module left dead-lettered stays through this one.
    kept = await queue_depth(deployment.channel, deployment.topology.dead_letter_queue)
    timed_out = [
        tool_call(
            persona,
            {"memory_id": await world.server_memory(persona, f"t{n}"), "memory_content": f"t{n}!"},
            triggerer_id=snowflake(),
        )
        for n in range(2)
    ]
    invalid = tool_call(persona, {"memory_id": 1, "memory_content": "x"}, triggerer_id=snowflake())
    for call in timed_out:
        await worker_dead_letter(
            deployment.channel, deployment.topology, call, "TimeoutError: the database"
        )
    await worker_dead_letter(
        deployment.channel, deployment.topology, invalid, "invalid envelope: context: missing"
    )

    await page.goto("/dead-letters?group=1")
    # A group per reason and tool, beside those of what earlier tests left (invalid envelopes
    # among them): this reason's is this test's alone.
    groups = page.locator("tr.group")
    await expect(groups.filter(has_text="TimeoutError").locator("td.number")).to_have_text("2")
    await page.screenshot(path=deployment.shots / "dead-letters-grouped.png", full_page=True)
    await page.goto("/dead-letters")
    await page.get_by_label("Error contains").fill("TimeoutError")
    await page.get_by_role("button", name="Show").click()
    await expect(page.locator("tr.letter")).to_have_count(2)
    await page.get_by_label("Reason (recorded)").fill("the database is back")
    await page.get_by_label("Calls a second").fill("10")
    await page.screenshot(path=deployment.shots / "dead-letters-filtered.png", full_page=True)
    await page.get_by_role("button", name="Replay 2 matching").click()

    await expect(page.locator(".notice.done")).to_contain_text("Replayed 2 dead letter(s)")
    await _answered(deployment, *timed_out)
    [record] = await deployment.events.wait_for(
        DeadLettersReplayed, actor=f"console:{OPERATOR}", reason="the database is back"
    )
    assert (record.count, record.filter) == (2, {"error": "TimeoutError"})
    # The invalid one stays, and what earlier tests left.
    assert await queue_depth(deployment.channel, deployment.topology.dead_letter_queue) == kept + 1


# axe-core, vendored by `make axe-assets` (its version and hash in VERSIONS beside it).
AXE: Final = Path(__file__).parents[1] / "support" / "vendor" / "axe.min.js"
PHONE: Final[ViewportSize] = {"width": 390, "height": 844}
DESKTOP: Final[ViewportSize] = {"width": 1280, "height": 860}


async def _pages_to_check(page: Page, deployment: Deployment, world: World) -> list[str]:
    """Every page the navigation links to (whatever pages the console has), the login, and
    the pages behind them: a memory, a restore, the grouped dead letters (one at least)."""
    await page.goto("/")
    linked = await page.locator("header.top nav a").evaluate_all(
        "links => links.map(link => link.getAttribute('href'))"
    )
    persona = await _persona(world)
    memory_id = await world.server_memory(persona, "checked by axe")
    await world.execute(
        "INSERT INTO memory_revisions (scope, memory_id, action, content_before, content_after,"
        " server_id, persona_lineage_id, actor_disc_id, tool_call_id)"
        " VALUES ('server_wide', %s, 'updated', 'before', 'checked by axe', %s, %s, '42', 'c-axe')",
        memory_id,
        persona.server.server_id,
        persona.lineage,
    )
    [revision] = await world.revisions(memory_id)
    call = tool_call(persona, {"memory_id": 1, "memory_content": "x"}, triggerer_id=snowflake())
    await worker_dead_letter(deployment.channel, deployment.topology, call, "test: for axe")
    return [
        *linked,
        "/dead-letters?group=1",
        f"/memories?server={persona.server.disc_id}",
        f"/memories/{memory_id}",
        f"/memories/{memory_id}/restore/{revision['revision_id']}",
    ]


async def _violations(page: Page) -> list[str]:
    await page.add_script_tag(path=str(AXE))
    result = await page.evaluate("() => axe.run(document, { resultTypes: ['violations'] })")
    return [
        f"{violation['id']} ({violation['impact']}): "
        + "; ".join(", ".join(node["target"]) for node in violation["nodes"][:3])
        for violation in result["violations"]
    ]


async def _fits(page: Page) -> list[str]:
    """What does not fit the width: a page that scrolls sideways, a header control off it."""
    problems = []
    overflow = await page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    if overflow > 0:
        problems.append(f"scrolls sideways by {overflow} px")
    for control in await page.locator("header.top a, header.top button").all():
        box = await control.bounding_box()
        if box is not None and box["x"] + box["width"] > await page.evaluate("innerWidth"):
            problems.append(f"{await control.inner_text()!r} is off the screen")
    return problems


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "390px"])
async def test_every_page_passes_axe_and_fits_the_width(
    deployment: Deployment, world: World, viewport: ViewportSize
) -> None:
    async with chromium() as browser:
        # The console's Content-Security-Policy allows no injected script: axe's is the test's.
        context = await browser.new_context(
            base_url=deployment.console_url, viewport=viewport, bypass_csp=True
        )
        context.set_default_timeout(WAIT_MS)
        page = await context.new_page()
        await page.goto("/login")
        found = {"/login": [*await _violations(page), *await _fits(page)]}
        if viewport is PHONE:
            await page.screenshot(path=deployment.shots / "login-390px.png")
        await page.get_by_label("Your name").fill(OPERATOR)
        await page.get_by_label("Password").fill(PASSWORD)
        await page.get_by_role("button", name="Log in").click()
        await expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        for path in await _pages_to_check(page, deployment, world):
            await page.goto(path)
            if path == "/":
                # The charts are drawn by the first refresh.
                await expect(page.locator("#updated")).to_have_attribute("data-at", re.compile("."))
            found[path] = [*await _violations(page), *await _fits(page)]
            if viewport is PHONE and path in ("/", "/dead-letters"):
                name = "overview" if path == "/" else "dead-letters"
                await page.screenshot(path=deployment.shots / f"{name}-390px.png", full_page=True)
        icon = await page.request.get("/favicon.ico")
        await context.close()

    assert {path: problems for path, problems in found.items() if problems} == {}
    assert icon.status == 200
