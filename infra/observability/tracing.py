"""OpenTelemetry tracing of a tool call, from the bot's publish to the embed posted in Discord.

The W3C trace context travels in the AMQP headers (`traceparent`, `tracestate`): the tool
client's PRODUCER span is the parent of the worker's CONSUMER span, whose context the worker
publishes the call's events within, and stores with every outbox row it writes, so that a
sweep's late publish, from any process, is a child of the call that made the event; the
gateway continues from the event's headers, and starts no trace of its own: the events of a
call the worker did not sample carry no context, and are left out there too. Span names and
attributes follow OpenTelemetry's messaging, database and HTTP semantic conventions.

Off unless configured. `configure_tracing`, at a process's start, reads the standard `OTEL_*`
variables and installs the SDK (the `tracing` extra) when they ask for an exporter; a host
program that has installed its own SDK already (a bot embedding the gateway) is followed
instead. Every function here first reads one module global: with tracing off, no context is
extracted, no span object made and no header written. With it on, a delivery the sampler
leaves out gets a `LeftOutSpan` and no SDK span (`SamplingAhead`), and the W3C headers are
written here rather than by the propagator's machinery, whenever that writes the same.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Final

from opentelemetry import baggage, propagate, trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.propagators.textmap import Getter, TextMapPropagator
from opentelemetry.trace import (
    Link,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from infra.observability.tracing_setup import (
    INSTRUMENTATION_NAME,
    configure_tracing,
    enabled,
    use_tracer_provider,
)
from infra.observability.tracing_setup import STATE as _STATE

__all__ = [
    "CURRENT",
    "INSTRUMENTATION_NAME",
    "LeftOutSpan",
    "Parent",
    "add_trace_ids",
    "carrying_current",
    "configure_tracing",
    "current_span",
    "enabled",
    "failed",
    "posting",
    "processing",
    "sending",
    "settled",
    "trace_id_of",
    "traceparent_of",
    "transaction",
    "use_tracer_provider",
]

# Attribute names of the semantic conventions (a unit test holds them to the
# `opentelemetry-semantic-conventions` package, which the code does not need at run time).
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_DESTINATION_SUBSCRIPTION_NAME: Final = "messaging.destination.subscription.name"
MESSAGING_RABBITMQ_ROUTING_KEY: Final = "messaging.rabbitmq.destination.routing_key"
MESSAGING_RABBITMQ_DELIVERY_TAG: Final = "messaging.rabbitmq.message.delivery_tag"
MESSAGING_MESSAGE_ID: Final = "messaging.message.id"
MESSAGING_MESSAGE_CONVERSATION_ID: Final = "messaging.message.conversation_id"
MESSAGING_BATCH_MESSAGE_COUNT: Final = "messaging.batch.message_count"
DB_SYSTEM_NAME: Final = "db.system.name"
DB_NAMESPACE: Final = "db.namespace"
HTTP_REQUEST_METHOD: Final = "http.request.method"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"
URL_TEMPLATE: Final = "url.template"
ERROR_TYPE: Final = "error.type"
# How the delivery was settled (ack, nack, reject): on its CONSUMER span, which lasts until then.
SETTLEMENT: Final = "ltm.delivery.settlement"
# The events of a call's database transaction on its CONSUMER span (`transaction`).
TRANSACTION_BEGIN: Final = "ltm.transaction.begin"
TRANSACTION_COMMIT: Final = "ltm.transaction.commit"

RABBITMQ: Final = "rabbitmq"
# How a span names the default exchange, whose name is empty.
_DEFAULT_EXCHANGE: Final = "amq.default"
POSTGRESQL: Final = "postgresql"


class _Current:
    """The parent of a span is the current span (the default)."""

    def __repr__(self) -> str:
        return "CURRENT"


CURRENT: Final = _Current()
# Where a message was created: the current span, a stored `traceparent`, or None for a new
# trace (a row written with tracing off; a replay, which links to the original instead).
Parent = _Current | str | None

_OFF: Final[contextlib.nullcontext[None]] = contextlib.nullcontext()


class _UnsampledCurrent(contextlib.AbstractContextManager[Span]):
    """An unsampled span current for the block: it records no exception or status, and needs
    none of the SDK's `use_span`."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span

    def __enter__(self) -> Span:
        self._token = attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, *_: object) -> None:
        detach(self._token)


