"""The gateway's pure parts: embed conversion, console rendering, TTL caches, arguments."""

from __future__ import annotations

import io
import uuid
from typing import Any, cast

import hikari
import pytest

from contracts import (
    CREATE_COLOR,
    DELETE_COLOR,
    UPDATE_COLOR,
    CacheName,
    EmbedField,
    EmbedPayload,
    EmbedRequested,
    Participant,
)
from gateway import (
    ConsoleSender,
    Delivery,
    Gateway,
    GatewayCaches,
    MessageContext,
    Retraction,
    SeenEvents,
    TTLCache,
    decode_tool_arguments,
    discord_nonce,
    instance_name,
    is_transient_discord_fault,
    render_embed,
    timeout_answer,
    to_hikari_embed,
)
from infra.settings import Settings

PAYLOAD = EmbedPayload(
    title="Tomori updated a memory",
    description="```\nAlice likes tea\n```",
    color=UPDATE_COLOR,
    footer="Manage server memories with /memory server",
    fields=(
        EmbedField(name="Before", value="Alice likes coffee"),
        EmbedField(name="Scope", value="server", inline=True),
    ),
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_embed_conversion_keeps_every_part() -> None:
    embed = to_hikari_embed(PAYLOAD)
    assert embed.title == PAYLOAD.title
    assert embed.description == PAYLOAD.description
    assert embed.colour == hikari.Colour(0x25D4DA)
    assert embed.footer is not None
    assert embed.footer.text == PAYLOAD.footer
    assert [(f.name, f.value, f.is_inline) for f in embed.fields] == [
        ("Before", "Alice likes coffee", False),
        ("Scope", "server", True),
    ]


def test_embed_conversion_without_footer_or_fields() -> None:
    embed = to_hikari_embed(EmbedPayload(title="Deleted", description="gone", color=DELETE_COLOR))
    assert embed.footer is None
    assert embed.fields == []
    assert embed.colour == hikari.Colour(0xE74C3C)


def test_console_rendering_in_a_terminal_uses_the_embed_colour() -> None:
    text = render_embed(PAYLOAD, ansi=True)
    assert "\x1b[38;2;37;212;218m▌" in text  # 0x25D4DA
    for part in ("Tomori updated a memory", "Alice likes tea", "Before", "/memory server"):
        assert part in text


def test_console_rendering_elsewhere_is_plain() -> None:
    text = render_embed(PAYLOAD, ansi=False, heading="[embed]")
    assert "\x1b" not in text
    assert text.splitlines() == [
        "[embed]",
        "| Tomori updated a memory",
        "| ```",
        "| Alice likes tea",
        "| ```",
        "| Before",
        "|   Alice likes coffee",
        "| Scope",
        "|   server",
        "| Manage server memories with /memory server",
    ]


async def test_the_console_sender_writes_to_its_stream() -> None:
    stream = io.StringIO()
    request = EmbedRequested(
        tool_call_id="call_1",
        guild_id="1",
        channel_id="2",
        shard_id=0,
        kind="memory_updated",
        embed=PAYLOAD,
    )
    sent = await ConsoleSender(stream).send(request)
    assert sent.delivery is Delivery.SENT
    assert sent.message_id is not None and sent.message_id.isdigit()
    assert "Tomori updated a memory" in stream.getvalue()
    assert "channel 2" in stream.getvalue()
    assert "\x1b" not in stream.getvalue()  # a StringIO is no terminal


async def test_the_console_draws_a_created_memory_in_green() -> None:
    stream = io.StringIO()
    created = EmbedPayload(
        title="Tomori learned something new",
        description="```\nBob hosts movie night\n```",
        color=CREATE_COLOR,
        footer="ID:30 · Manage server memories with /memory server",
    )
    request = EmbedRequested(
        tool_call_id="call_1",
        guild_id="1",
        channel_id="2",
        shard_id=0,
        kind="memory_created",
        embed=created,
    )
    assert (await ConsoleSender(stream, ansi=True).send(request)).delivery is Delivery.SENT
    drawn = stream.getvalue()
    assert "[embed to channel 2 · memory_created]" in drawn
    assert "\x1b[38;2;46;204;113m▌" in drawn  # 0x2ECC71
    assert "Bob hosts movie night" in drawn


async def test_the_console_prints_a_retraction_and_counts_it_deleted() -> None:
    stream = io.StringIO()
    retraction = await ConsoleSender(stream).retract("2", "1234")
    assert retraction is Retraction.DELETED
    assert stream.getvalue() == "[retracted 2/1234]\n"


def test_ttl_cache_entries_expire() -> None:
    clock = Clock()
    cache: TTLCache[str, int] = TTLCache(600, clock=clock)
    cache.set("guild", 1)
    clock.now += 599.9
    assert cache.get("guild") == 1
    clock.now += 0.1
    assert cache.get("guild") is None
    assert len(cache) == 0


def test_ttl_cache_is_bounded_least_recently_used_first() -> None:
    cache: TTLCache[str, int] = TTLCache(60, max_size=2, clock=Clock())
    cache.set("a", 1)
    cache.set("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.set("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_ttl_cache_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        TTLCache(0)
    with pytest.raises(ValueError):
        TTLCache(1, max_size=0)


def test_invalidation_drops_the_named_cache_entry_only() -> None:
    caches: GatewayCaches[str, str] = GatewayCaches(TTLCache(600), TTLCache(1800))
    heard: list[tuple[CacheName, str]] = []
    caches.add_listener(lambda cache, key: heard.append((cache, key)))
    caches.persona_state.set("1", "persona")
    caches.user.set("1", "user")
    assert caches.invalidate("persona_state", "1") is True
    assert caches.persona_state.get("1") is None
    assert caches.user.get("1") == "user"
    assert caches.invalidate("user", "1") is True
    assert caches.invalidate("user", "1") is False
    assert heard == [("persona_state", "1"), ("user", "1"), ("user", "1")]


def test_seen_events_forget_the_oldest() -> None:
    seen = SeenEvents(capacity=2)
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for event_id in (first, second, third):
        seen.add(event_id)
    assert first not in seen
    assert second in seen
    assert third in seen


def test_the_nonce_names_the_event() -> None:
    event_id = uuid.uuid4()
    assert discord_nonce(event_id) == discord_nonce(event_id)
    assert len(discord_nonce(event_id)) == 25
    assert discord_nonce(event_id) != discord_nonce(uuid.uuid4())


def test_instance_names_differ() -> None:
    assert instance_name() != instance_name()


def test_failures_are_classified() -> None:
    assert not is_transient_discord_fault(
        hikari.ForbiddenError("http://x", {}, b"", "Missing Access", 50001)
    )
    assert not is_transient_discord_fault(
        hikari.NotFoundError("http://x", {}, b"", "Unknown Channel", 10003)
    )
    assert not is_transient_discord_fault(hikari.BadRequestError("http://x", {}, b"", "Bad", 50035))
    assert is_transient_discord_fault(hikari.InternalServerError("http://x", 500, {}, b""))
    assert is_transient_discord_fault(hikari.HTTPError("connection reset"))
    assert is_transient_discord_fault(TimeoutError())
    assert not is_transient_discord_fault(ValueError())


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ({"action": "update"}, {"action": "update"}),
        ('{"action": "update"}', {"action": "update"}),
        ("  ", {}),
        (None, {}),
        ("not json", "not json"),
        ("[1, 2]", [1, 2]),
    ],
)
def test_arguments_are_parsed_as_the_llm_gave_them(raw: object, parsed: object) -> None:
    assert decode_tool_arguments(raw) == parsed  # type: ignore[arg-type]


