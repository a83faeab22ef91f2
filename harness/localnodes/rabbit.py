"""RabbitMQ nodes of our own on this machine, alone or joined into a cluster.

Each node runs `rabbitmq-server` from RabbitMQ's own folder (not the distribution's wrapper,
which switches to the `rabbitmq` user and its cookie), with every path, port and name set
through the environment, so that nothing of the machine's own broker is read or touched. The
nodes register with the machine's epmd, which is never stopped. Every `rabbitmqctl` call names
its node (`-n`) and carries the node's HOME, hence our cookie.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from harness.localnodes import state
from harness.localnodes.configuration import (
    TlsFiles,
    amqp_url,
    enabled_plugins,
    rabbit_config,
    rabbit_node_name,
)
from harness.localnodes.host import (
    LocalNodeError,
    free_port,
    new_base_dir,
    remove_if_empty,
    run,
    wait_until,
)
from harness.localnodes.rabbit_node import RabbitNode, RabbitNodeSpec, rabbitmq_bindir
from harness.localnodes.readings import (
    QuorumMember,
    connection_nodes,
    epmd_names,
    quorum_members,
    running_nodes,
)
from infra.observability.logs import get_logger

__all__ = [
    "RabbitCluster",
    "RabbitClusterSpec",
    "RabbitNode",
    "RabbitNodeSpec",
    "rabbitmq_bindir",
]

log = get_logger("ltm.localnodes")

T = TypeVar("T")

STATE_PART = "rabbit"
GUEST = "guest"


class RabbitClusterSpec(BaseModel):
    """A cluster of our nodes as the state file records it."""

    model_config = ConfigDict(frozen=True)

    base_dir: Path
    bindir: Path
    nodes: tuple[RabbitNodeSpec, ...]
    tls: TlsFiles | None = None
    require_client_cert: bool = False
    management: bool = False
    user: str = GUEST
    password: str = GUEST
    vhost: str = "/"


def _in_parallel(jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Runs blocking jobs in threads (each mostly waits on a CLI call); the first error wins."""
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futures = [pool.submit(job) for job in jobs]
        return [future.result() for future in futures]


