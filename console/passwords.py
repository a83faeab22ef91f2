"""The operators' password: an Argon2id hash (argon2-cffi's defaults, RFC 9106's second
recommended profile) in `LTM_CONSOLE_PASSWORD_HASH`, made by `ltm console hash-password`."""

from __future__ import annotations

import asyncio
import getpass
import sys
from typing import TextIO

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from operators.display import ExitCode

__all__ = [
    "MIN_LENGTH",
    "BadPasswordHash",
    "check_hash",
    "hash_password",
    "print_password_hash",
    "verify_password",
]

_HASHER = PasswordHasher()
MIN_LENGTH = 12
# Each check takes 64 MiB for a moment: a burst of logins must not take the host's memory.
_CHECKS_AT_ONCE = asyncio.Semaphore(2)


class BadPasswordHash(ValueError):
    """`LTM_CONSOLE_PASSWORD_HASH` is not a hash this console can check against."""


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def check_hash(password_hash: str) -> None:
    """Raises `BadPasswordHash` unless it is an Argon2 hash (checked at start, not at the
    first login)."""
    try:
        _HASHER.check_needs_rehash(password_hash)
    except (InvalidHashError, ValueError) as error:
        raise BadPasswordHash(
            "LTM_CONSOLE_PASSWORD_HASH is not an Argon2 hash: make one with "
            "`ltm console hash-password`"
        ) from error


async def verify_password(password_hash: str, password: str) -> bool:
    """Off the event loop: a slow hash is meant to take tens of milliseconds of CPU."""

    def verify() -> bool:
        try:
            return _HASHER.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False

    async with _CHECKS_AT_ONCE:
        return await asyncio.to_thread(verify)


def print_password_hash(
    stdin: TextIO | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """`ltm console hash-password`: asks twice on a terminal, reads one line otherwise (a
    pipe, a script), prints the hash for `LTM_CONSOLE_PASSWORD_HASH`."""
    stdin, out, err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
    if stdin.isatty():
        password = getpass.getpass("console password: ")
        if getpass.getpass("again: ") != password:
            print("ltm console hash-password: the two passwords differ; nothing printed", file=err)
            return ExitCode.USAGE
    else:
        password = stdin.readline().removesuffix("\n").removesuffix("\r")
    if len(password) < MIN_LENGTH:
        print(
            f"ltm console hash-password: a password of at least {MIN_LENGTH} characters, "
            "please; nothing printed",
            file=err,
        )
        return ExitCode.USAGE
    print(hash_password(password), file=out)
    return ExitCode.OK
