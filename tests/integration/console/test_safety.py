"""Who may use the console: a login with the password, a session in a strict cookie, a CSRF
token on every change, failed logins rate-limited. A refused request changes nothing."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from console.app import create_app
from harness.broker import queue_depth
from harness.processes import free_port
from harness.world import World
from tests.integration.console.conftest import PASSWORD, Scene, console_settings
from tests.integration.operators.seeding import tool_call, worker_dead_letter


async def test_pages_without_a_session_lead_to_the_login_and_scripts_get_401(scene: Scene) -> None:
    page = await scene.client.get("/memories?server=1", allow_redirects=False)
    data = await scene.client.get("/overview.json")
    login = await scene.client.get("/login")

    assert page.status == 303
    target = URL(page.headers["Location"])
    assert (target.path, target.query["next"]) == ("/login", "/memories?server=1")
    assert data.status == 401
    assert login.status == 200
    assert "frame-ancestors 'none'" in login.headers["Content-Security-Policy"]


async def test_a_change_without_a_session_is_refused_and_nothing_is_removed(
    scene: Scene,
) -> None:
    await worker_dead_letter(scene.channel, scene.topology, tool_call("c-1"), "test: poisoned")

    purge = await scene.client.post(
        "/dead-letters/purge", data={"queue_name": scene.topology.dead_letter_queue}
    )
    replay = await scene.client.post("/dead-letters/replay-all")

    assert (purge.status, replay.status) == (401, 401)
    assert await queue_depth(scene.channel, scene.topology.dead_letter_queue) == 1
    assert await queue_depth(scene.channel, scene.topology.worker_queue) == 0


async def test_a_change_without_the_csrf_token_is_refused_and_changes_nothing(
    scene: Scene, world: World
) -> None:
    await worker_dead_letter(scene.channel, scene.topology, tool_call("c-2"), "test: poisoned")
    server = await world.server()
    persona = await world.persona(server)
    memory_id = await world.server_memory(persona, "before")
    await world.execute(
        "INSERT INTO memory_revisions (scope, memory_id, action, content_before, content_after,"
        " server_id, persona_lineage_id, actor_disc_id, tool_call_id)"
        " VALUES ('server_wide', %s, 'updated', 'before', 'after', %s, %s, '42', 'c-x')",
        memory_id,
        server.server_id,
        persona.lineage,
    )
    await world.execute(
        "UPDATE server_memories SET content = 'after' WHERE server_memory_id = %s", memory_id
    )
    [revision] = await world.revisions(memory_id)
    assert await scene.log_in() == 303

    purge = await scene.client.post(
        "/dead-letters/purge", data={"queue_name": scene.topology.dead_letter_queue}
    )
    wrong = await scene.client.post(
        "/dead-letters/replay-all", data={"csrf_token": "not the token"}
    )
    restore = await scene.client.post(
        f"/memories/{memory_id}/restore/{revision['revision_id']}", data={}
    )

    assert (purge.status, wrong.status, restore.status) == (403, 403, 403)
    assert "nothing was done" in await purge.text()
    assert await queue_depth(scene.channel, scene.topology.dead_letter_queue) == 1
    assert await queue_depth(scene.channel, scene.topology.worker_queue) == 0
    assert await world.content(memory_id) == "after"
    assert len(await world.revisions(memory_id)) == 1


async def test_the_session_cookie_is_http_only_and_strict_and_secure_behind_tls(
    scene: Scene,
) -> None:
    response = await scene.client.post(
        "/login", data={"name": "ann", "password": PASSWORD}, allow_redirects=False
    )
    cookie = response.cookies["ltm_console"]

    assert response.status == 303
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Strict"
    assert not cookie["secure"]

    behind_tls = console_settings(scene.settings, console_behind_tls=True)
    async with TestClient(TestServer(create_app(behind_tls))) as client:
        tls = await client.post(
            "/login", data={"name": "ann", "password": PASSWORD}, allow_redirects=False
        )
    assert tls.cookies["ltm_console"]["secure"] is True


async def test_a_wrong_password_or_a_missing_name_is_refused(scene: Scene) -> None:
    assert await scene.log_in(password="not it at all") == 401
    assert await scene.log_in(name="") == 400
    assert await scene.log_in(name="<b>ann</b>") == 400
    assert (await scene.client.get("/overview.json")).status == 401


async def test_failed_logins_are_rate_limited_even_for_the_right_password(scene: Scene) -> None:
    for _ in range(3):
        assert await scene.log_in(password="guessing again") == 401

    response = await scene.client.post(
        "/login", data={"name": "ann", "password": PASSWORD}, allow_redirects=False
    )

    assert response.status == 429
    assert 0 < int(response.headers["Retry-After"]) <= 60
    assert (await scene.client.get("/overview.json")).status == 401


async def test_after_the_login_it_goes_back_to_the_page_asked_for_but_never_elsewhere(
    scene: Scene,
) -> None:
    inside = await scene.client.post(
        "/login",
        data={"name": "ann", "password": PASSWORD, "next": "/audit?server=1"},
        allow_redirects=False,
    )
    outside = await scene.client.post(
        "/login",
        data={"name": "ann", "password": PASSWORD, "next": "//evil.example/x"},
        allow_redirects=False,
    )

    assert inside.headers["Location"] == "/audit?server=1"
    assert outside.headers["Location"] == "/"


async def test_logging_out_ends_the_session(scene: Scene) -> None:
    assert await scene.log_in() == 303
    token = await scene.csrf_token()

    out = await scene.client.post("/logout", data={"csrf_token": token}, allow_redirects=False)

    assert out.status == 303
    assert (await scene.client.get("/overview.json")).status == 401


async def test_a_broker_that_does_not_answer_gets_a_page_that_says_so(scene: Scene) -> None:
    nowhere = scene.settings.model_copy(
        update={"amqp_url": f"amqp://guest:guest@127.0.0.1:{free_port()}/"}
    )
    async with TestClient(TestServer(create_app(nowhere))) as client:
        await client.post("/login", data={"name": "ann", "password": PASSWORD})
        page = await client.get("/dead-letters")
        text = await page.text()
        overview = await (await client.get("/overview.json")).json()

    assert page.status == 503
    assert "The broker did not answer" in text
    assert "broker" in overview["problems"]
    assert overview["tiles"]["answered_last_hour"] >= 0  # the database's part still comes