class LeftOutSpan(trace.NonRecordingSpan):
    """The span of a delivery no trace records: current, it keeps whatever is made within it
    out of traces (a parent-based sampler follows its flag), as an unsampled parent would.

    99 calls in 100 by default: it holds its ids as ints, and makes the `SpanContext` of
    the OpenTelemetry API only when that is asked for (a dead-letter copy's publish within
    it), not on the way of every call; its `traceparent` is written from the ints.
    """

    def __init__(self, trace_id: int, span_id: int, flags: int = TraceFlags.DEFAULT) -> None:
        # Not NonRecordingSpan's `__init__`: it takes the context this span makes later.
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags
        self._made: SpanContext | None = None

    def get_span_context(self) -> SpanContext:
        if self._made is None:
            self._made = SpanContext(
                self.trace_id, self.span_id, is_remote=False, trace_flags=TraceFlags(self.flags)
            )
        return self._made

    @property
    def traceparent(self) -> str:
        return _traceparent(self.trace_id, self.span_id, self.flags)

    def __repr__(self) -> str:
        return f"LeftOutSpan({self.traceparent})"


def _left_out() -> Span:
    """The span of a delivery that starts no trace (`processing(starts_trace=False)`)."""
    return LeftOutSpan(random.getrandbits(128) or 1, random.getrandbits(64) or 1)


# -- context in AMQP headers ---------------------------------------------------------------


