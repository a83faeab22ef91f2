"""What every request of the console shares: settings, sessions, the broker link, the
database engine, the overview's history."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from console.adapters.broker import BrokerLink
from console.adapters.data_requests import DataRequestRecords
from console.adapters.memories import MemoryFinder
from console.core.sessions import LoginThrottle, Session, Sessions
from console.overview import Overview
from contracts import Topology
from infra.settings import Settings

__all__ = ["STATE", "Console", "Notice", "session_of", "set_session"]


@dataclass(frozen=True, slots=True)
class Notice:
    """A line the next page shows once: what an action did, or why it did not."""

    kind: Literal["done", "problem"]
    text: str


@dataclass
class Console:
    settings: Settings
    password_hash: str
    engine: AsyncEngine
    broker: BrokerLink
    overview: Overview
    sessions: Sessions
    throttle: LoginThrottle = field(default_factory=LoginThrottle)
    # Notices per session, by its CSRF token (one per session, never sent to another).
    notices: dict[str, list[Notice]] = field(default_factory=dict)

    @property
    def topology(self) -> Topology:
        return self.broker.topology

    @property
    def finder(self) -> MemoryFinder:
        return MemoryFinder(self.engine)

    @property
    def data_requests(self) -> DataRequestRecords:
        return DataRequestRecords(self.engine)

    def notify(self, session: Session, kind: Literal["done", "problem"], text: str) -> None:
        self.notices.setdefault(session.csrf_token, []).append(Notice(kind, text))

    def take_notices(self, session: Session) -> list[Notice]:
        return self.notices.pop(session.csrf_token, [])


STATE: Final = web.AppKey("console", Console)
# The request's session, put there by the login middleware.
_SESSION: Final = web.RequestKey("console.session", Session)


def session_of(request: web.Request) -> Session:
    """The session of a request past the login middleware (every page but the login's)."""
    if _SESSION not in request:
        raise AssertionError("only pages behind the login have a session")
    return request[_SESSION]


def set_session(request: web.Request, session: Session) -> None:
    request[_SESSION] = session
