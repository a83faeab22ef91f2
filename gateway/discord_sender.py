"""Posts embeds to Discord through hikari's REST client, and deletes them again on request,
classifying each failure.

- 403 (`hikari.ForbiddenError`) and 404 (`hikari.NotFoundError`), and any other 4xx but 429:
  the message can never be posted. Logged, and the delivery is acknowledged (`DROPPED`).
- 429: hikari waits and retries by itself, within its `max_rate_limit`.
- 5xx, timeouts, connection errors: retried here with exponential backoff and jitter for at
  most `RetryPolicy.retry_for_s`, then `RETRY_LATER`: the delivery is requeued and tried
  again later; the message's AMQP expiration bounds how stale a notice can get.

Each message carries a nonce derived from the event id, which hikari sends with
`enforce_nonce`: when a retry follows a request that Discord did carry out (a timeout after
the write), Discord answers with the first message instead of posting a second one.

A retraction (`retract`) deletes a posted notice: 404 means it is gone already (deleted);
403 is `FORBIDDEN` and any other 4xx `REJECTED`, both kept for the operators to see; the
transient failures are retried as a post's are, then `RETRY_LATER`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import hikari
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from contracts import EmbedRequested
from gateway.delivery import Delivery, Retraction, SendResult
from gateway.embeds import to_hikari_embed
from gateway.metrics import EmbedFailure, GatewayMetrics
from infra.observability import tracing
from infra.observability.logs import error_summary, get_logger

__all__ = ["DiscordSender", "RetryPolicy", "discord_nonce", "is_transient_discord_fault"]

log = get_logger(__name__)

# Discord accepts a nonce of up to 25 characters.
_NONCE_LENGTH = 25
# The route of `create_message`, as an HTTP client span names it.
_CREATE_MESSAGE = "/channels/{channel.id}/messages"
_DELETE_MESSAGE = "/channels/{channel.id}/messages/{message.id}"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long a transient failure (5xx, network) is retried before the delivery is requeued."""

    retry_for_s: float = 30.0
    first_wait_s: float = 0.5
    max_wait_s: float = 5.0


def discord_nonce(event_id: uuid.UUID) -> str:
    """A nonce that names the event: the same event always gets the same nonce."""
    return event_id.hex[:_NONCE_LENGTH]


def is_transient_discord_fault(error: BaseException) -> bool:
    """True for failures that may pass: server errors, timeouts, connection errors."""
    if isinstance(error, hikari.RateLimitTooLongError):
        return False  # waiting here longer than hikari's own limit helps no one: requeue
    if isinstance(error, hikari.ClientHTTPResponseError):
        return False  # 4xx: the request itself is wrong, or we may not post there
    if isinstance(error, hikari.HTTPError):
        return True  # 5xx (InternalServerError) and connection errors (plain HTTPError)
    return isinstance(error, TimeoutError | ConnectionError)


class DiscordSender:
    """Sends embeds with a started hikari REST client (`RESTApp.acquire(...)` or `bot.rest`)."""

    def __init__(
        self,
        rest: hikari.api.RESTClient,
        *,
        policy: RetryPolicy | None = None,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self._rest = rest
        self._policy = policy or RetryPolicy()
        self._metrics = metrics or GatewayMetrics()

    async def send(self, request: EmbedRequested) -> SendResult:
        bound = log.bind(
            tool_call_id=request.tool_call_id,
            event_id=str(request.event_id),
            channel_id=request.channel_id,
        )
        embed = to_hikari_embed(request.embed)
        retrying = self._retrying(bound)
        try:
            with tracing.posting("POST", _CREATE_MESSAGE, channel_id=request.channel_id) as span:
                try:
                    async for attempt in retrying:
                        with attempt:
                            message = await self._rest.create_message(
                                int(request.channel_id),
                                embed=embed,
                                nonce=discord_nonce(request.event_id),
                            )
                except hikari.HTTPResponseError as error:
                    status = int(error.status)
                    tracing.failed(span, str(status), error.message, status_code=status)
                    raise
        except (hikari.ForbiddenError, hikari.NotFoundError) as error:
            reason: EmbedFailure = (
                "forbidden" if isinstance(error, hikari.ForbiddenError) else "not_found"
            )
            self._metrics.embed_failed(reason)
            bound.warning(
                "embed.dropped",
                reason=reason,
                status=int(error.status),
                discord_code=error.code,
                discord_message=error.message,
            )
            return SendResult(Delivery.DROPPED)
        except hikari.ClientHTTPResponseError as error:
            self._metrics.embed_failed("rejected")
            bound.error(
                "embed.rejected",
                status=int(error.status),
                discord_code=error.code,
                discord_message=error.message,
            )
            return SendResult(Delivery.DROPPED)
        except Exception as error:
            if not is_transient_discord_fault(error) and not isinstance(
                error, hikari.RateLimitTooLongError | hikari.ComponentStateConflictError
            ):
                raise
            self._metrics.embed_failed("unavailable")
            bound.warning("embed.send_failed_requeue", error=error_summary(error))
            return SendResult(Delivery.RETRY_LATER)
        bound.info("embed.sent", message_id=str(message.id))
        return SendResult(Delivery.SENT, str(message.id))

    async def retract(self, channel_id: str, message_id: str) -> Retraction:
        bound = log.bind(channel_id=channel_id, message_id=message_id)
        retrying = self._retrying(bound, "notice.retract_retrying")
        try:
            with tracing.posting("DELETE", _DELETE_MESSAGE, channel_id=channel_id) as span:
                try:
                    async for attempt in retrying:
                        with attempt:
                            await self._rest.delete_message(int(channel_id), int(message_id))
                except hikari.HTTPResponseError as error:
                    status = int(error.status)
                    tracing.failed(span, str(status), error.message, status_code=status)
                    raise
        except hikari.NotFoundError:
            bound.info("notice.already_gone")
            return Retraction.DELETED
        except hikari.ClientHTTPResponseError as error:
            forbidden = isinstance(error, hikari.ForbiddenError)
            bound.warning(
                "notice.retract_refused",
                status=int(error.status),
                discord_code=error.code,
                discord_message=error.message,
            )
            return Retraction.FORBIDDEN if forbidden else Retraction.REJECTED
        except Exception as error:
            if not is_transient_discord_fault(error) and not isinstance(
                error, hikari.RateLimitTooLongError
            ):
                raise
            bound.warning("notice.retract_failed_requeue", error=repr(error))
            return Retraction.RETRY_LATER
        bound.info("notice.retracted")
        return Retraction.DELETED

    def _retrying(
        self, bound: structlog.stdlib.BoundLogger, event: str = "embed.send_retrying"
    ) -> AsyncRetrying:
        """Retries of transient failures within the policy's budget, each one logged."""
        policy = self._policy

        def before_sleep(state: RetryCallState) -> None:
            outcome = state.outcome
            error = outcome.exception() if outcome is not None else None
            bound.warning(
                event,
                attempt=state.attempt_number,
                wait_s=round(state.upcoming_sleep, 3),
                error=error,  # summarised by the log processor
            )

        return AsyncRetrying(
            stop=stop_after_delay(policy.retry_for_s),
            wait=wait_exponential(multiplier=policy.first_wait_s, max=policy.max_wait_s)
            + wait_random(0, policy.first_wait_s),
            retry=retry_if_exception(is_transient_discord_fault),
            before_sleep=before_sleep,
            reraise=True,
        )