class _HeaderGetter(Getter[Mapping[str, Any]]):
    """AMQP header values arrive as str, or as bytes when they were not valid UTF-8."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if isinstance(value, bytes):
            value = value.decode("ascii", errors="replace")
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


_HEADERS: Final = _HeaderGetter()
# The stored form (an outbox row's `traceparent`) is W3C's, whatever OTEL_PROPAGATORS says.
_W3C: Final = TraceContextTextMapPropagator()


def _context_from(headers: Mapping[str, Any] | None) -> Context:
    # Most deliveries carry no context (a bot that does not trace): nothing to extract.
    if not headers or (_propagation().w3c and _W3C_FIELDS.isdisjoint(headers)):
        return Context()
    return propagate.extract(headers, getter=_HEADERS, context=Context())


def _parent_context(parent: Parent) -> Context | None:
    """None: the current context (the SDK's default)."""
    if isinstance(parent, _Current):
        return None
    if parent is None:
        return Context()
    return _W3C.extract({"traceparent": parent}, context=Context())


# -- spans ---------------------------------------------------------------------------------


def sending(
    *,
    exchange: str | None,
    routing_key: str,
    message_id: str | None,
    conversation_id: str | None,
    headers: MutableMapping[str, Any],
    parent: Parent = CURRENT,
    linked_headers: Mapping[str, Any] | None = None,
) -> contextlib.AbstractContextManager[Span | None]:
    """A PRODUCER span `send <exchange>` around a publish and its confirm; its context goes
    into `headers`, the message's own, before the caller builds the message.

    `linked_headers`: the headers of an earlier message this one repeats (a replayed dead
    letter), whose context the span links to.
    """
    tracer = _STATE.tracer
    if tracer is None:
        return _OFF
    links: tuple[Link, ...] = ()
    if linked_headers is not None:
        original = trace.get_current_span(_context_from(linked_headers)).get_span_context()
        links = (Link(original),) if original.is_valid else ()
    return _producer(
        tracer,
        exchange=exchange,
        attributes={
            MESSAGING_SYSTEM: RABBITMQ,
            MESSAGING_OPERATION_NAME: "send",
            MESSAGING_OPERATION_TYPE: "send",
            MESSAGING_DESTINATION_NAME: exchange or "",
            **_optional(MESSAGING_RABBITMQ_ROUTING_KEY, routing_key),
            **_optional(MESSAGING_MESSAGE_ID, message_id),
            **_optional(MESSAGING_MESSAGE_CONVERSATION_ID, conversation_id),
        },
        headers=headers,
        parent=_parent_context(parent),
        links=links,
    )


@contextlib.contextmanager
def _producer(
    tracer: trace.Tracer,
    *,
    exchange: str | None,
    attributes: dict[str, Any],
    headers: MutableMapping[str, Any],
    parent: Context | None,
    links: Sequence[Link],
) -> Iterator[Span]:
    with tracer.start_as_current_span(
        f"send {exchange or _DEFAULT_EXCHANGE}",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes=attributes,
        links=links,
    ) as span:
        _inject(span.get_span_context(), headers)
        yield span


class _Propagation:
    """The fields the global propagator writes, and whether they are W3C's alone; read again
    only when another propagator is installed (`OTEL_PROPAGATORS`, or a host program's)."""

    textmap: TextMapPropagator | None = None
    fields: frozenset[str] = frozenset()
    w3c: bool = False


_PROPAGATION: Final = _Propagation()
_W3C_FIELDS: Final = frozenset({"traceparent", "tracestate", "baggage"})


def _propagation() -> _Propagation:
    textmap = propagate.get_global_textmap()
    if textmap is not _PROPAGATION.textmap:
        fields = frozenset(textmap.fields)
        _PROPAGATION.fields = fields
        _PROPAGATION.w3c = "traceparent" in fields and fields <= _W3C_FIELDS
        _PROPAGATION.textmap = textmap
    return _PROPAGATION


def _inject(current: SpanContext, *all_headers: MutableMapping[str, Any]) -> None:
    """The current context (`current`: its span's) into each message's headers, sampled or
    not: a bot's unsampled flag is what keeps the worker from sampling a call the bot left
    out."""
    propagation = _propagation()
    # Once: every message carries the same context.
    carrier = _w3c_carrier(current) if propagation.w3c else None
    if carrier is None:
        carrier = {}
        propagate.inject(carrier)
    for headers in all_headers:
        # A copy of an earlier message (a dead letter, a replay) drops that message's context
        # whole: a `tracestate` of the old trace must not travel with the new `traceparent`.
        if not propagation.fields.isdisjoint(headers):
            for field in propagation.fields:
                headers.pop(field, None)
        headers.update(carrier)


def _w3c_carrier(context: SpanContext) -> dict[str, Any] | None:
    """What the W3C propagators write for the current context, whose span's is `context`,
    when it is that alone (no `tracestate`, no baggage): its `traceparent`; None for any
    other, theirs to write."""
    if not context.is_valid or context.trace_state or baggage.get_all():
        return None
    return {"traceparent": _traceparent(context.trace_id, context.span_id, context.trace_flags)}


def carrying_current(headers: Iterable[MutableMapping[str, Any]]) -> None:
    """The current span's context into each message's `headers`: messages published within a
    call's span (its events), so that each delivery's span is the call's child.

    Only a sampled call's: an unsampled call's events carry no context, and the gateway, which
    continues traces and starts none (`processing(starts_trace=False)`), leaves them out as
    the worker did, for none of the header's cost to each of them. No span of their own: one
    would cost every traced call a third of what its tracing costs the worker
    (bench/RESULTS.md), and would say no more than the call's `process` span does, which ends
    once the events are confirmed and the delivery settled. `headers` is only iterated for a
    sampled call: the caller may pass a generator, made for nothing otherwise."""
    if _STATE.tracer is None:
        return
    current = _current_sampled()
    if current is not None:
        _inject(current, *headers)


def _current_sampled() -> SpanContext | None:
    """The current span's context when it is sampled; a left-out call's is not made."""
    span = trace.get_current_span()
    if type(span) is LeftOutSpan:
        return None
    context = span.get_span_context()
    return context if context.trace_flags.sampled else None


def processing(
    *,
    headers: Mapping[str, Any] | None,
    exchange: str | None,
    routing_key: str | None,
    message_id: str | None,
    conversation_id: str | None,
    queue: str | None = None,
    starts_trace: bool = True,
) -> contextlib.AbstractContextManager[Span | None]:
    """A CONSUMER span `process <exchange>`, the child of the context in the delivery's
    headers, current until the delivery is settled.

    `starts_trace`: whether a delivery without a context starts a trace of its own (the
    worker's calls, sampled as new traces are); else it is left out, as a delivery with an
    unsampled context is (the gateway's events: the worker passes no context on for a call it
    did not sample)."""
    tracer = _STATE.tracer
    if tracer is None:
        return _OFF
    parent = _context_from(headers)
    if not starts_trace and not trace.get_current_span(parent).get_span_context().is_valid:
        return _UnsampledCurrent(_left_out())
    name = f"process {exchange or _DEFAULT_EXCHANGE}"

    def attributes() -> dict[str, Any]:
        return {
            MESSAGING_SYSTEM: RABBITMQ,
            MESSAGING_OPERATION_NAME: "process",
            MESSAGING_OPERATION_TYPE: "process",
            MESSAGING_DESTINATION_NAME: exchange or "",
            **_optional(MESSAGING_DESTINATION_SUBSCRIPTION_NAME, queue),
            **_optional(MESSAGING_RABBITMQ_ROUTING_KEY, routing_key),
            **_optional(MESSAGING_MESSAGE_ID, message_id),
            **_optional(MESSAGING_MESSAGE_CONVERSATION_ID, conversation_id),
        }

    ahead = _STATE.ahead
    if ahead is None:
        return tracer.start_as_current_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes()
        )
    span = ahead.start_span(tracer, parent, name, SpanKind.CONSUMER, attributes)
    if not span.is_recording():
        return _UnsampledCurrent(span)
    # As `start_as_current_span` would: ended, and failed by an exception, when the block ends.
    return trace.use_span(span, end_on_exit=True)


