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
(`Reply.forbidden()` for a 403). A message with files comes as `multipart/form-data`: its JSON
in `payload_json`, each file kept in the request's `files` (name -> bytes).

For a bot's slash commands: `GET /api/v10/oauth2/applications/@me` answers the application
(its id the bot user's), `POST /api/v10/applications/{id}/commands` creates or replaces a
global command by name (`commands`), `POST /api/v10/interactions/{id}/{token}/callback`
takes an interaction's first response (answering the callback's resource when asked
`with_response`, as hikari does) and `PATCH /api/v10/webhooks/{application}/{token}/
messages/@original` edits it (both recorded under the interaction's token, `responses`), and
`POST /api/v10/users/@me/channels` opens a DM channel with a user (`dm_channel_of`).
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

from aiohttp import BodyPartReader, web

from harness.loopback import serve_on_loopback
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
    files: Mapping[str, bytes] = field(default_factory=dict)  # a multipart request's files


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
        self.commands: dict[str, dict[str, Any]] = {}  # the global commands, by name
        self.responses: dict[str, list[RecordedRequest]] = {}  # by interaction token
        self._dm_channels: dict[str, str] = {}  # user id -> DM channel id
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

    def dm_channel_of(self, user_id: int | str) -> str | None:
        """The DM channel opened with the user, if one was."""
        return self._dm_channels.get(str(user_id))

    @property
    def application(self) -> dict[str, Any]:
        """The bot's application, as `GET /oauth2/applications/@me` answers it."""
        return {
            "id": self.bot_user["id"],
            "name": self.bot_user["username"],
            "description": "",
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": {**self.bot_user, "id": "100000000000000009", "bot": False},
            "verify_key": "00" * 32,
            "flags": 0,
            "approximate_guild_count": 1,
            "approximate_user_install_count": 0,
        }

    # Server.

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._create_message)
        app.router.add_delete(
            "/api/v10/channels/{channel_id}/messages/{message_id}", self._delete_message
        )
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_post("/api/v10/applications/{application_id}/commands", self._command)
        app.router.add_post(
            "/api/v10/interactions/{interaction_id}/{token}/callback", self._interaction_response
        )
        app.router.add_patch(
            "/api/v10/webhooks/{application_id}/{token}/messages/@original",
            self._interaction_response,
        )
        app.router.add_post("/api/v10/users/@me/channels", self._dm_channel)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner, self._port = await serve_on_loopback(app)

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
        self,
        request: web.Request,
        channel_id: str | None,
        body: Any,
        status: int,
        at: float,
        *,
        files: Mapping[str, bytes] | None = None,
    ) -> RecordedRequest:
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            channel_id=channel_id,
            headers=dict(request.headers),
            json=body,
            status=status,
            at=at,
            files=dict(files or {}),
        )
        self.requests.append(recorded)
        return recorded

    @staticmethod
    async def _body(request: web.Request) -> tuple[Any, dict[str, bytes]]:
        """The request's JSON, and its files when it is multipart (hikari's attachments)."""
        if not request.content_type.startswith("multipart/"):
            try:
                return await request.json(), {}
            except ValueError:
                return None, {}
        body: Any = None
        files: dict[str, bytes] = {}
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "payload_json":
                body = await part.json()
            else:
                files[part.filename or str(part.name)] = bytes(await part.read())
        return body, files

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
        body, files = await self._body(request)
        if not self._authorized(request):
            self._record(request, channel_id, body, 401, at)
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        reply = self._next_reply(channel_id)
        if reply is not None and reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply is not None and reply.status != 200:
            self._record(request, channel_id, body, reply.status, at)
            return self._json(reply.status, reply.body, reply.headers)
        if not isinstance(body, dict) or not (body.get("content") or body.get("embeds") or files):
            self._record(request, channel_id, body, 400, at, files=files)
            return self._json(400, {"message": "Cannot send an empty message", "code": 50006})
        self._record(request, channel_id, body, 200, at, files=files)
        nonce = body.get("nonce")
        if nonce is not None and body.get("enforce_nonce"):
            for message in self.messages_in(channel_id):
                if message.get("nonce") == nonce:
                    return self._json(200, message)
        message = self._message(channel_id, body, files)
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

    def _message(
        self, channel_id: str, body: Mapping[str, Any], files: Mapping[str, bytes] | None = None
    ) -> dict[str, Any]:
        embeds = [{"type": "rich", **embed} for embed in body.get("embeds") or ()]
        attachments = [
            {
                "id": str(next(self._ids)),
                "filename": name,
                "size": len(data),
                "url": f"https://cdn.invalid/attachments/{channel_id}/{name}",
                "proxy_url": f"https://media.invalid/attachments/{channel_id}/{name}",
            }
            for name, data in (files or {}).items()
        ]
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
            "attachments": attachments,
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
        # As Discord answers a bot about itself: its user, and what only the bot may see.
        return self._json(200, {**self.bot_user, "mfa_enabled": False, "flags": 0})

    async def _application(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        status = 200 if self._authorized(request) else 401
        self._record(request, None, None, status, at)
        if status != 200:
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        return self._json(200, self.application)

    async def _command(self, request: web.Request) -> web.Response:
        """Creates the global command, or replaces the one of the same name (as Discord does)."""
        at = time.monotonic()
        body, _ = await self._body(request)
        if not self._authorized(request):
            self._record(request, None, body, 401, at)
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        self._record(request, None, body, 201, at)
        name = body["name"]
        kept = self.commands.get(name, {})
        command = {
            "id": kept.get("id", str(next(self._ids))),
            "application_id": request.match_info["application_id"],
            "version": str(next(self._ids)),
            "type": body.get("type", 1),
            "guild_id": None,
            "default_member_permissions": None,
            **body,
        }
        self.commands[name] = command
        return self._json(201, command)

    async def _interaction_response(self, request: web.Request) -> web.Response:
        """An interaction's first response (POST) or an edit of it (PATCH, the message).
        Interaction tokens stand for authorization: no `Authorization` header is sent."""
        at = time.monotonic()
        body, files = await self._body(request)
        token = request.match_info["token"]
        recorded = self._record(request, None, body, 200, at, files=files)
        self.responses.setdefault(token, []).append(recorded)
        message = self._message(str(next(self._ids)), (body or {}).get("data") or {}, files)
        if request.method == "PATCH":
            return self._json(200, self._message(str(next(self._ids)), body or {}, files))
        if request.query.get("with_response") != "true":
            return web.Response(status=204)
        response_type = int(body["type"])
        # An update of the message a component is on (6, 7) answers a component's press.
        interaction_type = 3 if response_type in (6, 7) else 2
        resource: dict[str, Any] = {"type": response_type}
        if response_type in (4, 7):  # a message now, not one to come
            resource["message"] = message
        return self._json(
            200,
            {
                "interaction": {
                    "id": request.match_info["interaction_id"],
                    "type": interaction_type,
                    "response_message_id": message["id"],
                    "response_message_loading": response_type in (5, 6),
                    "response_message_ephemeral": bool(int(message["flags"]) & 64),
                },
                "resource": resource,
            },
        )

    async def _dm_channel(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        body, _ = await self._body(request)
        if not self._authorized(request):
            self._record(request, None, body, 401, at)
            return self._json(401, {"message": "401: Unauthorized", "code": 0})
        self._record(request, None, body, 200, at)
        user_id = str(body["recipient_id"])
        channel_id = self._dm_channels.setdefault(user_id, str(next(self._ids)))
        recipient = {
            "id": user_id,
            "username": f"user{user_id[-4:]}",
            "global_name": None,
            "discriminator": "0",
            "avatar": None,
        }
        return self._json(
            200,
            {"id": channel_id, "type": 1, "last_message_id": None, "recipients": [recipient]},
        )

    async def _unknown(self, request: web.Request) -> web.Response:
        self._record(request, None, None, 404, time.monotonic())
        return self._json(404, {"message": "404: Not Found", "code": 0})
