"""The example bot (examples/bot) end to end: hikari's own objects, deserialized from Discord's
JSON, dispatched to a `GatewayBot` that talks to the fake Discord; its gateway on the real
broker, a real worker and database; the LLM a scripted OpenAI-compatible endpoint."""

from __future__ import annotations

import base64
import json
import os
import signal
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import hikari
import pytest
from hikari.impl import GatewayShardImpl, RESTClientImpl

from contracts import CREATE_LONG_TERM_MEMORY, UPDATE_LONG_TERM_MEMORY, openai_tools
from examples.bot.discord_bot import FORGET_ME, MemoryBot
from examples.bot.llm import ChatCompletions
from examples.bot.memory import Persona
from gateway import Gateway, MessageContext, timeout_answer
from harness.fake_discord import FakeDiscord, RecordedRequest
from harness.gateway import unconnected_shard
from harness.processes import LtmProcess
from harness.snowflake import snowflake
from harness.waiting import eventually
from harness.world import Persona as PersonaRow
from harness.world import World, participant
from infra.settings import Settings
from tests.support.scripted_llm import ScriptedLlm, running_llm, says, tool_answers
from tests.support.scripted_llm import tool_calls as calls

SHARD = 9_100  # a shard of this module's own: no other test consumes it
API_KEY = "test-llm-key"


@dataclass(frozen=True)
class Demo:
    """The module's server: its persona, and two members."""

    persona: PersonaRow
    bob: str
    alice: str

    @property
    def guild(self) -> str:
        return self.persona.server.disc_id


@dataclass
class Running:
    bot: hikari.GatewayBot
    gateway: Gateway
    shard: GatewayShardImpl
    errors: list[BaseException]  # what the listeners raised (hikari logs and swallows it)


@pytest.fixture(scope="module")
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        yield fake


@pytest.fixture(scope="module")
async def llm() -> AsyncIterator[ScriptedLlm]:
    async with running_llm() as scripted:
        yield scripted


@pytest.fixture(scope="module")
async def demo(world: World) -> Demo:
    server = await world.server()
    persona = await world.persona(server, nickname="Tomori")
    bob, alice = snowflake(), snowflake()
    await world.member(server, bob, "bob", display_name="Bob")
    await world.member(server, alice, "alice", display_name="Alice")
    return Demo(persona, bob, alice)


@pytest.fixture(scope="module")
async def running(
    settings: Settings,
    fake_discord: FakeDiscord,
    llm: ScriptedLlm,
    demo: Demo,
    worker_process: LtmProcess,
) -> AsyncIterator[Running]:
    """The example bot started as hikari starts it: `StartingEvent` (its gateway connects),
    then `StartedEvent` (the bot learns who it is and registers `/memory`)."""
    bot_id = base64.b64encode(fake_discord.bot_user["id"].encode()).decode().rstrip("=")
    bot = hikari.GatewayBot(
        f"{bot_id}.fake.token", banner=None, logs=None, rest_url=fake_discord.url, max_retries=0
    )
    errors: list[BaseException] = []

    async def on_error(event: hikari.ExceptionEvent[Any]) -> None:
        errors.append(event.exception)

    bot.subscribe(hikari.ExceptionEvent, on_error)
    gateway = Gateway.for_bot(bot, settings, shards=(SHARD,), shard_count=SHARD + 1)
    persona = Persona("", gateway, ChatCompletions(llm.base_url, "scripted-model", API_KEY))
    MemoryBot(bot, persona, demo.persona.persona_id).attach()
    shard = unconnected_shard(bot, SHARD, SHARD + 1)
    assert isinstance(bot.rest, RESTClientImpl)
    bot.rest.start()  # what `bot.start()` does before it connects its shards
    try:
        await bot.dispatch(bot.event_factory.deserialize_starting_event(), return_tasks=True)
        await bot.dispatch(bot.event_factory.deserialize_started_event(), return_tasks=True)
        yield Running(bot, gateway, shard, errors)
    finally:
        await bot.dispatch(bot.event_factory.deserialize_stopping_event(), return_tasks=True)
        await bot.rest.close()