class RabbitCluster:
    """N nodes of ours (1 to 3 usually) joined into one cluster. Built by `plan`, or from a
    state file by `recorded` (to stop from another process what one process started)."""

    def __init__(self, spec: RabbitClusterSpec) -> None:
        self.spec = spec
        self.nodes = [RabbitNode(node, spec.bindir) for node in spec.nodes]

    @classmethod
    def plan(
        cls,
        base_dir: Path | None = None,
        *,
        prefix: str = "ltmc",
        size: int = 3,
        base_port: int | None = None,
        tls: TlsFiles | None = None,
        require_client_cert: bool = False,
        management: bool = False,
        user: str = GUEST,
        password: str = GUEST,
        vhost: str = "/",
        bindir: Path | None = None,
    ) -> RabbitCluster:
        """Names, folders and ports for `size` nodes; nothing is started yet.

        Ports are free ones, counted up from `base_port` when given. The `prefix` keeps the
        node names of different users of this machine apart (`ltmc1@localhost`, …).
        """
        if not 1 <= size <= 9:
            raise ValueError(f"a cluster of {size} nodes is not supported (1 to 9)")
        base = (base_dir or new_base_dir()).resolve()
        taken: set[int] = set()

        def port() -> int:
            return free_port(taken, start=base_port)

        nodes = []
        for index in range(1, size + 1):
            name = rabbit_node_name(prefix, index)
            nodes.append(
                RabbitNodeSpec(
                    name=name,
                    folder=base / "rabbit" / name.partition("@")[0],
                    amqp_port=port(),
                    dist_port=port(),
                    tls_port=port() if tls is not None else None,
                    management_port=port() if management else None,
                )
            )
        return cls(
            RabbitClusterSpec(
                base_dir=base,
                bindir=(bindir or rabbitmq_bindir()).resolve(),
                nodes=tuple(nodes),
                tls=tls,
                require_client_cert=require_client_cert,
                management=management,
                user=user,
                password=password,
                vhost=vhost,
            )
        )

    @classmethod
    def recorded(cls, base_dir: Path) -> RabbitCluster | None:
        description = state.recorded(base_dir).get(STATE_PART)
        if description is None:
            return None
        return cls(RabbitClusterSpec.model_validate(description["spec"]))

    @property
    def first(self) -> RabbitNode:
        return self.nodes[0]

    def node(self, name: str) -> RabbitNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise LocalNodeError(f"{name} is not a node of this cluster")

    def _record(self) -> None:
        # The pids are for a reader of the file: stopping goes by the pid files, not by these.
        state.remember(
            self.spec.base_dir,
            STATE_PART,
            {
                "spec": self.spec.model_dump(mode="json"),
                "pids": {node.name: node.pid for node in self.nodes},
            },
        )

    def start(self, timeout: float = 120.0) -> RabbitCluster:
        """Starts every node at once, joins the others to the first, adds the user and virtual
        host if asked, and returns once every node runs in the cluster. A start that fails
        stops what it started."""
        taken = self._names_taken()
        if taken:
            raise LocalNodeError(
                f"node names already in use on this machine: {', '.join(sorted(taken))}"
                " (another cluster runs; choose another prefix, or stop it first)"
            )
        self.spec.base_dir.mkdir(parents=True, exist_ok=True)
        self._record()
        cookie = secrets.token_hex(20).upper()
        try:
            for node in self.nodes:
                node.prepare(
                    cookie=cookie,
                    config=rabbit_config(
                        tls_port=node.spec.tls_port,
                        tls=self.spec.tls,
                        require_client_cert=self.spec.require_client_cert,
                        management_port=node.spec.management_port,
                    ),
                    plugins=enabled_plugins(management=self.spec.management),
                )
                node.launch()
            _in_parallel([partial(node.wait_started, timeout) for node in self.nodes])
            self._record()
            for node in self.nodes[1:]:
                self._join(node)
            self._add_user_and_vhost()
            self.wait_healthy(timeout)
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def _names_taken(self) -> set[str]:
        """Our node names that epmd already knows: starting them would fail, or worse, the CLI
        would reach someone else's node of the same name."""
        epmd = shutil.which("epmd")
        if epmd is None:
            return set()
        try:
            listing = run([epmd, "-names"], timeout=10)
        except LocalNodeError:
            return set()  # no epmd yet: the first node starts one
        registered = epmd_names(listing)
        return {node.name for node in self.nodes if node.name.partition("@")[0] in registered}

    def _join(self, node: RabbitNode) -> None:
        node.ctl("stop_app")
        node.ctl("join_cluster", self.first.name)
        node.ctl("start_app")
        log.info("localnodes.rabbit_joined", node=node.name, cluster=self.first.name)

    def _add_user_and_vhost(self) -> None:
        # The guest user may connect from 127.0.0.1 only: enough on this machine.
        ctl = self.first.ctl
        if self.spec.vhost != "/":
            ctl("add_vhost", self.spec.vhost)
        if self.spec.user != GUEST:
            ctl("add_user", self.spec.user, self.spec.password)
            ctl("set_user_tags", self.spec.user, "administrator")
        if self.spec.vhost != "/" or self.spec.user != GUEST:
            ctl("set_permissions", "-p", self.spec.vhost, self.spec.user, ".*", ".*", ".*")

    def running_nodes(self) -> set[str]:
        """The cluster's running nodes as the first of ours that answers sees them."""
        for node in self.nodes:
            if node.is_running:
                try:
                    return running_nodes(node.ctl("cluster_status", "--formatter", "json"))
                except LocalNodeError:
                    continue
        return set()

    def wait_healthy(self, timeout: float = 90.0) -> None:
        """Until every node runs, the broker application included, and sees all the others."""
        names = {node.name for node in self.nodes}

        def healthy() -> bool:
            if not all(node.is_running for node in self.nodes):
                return False
            try:
                for node in self.nodes:
                    if running_nodes(node.ctl("cluster_status", "--formatter", "json")) != names:
                        return False
            except LocalNodeError:
                return False
            return True

        wait_until(healthy, timeout=timeout, interval=0.5, what=f"cluster {sorted(names)}")

    def kill(self, name: str) -> None:
        self.node(name).kill()

    def restart(self, name: str, timeout: float = 90.0) -> None:
        """Starts a stopped or killed node with its own settings: it rejoins by itself."""
        node = self.node(name)
        node.launch()
        node.wait_started(timeout)
        self._record()
        self.wait_healthy(timeout)

    def stop(self, *, remove: bool = True) -> None:
        """Stops every node (gracefully, else by SIGKILL of our pid); with `remove`, deletes
        their folders and the record of them, and the base folder if nothing else is left."""
        _in_parallel([node.stop for node in self.nodes])
        if remove:
            for node in self.nodes:
                shutil.rmtree(node.spec.folder, ignore_errors=True)
            remove_if_empty(self.spec.base_dir / "rabbit")
            state.forget(self.spec.base_dir, STATE_PART)
            remove_if_empty(self.spec.base_dir)
        else:
            self._record()

    def amqp_url(self, name: str, *, tls: bool = False) -> str:
        """A node's URL with the cluster's user and virtual host; `tls` for its TLS listener
        (the cluster must have been planned with `tls`)."""
        spec = self.node(name).spec
        port = spec.tls_port if tls else spec.amqp_port
        if port is None:
            raise LocalNodeError("this cluster has no TLS listener")
        return amqp_url(
            port,
            user=self.spec.user,
            password=self.spec.password,
            vhost=self.spec.vhost,
            tls=tls,
        )

    def amqp_urls(self, *, tls: bool = False) -> list[str]:
        """One URL a node, in node order."""
        return [self.amqp_url(node.name, tls=tls) for node in self.nodes]

    def quorum_members(self, queue: str, vhost: str | None = None) -> list[QuorumMember]:
        """The replicas of a quorum queue and their Raft states, asked of a running node."""
        errors = []
        for node in self.nodes:
            if not node.is_running:
                continue
            try:
                listing = node.tool(
                    "rabbitmq-queues",
                    "quorum_status",
                    queue,
                    "-p",
                    vhost or self.spec.vhost,
                    "--formatter",
                    "json",
                )
            except LocalNodeError as error:
                errors.append(str(error))
                continue
            return quorum_members(listing)
        raise LocalNodeError(f"no node answered for quorum queue {queue!r}: {errors}")

    def connection_nodes(self, connection_name: str, vhost: str | None = None) -> list[str]:
        """The nodes the client connections named `connection_name` are on (a process's
        `connection_name` client property), asked of a running node."""
        for node in self.nodes:
            if not node.is_running:
                continue
            with contextlib.suppress(LocalNodeError):
                listing = node.ctl(
                    "list_connections", "-p", vhost or self.spec.vhost, "pid", "client_properties"
                )
                return connection_nodes(listing, connection_name)
        raise LocalNodeError(f"no node answered for connections named {connection_name!r}")

    def queue_listing(self, vhost: str | None = None) -> str:
        """Every queue of the vhost with its ready and unacknowledged messages and its
        consumers, as `rabbitmqctl list_queues` prints them (for a failing test to show)."""
        for node in self.nodes:
            if not node.is_running:
                continue
            with contextlib.suppress(LocalNodeError):
                return node.ctl(
                    "list_queues", "-p", vhost or self.spec.vhost, "name", "type", "state",
                    "leader", "online", "messages_ready", "messages_unacknowledged", "consumers",
                )  # fmt: skip
        return "(no node answered)"

    def quorum_leader(self, queue: str, vhost: str | None = None) -> str | None:
        """The node that leads a quorum queue; None while no member says it leads."""
        leaders = [member.node for member in self.quorum_members(queue, vhost) if member.leads]
        return leaders[0] if len(leaders) == 1 else None

    def describe(self) -> dict[str, Any]:
        """Names, pids, ports and URLs, for `status` and for the operator."""
        return {
            "nodes": [
                {
                    "name": node.name,
                    "pid": node.pid,
                    "amqp_port": node.spec.amqp_port,
                    "dist_port": node.spec.dist_port,
                    "tls_port": node.spec.tls_port,
                    "management_port": node.spec.management_port,
                    "folder": str(node.spec.folder),
                }
                for node in self.nodes
            ],
            "amqp_urls": self.amqp_urls(),
        }