def test_the_message_context_becomes_the_contract_context() -> None:
    context = MessageContext(
        guild_id=hikari.Snowflake(123),
        channel_id=456,
        triggerer_id="789",
        bot_user_id=hikari.Snowflake(1),
        persona_id=3,
        shard_id=2,
        participants=[Participant(user_id="789", display_label="Alice (@alice)")],
    ).to_contract()
    assert (context.guild_id, context.channel_id, context.triggerer_id) == ("123", "456", "789")
    assert context.bot_user_id == "1"
    assert context.participants[0].display_label == "Alice (@alice)"
    assert context.triggerer_is_manager is False
    dm = MessageContext(None, 1, 2, 3, persona_id=1, shard_id=0).to_contract()
    assert dm.guild_id is None
    assert dm.is_dm
    manager = MessageContext(1, 2, 3, 4, persona_id=1, shard_id=0, triggerer_is_manager=True)
    assert manager.to_contract().triggerer_is_manager is True


def test_the_timeout_answer_says_what_the_llm_should_do() -> None:
    answer = timeout_answer(30)
    assert answer["success"] is False
    assert "30 seconds" in answer["message"]
    assert "do not repeat" in answer["message"]


class _Subscriptions:
    """A bot that only records what is subscribed to it."""

    def __init__(self) -> None:
        self.events: list[type[Any]] = []

    def subscribe(self, event_type: type[Any], callback: Any) -> None:
        self.events.append(event_type)


@pytest.mark.parametrize("forget", [False, True])
async def test_a_bots_gateway_listens_for_its_removal_only_when_told_to(forget: bool) -> None:
    settings = Settings(forget_server_on_removal=forget)
    gateway = Gateway(settings, sender=ConsoleSender(io.StringIO()))
    bot = _Subscriptions()
    gateway.attach(cast(hikari.GatewayBot, bot))
    assert (hikari.GuildLeaveEvent in bot.events) is forget
    assert hikari.GuildUnavailableEvent not in bot.events  # an outage is no removal
    await gateway.memories.close()
    await gateway.notices.close()


def test_the_removal_trigger_is_off_by_default() -> None:
    assert Settings.model_fields["forget_server_on_removal"].default is False