@pytest.fixture(autouse=True)
def no_listener_fails(running: Running, llm: ScriptedLlm) -> Iterator[None]:
    """Each test ends with no listener failed and its script spent (and leaves neither)."""
    yield
    errors, running.errors[:] = list(running.errors), []
    unanswered = llm.drop_script()
    assert not errors, "".join(
        line for error in errors for line in traceback.format_exception(error)
    )
    assert unanswered == 0, "the LLM was asked fewer times than scripted"


def _user(user_id: str, username: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": username,
        "global_name": username.capitalize(),
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
    }


def _message(channel: str, author: dict[str, Any], content: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": snowflake(),
        "channel_id": channel,
        "author": author,
        "content": content,
        "timestamp": datetime.now(UTC).isoformat(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        "flags": 0,
        **fields,
    }


def _member(**fields: Any) -> dict[str, Any]:
    joined = datetime.now(UTC).isoformat()
    return {"roles": [], "joined_at": joined, "deaf": False, "mute": False, "flags": 0, **fields}


async def say(
    running: Running,
    author: tuple[str, str],
    content: str,
    *,
    guild: str | None,
    channel: str,
    mentions: tuple[dict[str, Any], ...] = (),
    by_a_bot: bool = False,
) -> str:
    """A message as Discord's gateway sends it, dispatched to the bot until its listeners are
    done; its id."""
    payload = _message(channel, _user(*author, bot=by_a_bot), content, mentions=list(mentions))
    if guild is not None:
        payload |= {"guild_id": guild, "member": _member(nick=None)}
    event = running.bot.event_factory.deserialize_message_create_event(running.shard, payload)
    await running.bot.dispatch(event, return_tasks=True)
    return str(payload["id"])


async def ask(running: Running, fake: FakeDiscord, demo: Demo, text: str, channel: str) -> None:
    """Bob writes `text` after a mention of the bot, in the module's server."""
    mention = f"<@{fake.bot_user['id']}> {text}"
    bob = (demo.bob, "bob")
    await say(running, bob, mention, guild=demo.guild, channel=channel, mentions=(fake.bot_user,))


def _interaction(
    fake: FakeDiscord, user: tuple[str, str], guild: str, channel: str, **fields: Any
) -> dict[str, Any]:
    return {
        "id": snowflake(),
        "application_id": fake.application["id"],
        "token": f"token-{snowflake()}",
        "version": 1,
        "guild_id": guild,
        "channel": {"id": channel, "type": 0, "name": "general", "permissions": "0"},
        "channel_id": channel,
        "member": _member(user=_user(*user), nick=None, permissions="0"),
        "locale": "en-US",
        "guild_locale": "en-US",
        "app_permissions": "0",
        "entitlements": [],
        "authorizing_integration_owners": {"0": guild},
        "context": 0,
        "attachment_size_limit": 10_485_760,
        **fields,
    }


async def command(
    running: Running, fake: FakeDiscord, user: tuple[str, str], subcommand: str, guild: str
) -> str:
    """`/memory <subcommand>` used by `user`, until the bot's listeners are done; its token."""
    payload = _interaction(
        fake,
        user,
        guild,
        snowflake(),
        type=2,
        data={
            "id": fake.commands["memory"]["id"],
            "name": "memory",
            "type": 1,
            "options": [{"name": subcommand, "type": 1}],
        },
    )
    event = running.bot.event_factory.deserialize_interaction_create_event(running.shard, payload)
    await running.bot.dispatch(event, return_tasks=True)
    return str(payload["token"])


async def press(
    running: Running, fake: FakeDiscord, user: tuple[str, str], custom_id: str, guild: str
) -> str:
    """A button pressed by `user`, until the bot's listeners are done; the interaction's token."""
    channel = snowflake()
    message = _message(channel, fake.bot_user, "Sure?", flags=64)  # the button's, ephemeral
    payload = _interaction(
        fake,
        user,
        guild,
        channel,
        type=3,
        data={"custom_id": custom_id, "component_type": 2},
        message=message,
    )
    event = running.bot.event_factory.deserialize_interaction_create_event(running.shard, payload)
    await running.bot.dispatch(event, return_tasks=True)
    return str(payload["token"])


def _replies(fake: FakeDiscord, channel: str) -> list[str]:
    """The bot's text replies in the channel (notices are embeds)."""
    return [m["content"] for m in fake.messages_in(channel) if m["content"]]


async def _notice_posted(fake: FakeDiscord, channel: str) -> dict[str, Any]:
    async def posted() -> dict[str, Any] | None:
        embeds = [embed for m in fake.messages_in(channel) for embed in m["embeds"]]
        return embeds[0] if embeds else None

    return await eventually(posted, what=f"a notice in {channel}")


def create(text: str) -> dict[str, Any]:
    """The LLM's call to save `text` as a server memory."""
    return calls((CREATE_LONG_TERM_MEMORY, {"memory_content": text, "memory_scope": "server_wide"}))


def update(memory_id: int, text: str) -> dict[str, Any]:
    """The LLM's call to change the memory to `text`."""
    return calls((UPDATE_LONG_TERM_MEMORY, {"memory_id": memory_id, "memory_content": text}))


async def server_memory(world: World, running: Running, demo: Demo, content: str) -> int:
    """A server memory written behind the worker's back: the gateway's cache of the server is
    dropped, as the worker's invalidation would after a change of its own."""
    memory_id = await world.server_memory(demo.persona, content)
    running.gateway.caches.invalidate("persona_state", demo.guild)
    return memory_id


# -- the wiring ---------------------------------------------------------------------------------


async def test_the_bot_registers_memory_with_its_three_subcommands(
    running: Running, fake_discord: FakeDiscord
) -> None:
    command = fake_discord.commands["memory"]
    assert [option["name"] for option in command["options"]] == ["list", "export", "forget-me"]
    assert all(option["type"] == 1 for option in command["options"])  # subcommands
    [registered] = [r for r in fake_discord.requests if r.path.endswith("/commands")]
    assert registered.path == f"/api/v10/applications/{fake_discord.application['id']}/commands"
    assert registered.headers["Authorization"].startswith("Bot ")


async def test_messages_without_a_mention_and_those_of_bots_are_left_alone(
    running: Running, fake_discord: FakeDiscord, llm: ScriptedLlm, demo: Demo
) -> None:
    asked, channel = len(llm.requests), snowflake()
    await say(running, (demo.bob, "bob"), "nice weather", guild=demo.guild, channel=channel)
    await say(
        running,
        (snowflake(), "otherbot"),
        f"<@{fake_discord.bot_user['id']}> hello",
        guild=demo.guild,
        channel=channel,
        mentions=(fake_discord.bot_user,),
        by_a_bot=True,
    )
    assert len(llm.requests) == asked
    assert fake_discord.posts(channel) == []


async def test_a_dm_is_answered_without_a_mention(
    running: Running, fake_discord: FakeDiscord, llm: ScriptedLlm, demo: Demo
) -> None:
    llm.script(says("Hello, Bob."))
    first, channel = len(llm.requests), snowflake()

    await say(running, (demo.bob, "bob"), "hi there", guild=None, channel=channel)

    # A DM is a server of its own, keyed by Bob: the persona has no memories there.
    assert "Server memories:\n(none)" in llm.system_prompt(first)
    assert _replies(fake_discord, channel) == ["Hello, Bob."]
    [reply] = fake_discord.posts(channel)
    assert reply.json["message_reference"]["message_id"]  # an answer to his message


# -- the loop -----------------------------------------------------------------------------------


async def test_a_fact_taught_in_one_message_is_in_the_context_of_the_next(
    running: Running, fake_discord: FakeDiscord, llm: ScriptedLlm, demo: Demo, world: World
) -> None:
    fact = "{user} keeps bees on the roof."
    llm.script(
        create(fact),
        says("Noted: you keep bees."),
        says("You keep bees on the roof."),
    )
    channel = snowflake()
    first = len(llm.requests)
    await ask(running, fake_discord, demo, "remember that I keep bees on the roof", channel)
    teaching, answered = llm.requests[first], llm.requests[first + 1]
    assert teaching["tools"] == openai_tools()
    assert teaching["model"] == "scripted-model"
    assert llm.authorizations[first] == f"Bearer {API_KEY}"
    assert "keeps bees" not in llm.system_prompt(first)
    assert "Bob: Tomori remember that I keep bees on the roof" in json.dumps(teaching)
    [saved] = tool_answers(answered)
    assert saved["status"] == "memory_saved_successfully", saved
    memory_id = saved["memory_id"]
    assert _replies(fake_discord, channel) == ["Noted: you keep bees."]
    notice = await _notice_posted(fake_discord, channel)
    assert "Bob keeps bees on the roof." in notice["description"]

    await ask(running, fake_discord, demo, "what do I keep?", channel)
    assert f"ID:{memory_id} {fact}" in llm.system_prompt(first + 2)
    assert _replies(fake_discord, channel)[-1] == "You keep bees on the roof."
    assert await world.content(memory_id) == fact


async def test_a_change_made_since_the_memory_was_shown_is_refused_and_retried(
    running: Running, fake_discord: FakeDiscord, llm: ScriptedLlm, demo: Demo, world: World
) -> None:
    memory_id = await server_memory(world, running, demo, "The garden party is in June.")
    other_channel = snowflake()

    async def changed_meanwhile(_: dict[str, Any]) -> dict[str, Any]:
        # Another conversation changes the memory after this one was shown it.
        elsewhere = MessageContext(
            demo.guild, other_channel, demo.alice, fake_discord.bot_user["id"],
            demo.persona.persona_id, SHARD, (participant(demo.alice, "Alice"),),
        )  # fmt: skip
        answer = await running.gateway.tool_client.call(
            f"elsewhere-{snowflake()}",
            UPDATE_LONG_TERM_MEMORY,
            {"memory_id": memory_id, "memory_content": "The garden party is in July."},
            elsewhere,
        )
        assert answer["status"] == "memory_updated_successfully", answer
        return update(memory_id, "The garden party is in June, with cake.")

    # Told what the memory says now, the LLM decides again from that text.
    llm.script(
        changed_meanwhile,
        update(memory_id, "The garden party is in July, with cake."),
        says("Yum."),
    )
    first, channel = len(llm.requests), snowflake()
    await ask(running, fake_discord, demo, "the garden party has cake", channel)

    assert f"ID:{memory_id} The garden party is in June." in llm.system_prompt(first)
    [refused] = tool_answers(llm.requests[first + 1])
    assert refused["status"] == "memory_update_failed_conflict", refused
    assert refused["current_content"] == "The garden party is in July."
    [_, retried] = tool_answers(llm.requests[first + 2])
    assert retried["status"] == "memory_updated_successfully", retried
    assert await world.content(memory_id) == "The garden party is in July, with cake."
    assert _replies(fake_discord, channel) == ["Yum."]


@contextmanager
def stopped(worker: LtmProcess) -> Iterator[None]:
    """The worker frozen (SIGSTOP) for the block: calls reach its queue, nothing answers."""
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(worker.pid, signal.SIGCONT)


async def test_a_call_the_worker_does_not_answer_in_time_gives_the_llm_the_timeout_answer(
    running: Running,
    fake_discord: FakeDiscord,
    llm: ScriptedLlm,
    demo: Demo,
    world: World,
    worker_process: LtmProcess,
) -> None:
    fact = f"{{user}} drinks tea at {snowflake()[-4:]}."
    llm.script(
        create(fact),
        says("I will try to remember that."),
    )
    first, channel = len(llm.requests), snowflake()
    tool_client = running.gateway.tool_client
    tool_client.timeout_s = 1.0
    try:
        with stopped(worker_process):
            await ask(running, fake_discord, demo, "I drink tea", channel)
    finally:
        tool_client.timeout_s = 30.0

    assert tool_answers(llm.requests[first + 1]) == [timeout_answer(1.0)]
    assert _replies(fake_discord, channel) == ["I will try to remember that."]

    # As the answer said: the outcome was unknown, and the memory may still appear shortly.
    async def saved() -> bool:
        rows = await world.execute("SELECT 1 FROM server_memories WHERE content = %s", fact)
        return bool(rows)

    await eventually(saved, what="the call applied once the worker runs again")


# -- the slash commands -------------------------------------------------------------------------


def _responses(fake: FakeDiscord, token: str) -> list[RecordedRequest]:
    return fake.responses.get(token, [])


async def test_memory_list_shows_the_server_memories_and_the_users_own(
    running: Running, fake_discord: FakeDiscord, demo: Demo, world: World
) -> None:
    user_id, carol = await world.user()
    quiz = await server_memory(world, running, demo, "The quiz is on Mondays.")
    personal = await world.personal_memory(user_id, demo.persona.lineage, "{user} plays cello.")

    token = await command(running, fake_discord, (carol, "carol"), "list", demo.guild)

    [response] = _responses(fake_discord, token)
    assert response.json["type"] == 4  # a message, at once
    assert response.json["data"]["flags"] == 64  # only she sees it
    content = response.json["data"]["content"]
    server_part, own_part = content.split("About you:")
    assert f"ID:{quiz} The quiz is on Mondays." in server_part
    assert own_part.strip() == f"ID:{personal} {{user}} plays cello."


async def test_memory_export_sends_the_users_document_as_a_json_file_in_a_dm(
    running: Running, fake_discord: FakeDiscord, demo: Demo, world: World
) -> None:
    user_id, carol = await world.user(nickname="Caro")
    personal = await world.personal_memory(user_id, demo.persona.lineage, "{user} rows boats.")

    token = await command(running, fake_discord, (carol, "carol"), "export", demo.guild)

    deferred, edited = _responses(fake_discord, token)
    # "Thinking…", shown to her alone, while the worker reads every store.
    assert (deferred.json["type"], deferred.json["data"]["flags"]) == (5, 64)
    assert edited.method == "PATCH"
    assert edited.json["content"] == "I sent you a DM with all I remember of you."
    dm = fake_discord.dm_channel_of(carol)
    assert dm is not None
    [sent] = fake_discord.posts(dm)
    document = json.loads(sent.files["my-memories.json"])
    assert document["user"]["user_id"] == carol
    assert document["user"]["user_nickname"] == "Caro"
    [memory] = document["personal_memories"]
    assert (memory["memory_id"], memory["content"]) == (personal, "{user} rows boats.")


async def test_memory_forget_me_erases_the_user_once_they_confirm(
    running: Running, fake_discord: FakeDiscord, demo: Demo, world: World
) -> None:
    user_id, carol = await world.user()
    personal = await world.personal_memory(user_id, demo.persona.lineage, "{user} hikes.")
    _, dave = await world.user()

    token = await command(running, fake_discord, (carol, "carol"), "forget-me", demo.guild)

    [asked] = _responses(fake_discord, token)
    assert asked.json["type"] == 4 and asked.json["data"]["flags"] == 64
    [row] = asked.json["data"]["components"]
    [button] = row["components"]
    assert button["custom_id"] == f"{FORGET_ME}:{carol}"
    assert await world.content(personal) == "{user} hikes."  # nothing yet: not confirmed

    # Someone else's press of her button erases nobody.
    not_theirs = await press(running, fake_discord, (dave, "dave"), button["custom_id"], demo.guild)
    [refused] = _responses(fake_discord, not_theirs)
    assert refused.json["data"]["content"] == "Not your button."
    assert await world.content(personal) == "{user} hikes."

    confirmed = await press(
        running, fake_discord, (carol, "carol"), button["custom_id"], demo.guild
    )
    deferred, edited = _responses(fake_discord, confirmed)
    assert deferred.json["type"] == 6  # the button's message is updated later
    assert edited.json["content"] == "Forgotten. Memories erased: 1."
    assert edited.json["components"] == []  # the button is gone
    assert await world.content(personal) is None