def settled(operation: str, *, delivery_tag: int | None) -> None:
    """Notes on the current span (the delivery's CONSUMER span, which ends once the delivery is
    settled) how it was settled: an attribute, not a span of its own, which would cost as
    much as the call's other spans and say no more than the CONSUMER span's end."""
    if _STATE.tracer is None:
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(SETTLEMENT, operation)
        if delivery_tag is not None:
            span.set_attribute(MESSAGING_RABBITMQ_DELIVERY_TAG, delivery_tag)


def transaction(
    calls: Sequence[Span | None], *, database: str | None
) -> contextlib.AbstractContextManager[None]:
    """The database transaction of a batch of calls, on each sampled call's span: an event as
    it begins (`ltm.transaction.begin`, with the database and how many calls share it) and
    one once it commits (`ltm.transaction.commit`); none for a transaction that fails, whose
    calls' spans say why.

    Events and no span of its own: a span would cost each traced call as much as its own
    again (bench/RESULTS.md), and one span for the batch needs links both ways to keep the
    calls' traces apart."""
    if _STATE.tracer is None:
        return _OFF
    recording = [span for span in calls if span is not None and span.is_recording()]
    if not recording:
        return _OFF
    return _transaction(recording, database, len(calls))


@contextlib.contextmanager
def _transaction(spans: list[Span], database: str | None, calls: int) -> Iterator[None]:
    begun = {
        DB_SYSTEM_NAME: POSTGRESQL,
        **_optional(DB_NAMESPACE, database),
        MESSAGING_BATCH_MESSAGE_COUNT: calls,
    }
    for span in spans:
        span.add_event(TRANSACTION_BEGIN, begun)
    yield
    for span in spans:
        span.add_event(TRANSACTION_COMMIT)


def posting(
    method: str, url_template: str, *, channel_id: str
) -> contextlib.AbstractContextManager[Span | None]:
    """A CLIENT span `<method> <url template>` for a request to Discord's API."""
    tracer = _STATE.tracer
    if tracer is None:
        return _OFF
    return tracer.start_as_current_span(
        f"{method} {url_template}",
        kind=SpanKind.CLIENT,
        attributes={
            HTTP_REQUEST_METHOD: method,
            URL_TEMPLATE: url_template,
            "discord.channel.id": channel_id,
        },
    )


def failed(
    span: Span | None,
    error_type: str,
    description: str | None = None,
    *,
    status_code: int | None = None,
) -> None:
    """Marks a span as failed (`error.type`, status ERROR), when there is one; `status_code`:
    the HTTP status that said so."""
    if span is None or not span.is_recording():
        return
    span.set_attribute(ERROR_TYPE, error_type)
    if status_code is not None:
        span.set_attribute(HTTP_RESPONSE_STATUS_CODE, status_code)
    span.set_status(Status(StatusCode.ERROR, description))


def current_span() -> Span | None:
    """The current span while tracing is on; None when it is off."""
    return None if _STATE.tracer is None else trace.get_current_span()


def traceparent_of(span: Span | None) -> str | None:
    """The W3C `traceparent` of `span`, to store (the outbox keeps one per row)."""
    if span is None:
        return None
    if type(span) is LeftOutSpan:
        return span.traceparent
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return _traceparent(context.trace_id, context.span_id, context.trace_flags)


def _traceparent(trace_id: int, span_id: int, flags: int) -> str:
    # W3C's version 00 form, written directly: no context object and carrier for each call.
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def trace_id_of(span: Span | None) -> str | None:
    """The span's trace id as 32 hex digits, as trace viewers show it."""
    if span is None or not span.get_span_context().is_valid:
        return None
    return f"{span.get_span_context().trace_id:032x}"


def add_trace_ids(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Any:
    """A structlog processor: `trace_id` and `span_id` on every line logged within a sampled
    span, the trace one can open (an unsampled call's lines have its `tool_call_id`)."""
    if _STATE.tracer is not None and (context := _current_sampled()) is not None:
        event_dict["trace_id"] = f"{context.trace_id:032x}"
        event_dict["span_id"] = f"{context.span_id:016x}"
    return event_dict


def _optional(name: str, value: object) -> dict[str, Any]:
    return {} if value is None or value == "" else {name: value}
