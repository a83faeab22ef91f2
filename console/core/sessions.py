"""Who is logged in, and how hard one may try: sessions, CSRF tokens, the login throttle.

Sessions live in the console's memory (a restart logs everyone out). The cookie carries a
random token; the console keeps only its SHA-256, so that a memory dump shows no usable one.
Every session has a CSRF token of its own that every change must present.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "ACTOR_PREFIX",
    "LoginThrottle",
    "Session",
    "Sessions",
    "actor_of",
    "csrf_matches",
    "operator_name",
]

ACTOR_PREFIX: Final = "console:"
# What a revision's actor and the audit stream may carry after `console:`: a short name, no
# spaces or markup, so that it reads the same in a table, a log line and a URL.
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")

Clock = Callable[[], float]


def operator_name(text: str) -> str | None:
    """The name typed at login, if it is one: 1 to 40 of letters, digits, `.`, `_`, `-`,
    starting with a letter or digit."""
    name = text.strip()
    return name if _NAME.fullmatch(name) else None


def actor_of(name: str) -> str:
    """How revisions and the audit stream name an operator of the console."""
    return f"{ACTOR_PREFIX}{name}"


def csrf_matches(session: Session, presented: str | None) -> bool:
    """In constant time: a token compared byte by byte would tell how much of it was right."""
    if not presented:
        return False
    return hmac.compare_digest(session.csrf_token.encode(), presented.encode())


@dataclass(frozen=True, slots=True)
class Session:
    name: str
    csrf_token: str
    expires_at: float

    @property
    def actor(self) -> str:
        return actor_of(self.name)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Sessions:
    """Open sessions by the digest of their cookie token; each ends `ttl_s` after its login."""

    ttl_s: float
    clock: Clock = time.monotonic
    _open: dict[str, Session] = field(default_factory=dict)

    def open(self, name: str) -> tuple[str, Session]:
        """A new session for `name`: the token for the cookie, and the session."""
        self._forget_expired()
        token = secrets.token_urlsafe(32)
        session = Session(name, secrets.token_urlsafe(32), self.clock() + self.ttl_s)
        self._open[_digest(token)] = session
        return token, session

    def find(self, token: str | None) -> Session | None:
        if not token:
            return None
        key = _digest(token)
        session = self._open.get(key)
        if session is not None and session.expires_at <= self.clock():
            del self._open[key]
            return None
        return session

    def close(self, token: str | None) -> None:
        if token:
            self._open.pop(_digest(token), None)

    def __len__(self) -> int:
        return len(self._open)

    def _forget_expired(self) -> None:
        now = self.clock()
        for key in [key for key, session in self._open.items() if session.expires_at <= now]:
            del self._open[key]


@dataclass
class LoginThrottle:
    """Failed logins: at most `per_address` from one address and `overall` from everywhere
    within `window_s`; past that, logins wait until the oldest failure leaves the window.

    The overall bound holds against guesses spread over many addresses; a success clears its
    address's failures (not the overall count).
    """

    per_address: int = 5
    overall: int = 50
    window_s: float = 300.0
    clock: Clock = time.monotonic
    _by_address: dict[str, deque[float]] = field(default_factory=dict)
    _all: deque[float] = field(default_factory=deque)

    def retry_after(self, address: str) -> float | None:
        """Seconds to wait before `address` may try again; None when it may now."""
        now = self.clock()
        self._expire(now)
        waits = [
            failures[0] + self.window_s - now
            for failures, limit in (
                (self._by_address.get(address, deque()), self.per_address),
                (self._all, self.overall),
            )
            if len(failures) >= limit
        ]
        return max(waits) if waits else None

    def failed(self, address: str) -> None:
        now = self.clock()
        self._by_address.setdefault(address, deque()).append(now)
        self._all.append(now)

    def succeeded(self, address: str) -> None:
        self._by_address.pop(address, None)

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        while self._all and self._all[0] <= horizon:
            self._all.popleft()
        for address in list(self._by_address):
            failures = self._by_address[address]
            while failures and failures[0] <= horizon:
                failures.popleft()
            if not failures:
                del self._by_address[address]
