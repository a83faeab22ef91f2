"""The gateway: a process of its own (`gateway.process.run_gateway`) or a part of a hikari
`GatewayBot`.

`Gateway` owns one robust AMQP connection and, on it: the shard consumer of the shards it
owns, this process's cache-invalidation consumer, and the `ToolClient` the bot's LLM loop
uses. Embeds go through an `EmbedSender`: hikari's REST client with a bot token, or the
terminal without one (console mode).

Two ways to run it:
- `run_gateway(settings, shards, shard_count)`: REST only (`hikari.RESTApp`), until SIGTERM or
  SIGINT; then it stops consuming, lets in-flight deliveries finish, closes, returns 0. It
  serves `/metrics`, `/healthz` and `/readyz` on `LTM_GATEWAY_METRICS_PORT`.
- Inside a bot: `gateway = Gateway.for_bot(bot, settings)` (or `Gateway(settings,
  sender=DiscordSender(bot.rest))` and `gateway.attach(bot)`) starts it when the bot starts
  (its shards are the bot's), and stops it when the bot stops, before the bot's REST client
  closes; `gateway.tool_client` and `gateway.caches` are then the bot's.

Either way `gateway.memories` (a `MemoryReader`) reads what a persona sees of its memories,
for the LLM's context, kept in `gateway.caches` while the gateway consumes invalidations;
`gateway.data_rights` (a `DataRights`) asks for a user's export or erasure, for the bot's
`/memory export` and `/memory forget-me`. Every notice posted is recorded in
`posted_notices`, so that an erasure can take it back. With `LTM_FORGET_SERVER_ON_REMOVAL`, a
bot's gateway removed from a guild asks for the erasure of that server.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

import aio_pika
import hikari
from aio_pika.abc import AbstractChannel, AbstractRobustConnection

from gateway.caches import CacheInvalidationConsumer, GatewayCaches, instance_name
from gateway.data_rights import DataRights
from gateway.delivery import EmbedSender
from gateway.discord_sender import DiscordSender, RetryPolicy
from gateway.memories import MemoryReader
from gateway.metrics import GatewayMetrics
from gateway.notices import PostedNotices
from gateway.shard_consumer import ShardConsumer
from gateway.tool_client import ToolClient, ToolClientUnavailable
from infra.messaging import amqp
from infra.messaging.confirms import ConfirmingChannel
from infra.messaging.topology import declare_shard_queue, ensure_topology
from infra.observability.logs import error_summary, get_logger
from infra.observability.tracing import configure_tracing
from infra.settings import Settings, broker_user

__all__ = ["Gateway"]

log = get_logger(__name__)


class Gateway:
    """Consumes results, embeds and invalidations for its shards; offers the tool client."""

    def __init__(
        self,
        settings: Settings,
        *,
        sender: EmbedSender,
        shards: Iterable[int] | None = None,
        shard_count: int | None = None,
        caches: GatewayCaches[Any, Any] | None = None,
        instance: str | None = None,
        prefetch: int = 32,
        tool_timeout_s: float = 30.0,
        connection: AbstractRobustConnection | None = None,
        reconnect_interval_s: float | None = None,
        memories: MemoryReader | None = None,
        notices: PostedNotices | None = None,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        """`shards`: those this process owns; None to decide at `start` (or from the bot).

        `metrics`: where to count results, embeds and invalidations (the sender's too, when
        it is given them); a registry of its own by default.

        `connection`: an AMQP connection to share; without one the gateway opens and closes
        its own (`infra.messaging.amqp.connect_robust(settings)`), which comes back after a
        broker restart or a dropped connection every `reconnect_interval_s` (aio-pika's 5 s by
        default), declaring its queues and consumers again.

        `memories`: a reader over `caches`; without one the gateway reads through a small
        database pool of its own (`LTM_DATABASE_URL`), closed at `stop`; `notices`, where the
        posted notices are recorded, likewise.
        """
        self.settings = settings
        self.topology = settings.topology
        self.sender = sender
        self.shard_count = shard_count
        self.shards: tuple[int, ...] = () if shards is None else tuple(sorted(set(shards)))
        self._check_shards(self.shards)
        self.caches: GatewayCaches[Any, Any] = caches or GatewayCaches.from_settings(settings)
        self.memories = memories or MemoryReader.from_settings(
            settings, self.caches, listening=lambda: self.receives_invalidations
        )
        self.notices = notices or PostedNotices.from_settings(settings)
        self.instance = instance or instance_name()
        self.prefetch = prefetch
        self.tool_timeout_s = tool_timeout_s
        self._connection = connection
        self._owns_connection = connection is None
        self.reconnect_interval_s = reconnect_interval_s
        self.metrics = metrics or GatewayMetrics()
        self._tool_client: ToolClient | None = None
        self._data_rights: DataRights | None = None
        self._shard_consumer: ShardConsumer | None = None
        self._cache_consumer: CacheInvalidationConsumer | None = None
        self._channels: list[AbstractChannel] = []
        self._publishing: ConfirmingChannel | None = None
        self._started = False
        self._connected = False

    def _check_shards(self, shards: Iterable[int]) -> None:
        for shard_id in shards:
            if shard_id < 0 or (self.shard_count is not None and shard_id >= self.shard_count):
                raise ValueError(f"shard {shard_id} is outside 0..{(self.shard_count or 1) - 1}")

    @property
    def tool_client(self) -> ToolClient:
        if self._tool_client is None:
            raise RuntimeError("the gateway is not started")
        return self._tool_client

    @property
    def data_rights(self) -> DataRights:
        if self._data_rights is None:
            raise RuntimeError("the gateway is not started")
        return self._data_rights

    @property
    def shard_consumer(self) -> ShardConsumer:
        if self._shard_consumer is None:
            raise RuntimeError("the gateway is not started")
        return self._shard_consumer

    @property
    def cache_queue(self) -> str:
        return self.topology.cache_queue(self.instance)

    @property
    def is_running(self) -> bool:
        return self._started

    @property
    def receives_invalidations(self) -> bool:
        """Whether every `cache.invalidate` published now reaches `caches`: while running and
        connected (the cache queue goes with the connection)."""
        return self._started and self._connected

    @property
    def ready(self) -> bool:
        """Started, and connected to the broker (not between a lost connection and the next)."""
        return self.receives_invalidations

    async def start(self, shards: Iterable[int] | None = None) -> None:
        """Connects, declares the topology, and consumes invalidations and the owned shards:
        those given before and `shards`.

        When any step fails, what the earlier ones opened is closed before the error is raised.
        Tracing is turned on as `configure_tracing` says: a bot whose own OpenTelemetry SDK
        is installed by then keeps it, and its spans around a tool call become the parents.
        """
        if self._started:
            if shards is not None:
                await self.consume_shards(shards)
            return
        configure_tracing("ltm-gateway")
        owned = tuple(sorted(set(self.shards).union(shards or ())))
        self._check_shards(owned)
        if self._connection is None:
            self._connection = await amqp.connect_robust(
                self.settings,
                client_properties={"connection_name": self.connection_name},
                reconnect_interval=self.reconnect_interval_s,
            )
        try:
            self._watch(self._connection)
            await self._open(self._connection, owned)
            await self.consume_shards(owned)
        except BaseException:
            await self._close(self.settings.shutdown_grace_s)
            raise
        self._started = True
        log.info(
            "gateway.started",
            shards=list(self.shards),
            shard_count=self.shard_count,
            instance=self.instance,
            sender=type(self.sender).__name__,
        )

    @property
    def connection_name(self) -> str:
        """How the broker lists this process's connection (`rabbitmqctl list_connections`)."""
        return f"{self.topology.prefix}-gateway-{self.instance}"

    async def _open(self, connection: AbstractRobustConnection, shards: Iterable[int]) -> None:
        # The bots' broker account may declare only the gateways' own queues: the shared
        # topology is checked (declared when missing and allowed), not declared again.
        await ensure_topology(connection, self.topology)
        # A plain channel: aio-pika reopens a robust one the broker closed (as a mismatch does)
        # even once closed here. The shards' queues are declared here first, for that reason.
        declare_channel = await aio_pika.Channel(connection)
        try:
            for shard_id in shards:
                await declare_shard_queue(declare_channel, self.topology, shard_id)
        finally:
            await _close_channel(declare_channel)

        self._publishing = await ConfirmingChannel.open(connection)
        self._tool_client = ToolClient(
            self._publishing,
            self.topology,
            timeout_s=self.tool_timeout_s,
            shards=self.shards or None,  # not known yet (a bot before its shards are up)
            user_id=broker_user(str(getattr(connection, "url", self.settings.amqp_url))),
        )
        await self._tool_client.start()
        self._data_rights = DataRights(self._tool_client)

        consume_channel = await connection.channel()
        self._channels.append(consume_channel)
        await consume_channel.set_qos(prefetch_count=self.prefetch)
        self._cache_consumer = CacheInvalidationConsumer(
            consume_channel, self.topology, self.caches, self.instance, metrics=self.metrics
        )
        await self._cache_consumer.start()
        self._shard_consumer = ShardConsumer(
            consume_channel,
            self.topology,
            sender=self.sender,
            results=self._tool_client,
            answers=self._data_rights,
            notices=self.notices,
            metrics=self.metrics,
        )

    def _watch(self, connection: AbstractRobustConnection) -> None:
        self._connected = True
        connection.close_callbacks.add(self._connection_lost)
        connection.reconnect_callbacks.add(self._connection_back)

    def _unwatch(self, connection: AbstractRobustConnection) -> None:
        connection.close_callbacks.discard(self._connection_lost)
        connection.reconnect_callbacks.discard(self._connection_back)
        self._connected = False

    def _connection_lost(self, *_: Any) -> None:
        # Invalidations published from now until the queue is back never arrive here: what the
        # caches hold may go stale, and nothing read meanwhile is kept.
        self._connected = False
        self.caches.clear()
        log.warning("gateway.caches_cleared", instance=self.instance, reason="connection lost")

    def _connection_back(self, *_: Any) -> None:
        # Called once the channels, the cache queue and its consumer are restored.
        self._connected = True
        log.info("gateway.invalidations_resumed", instance=self.instance)

    async def consume_shards(self, shards: Iterable[int]) -> None:
        """Also consumes these shards (e.g. the bot's, once it knows them)."""
        wanted = tuple(sorted(set(shards)))
        self._check_shards(wanted)
        self.shards = tuple(sorted(set(self.shards) | set(wanted)))
        if self._tool_client is not None and self.shards:
            # No shard yet means not known yet: calls stay unchecked rather than all refused.
            self._tool_client.set_shards(self.shards)
        if self._shard_consumer is not None:
            await self._shard_consumer.start(wanted)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stops consuming, waits for in-flight deliveries (up to the grace), closes."""
        if not self._started:
            return
        self._started = False
        await self._close(self.settings.shutdown_grace_s if grace_s is None else grace_s)
        log.info("gateway.stopped", instance=self.instance)

    async def _close(self, grace_s: float) -> None:
        """Closes whatever `start` got to open: both a stop and a failed start end here."""
        if self._connection is not None:
            self._unwatch(self._connection)
        if self._tool_client is not None:
            self._tool_client.close()
        if self._data_rights is not None:
            self._data_rights.close()
        if self._cache_consumer is not None:
            await self._cache_consumer.stop(grace_s)
        if self._shard_consumer is not None:
            await self._shard_consumer.stop(grace_s)
        for channel in self._channels:
            await _close_channel(channel)
        self._channels.clear()
        if self._publishing is not None:
            await self._publishing.close()
            self._publishing = None
        if self._owns_connection and self._connection is not None:
            await self._connection.close()
            self._connection = None
        await self.memories.close()
        await self.notices.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    @classmethod
    def for_bot(
        cls,
        bot: hikari.GatewayBot,
        settings: Settings,
        *,
        retry_policy: RetryPolicy | None = None,
        metrics: GatewayMetrics | None = None,
        **options: Any,
    ) -> Gateway:
        """A gateway that sends with the bot's REST client and runs with the bot (`attach`).

        Its metrics are `gateway.metrics.registry`, for the bot to serve (`serve_metrics`).
        """
        metrics = metrics or GatewayMetrics()
        sender = DiscordSender(bot.rest, policy=retry_policy, metrics=metrics)
        gateway = cls(settings, sender=sender, metrics=metrics, **options)
        gateway.attach(bot)
        return gateway

    def attach(self, bot: hikari.GatewayBot) -> None:
        """Runs with the bot: connects when it starts, consumes its shards once they are up,
        and stops (finishing in-flight deliveries) when the bot stops, before its REST closes.
        """

        async def on_starting(_: hikari.StartingEvent) -> None:
            await self.start()

        async def on_started(_: hikari.StartedEvent) -> None:
            if not bot.shards:
                return
            if self.shard_count is None:
                self.shard_count = bot.shard_count
            await self.consume_shards(bot.shards)

        async def on_stopping(_: hikari.StoppingEvent) -> None:
            await self.stop()

        bot.subscribe(hikari.StartingEvent, on_starting)
        bot.subscribe(hikari.StartedEvent, on_started)
        bot.subscribe(hikari.StoppingEvent, on_stopping)
        if self.settings.forget_server_on_removal:
            bot.subscribe(hikari.GuildLeaveEvent, self.on_guild_leave)

    async def on_guild_leave(self, event: hikari.GuildLeaveEvent) -> None:
        """The bot was removed from the guild (or the guild was deleted): hikari tells an
        outage apart (`GuildUnavailableEvent`), so this one is for good. Asks for the server's
        erasure; a request that cannot be published is logged (the operators can still ask,
        `ltm server forget`)."""
        guild_id = str(int(event.guild_id))
        try:
            request_id = await self.data_rights.forget_removed_server(guild_id, self.instance)
        except (ToolClientUnavailable, RuntimeError) as error:
            log.error("gateway.server_erasure_not_requested", guild_id=guild_id, error=str(error))
            return
        log.info("gateway.server_erasure_requested", guild_id=guild_id, request_id=request_id)


async def _close_channel(channel: AbstractChannel) -> None:
    if channel.is_closed:
        return
    try:
        await channel.close()
    except Exception as error:  # already going away with the connection
        log.warning("gateway.channel_close_failed", error=error_summary(error))
