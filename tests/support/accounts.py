"""The broker accounts of docs/security.md, made for one test run on the machine's broker.

`ltm broker-definitions` writes the definitions (a virtual host of the run's own, three users
named for the run, their permissions, the topology) and `rabbitmqctl import_definitions`
loads them. Users are global to a broker: they are named for the run and deleted afterwards,
with the virtual host; guest and every other user or virtual host stay untouched.
"""

from __future__ import annotations

import io
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from contracts import Topology
from harness.services import rabbitmqctl
from infra.messaging.accounts import Role
from infra.settings import Settings
from ltm.commands.setup import print_definitions

__all__ = ["BrokerAccounts", "broker_accounts"]


@dataclass(frozen=True)
class BrokerAccounts:
    """One settings per role, each logging in as that role's user in the run's virtual host."""

    vhost: str
    users: dict[Role, str]
    settings: dict[Role, Settings]
    definitions: Path

    @property
    def topology(self) -> Topology:
        return Topology(self.settings[Role.WORKER].amqp_prefix)

    def url(self, role: Role) -> str:
        return self.settings[role].amqp_url


@contextmanager
def broker_accounts(
    base: Settings, folder: Path, *, label: str = "acc"
) -> Iterator[BrokerAccounts]:
    """Accounts of a virtual host of their own on the broker of `base.amqp_url`."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("importing definitions needs rabbitmqctl on this machine")
    run = uuid.uuid4().hex[:8]
    vhost = f"ltm-{label}-{run}"
    users = {role: f"ltm-{role.value}-{label}-{run}" for role in Role}
    passwords = {role: secrets.token_urlsafe(16) for role in Role}
    configured = base.model_copy(
        update={
            "amqp_prefix": f"ltm{label}{run}",
            "broker_worker_user": users[Role.WORKER],
            "broker_bot_user": users[Role.BOT],
            "broker_operator_user": users[Role.OPERATOR],
            "broker_worker_password": SecretStr(passwords[Role.WORKER]),
            "broker_bot_password": SecretStr(passwords[Role.BOT]),
            "broker_operator_password": SecretStr(passwords[Role.OPERATOR]),
        }
    )
    document = io.StringIO()
    assert print_definitions(configured, vhost, out=document) == 0
    definitions = folder / f"definitions-{run}.json"
    definitions.write_text(document.getvalue())
    with ExitStack() as cleanup:
        # Registered first, run last: whatever the import got to create goes.
        cleanup.callback(_forget, vhost, list(users.values()))
        rabbitmqctl("import_definitions", str(_readable_copy(definitions, cleanup)))
        _until_imported(vhost, set(users.values()))
        yield BrokerAccounts(
            vhost=vhost,
            users=users,
            settings={
                role: configured.model_copy(
                    update={"amqp_url": _url(base.amqp_url, users[role], passwords[role], vhost)}
                )
                for role in Role
            },
            definitions=definitions,
        )


def _until_imported(vhost: str, users: set[str], timeout: float = 30.0) -> None:
    """The broker may finish an import after the command returns: until every user has its
    permissions in the virtual host."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            listed = rabbitmqctl("list_permissions", "-p", vhost).stdout
        except subprocess.CalledProcessError:
            listed = ""  # the virtual host is not there yet
        if users <= {line.split("\t")[0] for line in listed.splitlines()}:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the definitions of {vhost} were not imported in {timeout} s")
        time.sleep(0.1)


def _readable_copy(definitions: Path, cleanup: ExitStack) -> Path:
    """A copy the broker's own user can read: `rabbitmqctl` switches to it, and our temporary
    folders are ours alone (its `-` for stdin does not work in 3.10). Hashes only, no secret."""
    folder = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="ltm-definitions-")))
    folder.chmod(0o755)
    copy = folder / definitions.name
    copy.write_bytes(definitions.read_bytes())
    copy.chmod(0o644)
    return copy


def _url(base: str, user: str, password: str, vhost: str) -> str:
    parts = urllib.parse.urlsplit(base)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit(
        parts._replace(netloc=netloc, path="/" + urllib.parse.quote(vhost, safe=""))
    )


def _forget(vhost: str, users: list[str]) -> None:
    # Each may not have been created, when the import failed halfway.
    for user in users:
        with suppress(subprocess.CalledProcessError):
            rabbitmqctl("delete_user", user)
    with suppress(subprocess.CalledProcessError):
        rabbitmqctl("delete_vhost", vhost)
