"""A local stand-in for Discord's REST API (v10), enough for hikari's `create_message`.

An aiohttp server on 127.0.0.1 (random port). `POST /api/v10/channels/{id}/messages` answers
a message object hikari's entity factory deserializes (author, embeds, timestamp, ...), and
honours `nonce` + `enforce_nonce` as Discord does (the same nonce in the same channel returns
the first message). Every request is recorded. Per channel, answers can be scripted: 403
(Missing Permissions, code 50013), 404 (Unknown Channel, code 10003), 429 (with `retry_after`
and the `X-RateLimit-*` / `Retry-After` headers hikari reads), 500, each once or always.
`GET /api/v10/users/@me` answers the bot user. `DELETE
/api/v10/channels/{id}/messages/{message}` deletes a message it created (204), answers 404
(Unknown Message, code 10008) for one it does not know, and follows the channel's script too
(`Reply.forbidden()` for a 403).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from harness.snowflake import snowflake

__all__ = ["FakeDiscord", "RecordedRequest", "Reply"]


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    @classmethod
    def forbidden(cls) -> Reply:
        return cls(403, {"message": "Missing Permissions", "code": 50013})

    @classmethod
    def not_found(cls) -> Reply:
        return cls(404, {"message": "Unknown Channel", "code": 10003})

    @classmethod
    def unknown_message(cls) -> Reply:
        return cls(404, {"message": "Unknown Message", "code": 10008})

    @classmethod
    def server_error(cls) -> Reply:
        return cls(500, {"message": "500: Internal Server Error", "code": 0})

    @classmethod
    def rate_limited(
        cls, retry_after: float, *, bucket: str = "fake-bucket", scope: str = "shared"
    ) -> Reply:
        """A 429. Scope `shared` (a per-resource limit): hikari waits `retry_after`. With
        `user` and no requests left, hikari retries at once and leaves waiting to its bucket."""
        return cls(
            429,
            {"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
            {
                "Retry-After": str(math.ceil(retry_after)),
                "X-RateLimit-Limit": "5",
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
                "X-RateLimit-Reset-After": f"{retry_after:.3f}",
                "X-RateLimit-Bucket": bucket,
                "X-RateLimit-Scope": scope,
            },
        )

    @classmethod
    def slow_success(cls, delay_s: float) -> Reply:
        """Success, answered after `delay_s` (status 200 means: create the message)."""
        return cls(200, {}, delay_s=delay_s)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    channel_id: str | None
    headers: Mapping[str, str]
    json: Any
    status: int
    at: float  # time.monotonic() when it arrived


@dataclass
class _ChannelScript:
    once: deque[Reply] = field(default_factory=deque)
    always: Reply | None = None


class FakeDiscord:
    """Start with `async with FakeDiscord() as fake:`; point hikari at `fake.url`."""

    def __init__(self) -> None:
        self.bot_user: dict[str, Any] = {
            "id": snowflake(),
            "username": "tomori",
            "global_name": "Tomori",
            "discriminator": "0",
            "avatar": None,
            "bot": True,
            "public_flags": 0,
        }
        self.requests: list[RecordedRequest] = []
        self.arrived: list[str] = []  # channel ids of message POSTs, as they arrive
        self.messages: list[dict[str, Any]] = []
        self.deleted: list[dict[str, Any]] = []  # the messages deleted, in order
        self._scripts: dict[str, _ChannelScript] = {}
        self._ids = itertools.count(int(snowflake()))
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # Programming and inspection.

    @property
    def url(self) -> str:
        """The base URL hikari needs (`RESTApp(url=...)`, `DISCORD_API_URL`)."""
        if self._port is None:
            raise RuntimeError("the fake is not started")
        return f"http://127.0.0.1:{self._port}/api/v10"

    def script(self, channel_id: int | str, *replies: Reply) -> None:
        """These answers, one request each, in order; then the usual success."""
        self._scripts.setdefault(str(channel_id), _ChannelScript()).once.extend(replies)

    def always(self, channel_id: int | str, reply: Reply | None) -> None:
        """This answer to every request in the channel (None: back to success)."""
        self._scripts.setdefault(str(channel_id), _ChannelScript()).always = reply

    def posts(self, channel_id: int | str) -> list[RecordedRequest]:
        """Every `POST /channels/<id>/messages` received, whatever it was answered."""
        return [
            request
            for request in self.requests
            if request.method == "POST" and request.channel_id == str(channel_id)
        ]

    def deletes(self, channel_id: int | str) -> list[RecordedRequest]:
        """Every `DELETE /channels/<id>/messages/<message>` received, whatever it was answered."""
        return [
            request
            for request in self.requests
            if request.method == "DELETE" and request.channel_id == str(channel_id)
        ]

    def messages_in(self, channel_id: int | str) -> list[dict[str, Any]]:
        """The messages created in the channel."""
        return [message for message in self.messages if message["channel_id"] == str(channel_id)]

    # Server.

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._create_message)
        app.router.add_delete(
            "/api/v10/channels/{channel_id}/messages/{message_id}", self._delete_message
        )
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        addresses: list[Any] = list(self._runner.addresses)
        self._port = int(addresses[0][1])

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def _record(
        self, request: web.Request, channel_id: str | None, body: Any, status: int, at: float
    ) -> None:
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                channel_id=channel_id,
                headers=dict(request.headers),
                json=body,
                status=status,
                at=at,
            )
        )

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization", "").startswith("Bot ")

    @staticmethod
    def _json(
        status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> web.Response:
        return web.json_response(dict(body), status=status, headers=dict(headers or {}))

    def _next_reply(self, channel_id: str) -> Reply | None:
        script = self._scripts.get(channel_id)
        if script is None:
            return None
        if script.always is not None:
            return script.always
        return script.once.popleft() if script.once else None

    async def _create_message(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        channel_id = request.match_info["channel_id"]
        self.arrived.append(channel_id)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not self._authorized(request):
            self._record(request, channel_id, body, 401, at)
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        reply = self._next_reply(channel_id)
        if reply is not None and reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply is not None and reply.status != 200:
            self._record(request, channel_id, body, reply.status, at)
            return self._json(reply.status, reply.body, reply.headers)
        if not isinstance(body, dict) or not (body.get("content") or body.get("embeds")):
            self._record(request, channel_id, body, 400, at)
            return self._json(400, {"message": "Cannot send an empty message", "code": 50006})
        self._record(request, channel_id, body, 200, at)
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            for message in self.messages_in(channel_id):
                if message.get("nonce") == nonce:
                    return self._json(200, message)
        message = self._message(channel_id, body)
        self.messages.append(message)
        return self._json(200, message)

    async def _delete_message(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        channel_id, message_id = request.match_info["channel_id"], request.match_info["message_id"]
        if not self._authorized(request):
            self._record(request, channel_id, None, 401, at)
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        reply = self._next_reply(channel_id)
        if reply is not None and reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply is not None and reply.status != 200:
            self._record(request, channel_id, None, reply.status, at)
            return self._json(reply.status, reply.body, reply.headers)
        found = next(
            (
                message
                for message in self.messages
                if message["channel_id"] == channel_id and message["id"] == message_id
            ),
            None,
        )
        if found is None:
            self._record(request, channel_id, None, 404, at)
            unknown = Reply.unknown_message()
            return self._json(unknown.status, unknown.body)
        self.messages.remove(found)
        self.deleted.append(found)
        self._record(request, channel_id, None, 204, at)
        return web.Response(status=204)

    def _message(self, channel_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        embeds = [{"type": "rich", **embed} for embed in body.get("embeds") or ()]
        message: dict[str, Any] = {
            "id": str(next(self._ids)),
            "channel_id": channel_id,
            "author": self.bot_user,
            "content": body.get("content") or "",
            "timestamp": datetime.now(UTC).isoformat(),
            "edited_timestamp": None,
            "tts": bool(body.get("tts", False)),
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": embeds,
            "reactions": [],
            "pinned": False,
            "type": 0,
            "flags": int(body.get("flags") or 0),
            "components": [],
        }
        if body.get("nonce") is not None:
            message["nonce"] = body["nonce"]
        return message

    async def _me(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        status = 200 if self._authorized(request) else 401
        self._record(request, None, None, status, at)
        if status != 200:
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        return self._json(200, self.bot_user)

    async def _unknown(self, request: web.Request) -> web.Response:
        self._record(request, None, None, 404, time.monotonic())
        return self._json(404, {"message": "404: Not Found", "code": 0})
