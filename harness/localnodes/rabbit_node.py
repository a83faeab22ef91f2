"""One RabbitMQ node of our own: its folder, environment, start, stop and CLI calls.

The node runs `rabbitmq-server` from RabbitMQ's own folder with every path, port and name set
through the environment; every `rabbitmqctl` call names its node (`-n`) and carries the node's
HOME, hence our cookie.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.localnodes.host import LocalNodeError, is_ours, kill_ours, read_pid, run, wait_until
from infra.observability.logs import get_logger

__all__ = ["RabbitNode", "RabbitNodeSpec", "rabbitmq_bindir"]

log = get_logger("ltm.localnodes")


def rabbitmq_bindir() -> Path:
    """RabbitMQ's own scripts: Debian's `/usr/lib/rabbitmq/bin`, else where `rabbitmq-server`
    is found (a generic install, whose scripts are the real ones)."""
    debian = Path("/usr/lib/rabbitmq/bin")
    if (debian / "rabbitmq-server").exists():
        return debian
    found = shutil.which("rabbitmq-server")
    if found is None:
        raise LocalNodeError("RabbitMQ is not installed: no rabbitmq-server found")
    return Path(found).resolve().parent


class RabbitNodeSpec(BaseModel):
    """One node: its name, ports and folder; all that is needed to start or stop it again."""

    model_config = ConfigDict(frozen=True)

    name: str
    folder: Path
    amqp_port: int
    dist_port: int
    tls_port: int | None = None
    management_port: int | None = None


class RabbitNode:
    """One node of ours: started as a child process, waited on, stopped or killed by pid."""

    def __init__(self, spec: RabbitNodeSpec, bindir: Path) -> None:
        self.spec = spec
        self.bindir = bindir
        self._launcher: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def home(self) -> Path:
        # The beam's command line names it (`-home`): how a pid is recognized as this node's.
        return self.spec.folder / "home"

    @property
    def pid_file(self) -> Path:
        return self.spec.folder / "rabbitmq.pid"

    @property
    def log_file(self) -> Path:
        return self.spec.folder / "log" / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        """The Erlang VM's pid when it runs (not the pid of the shell that launched it)."""
        pid = read_pid(self.pid_file)
        return pid if is_ours(pid, self.home) else None

    @property
    def is_running(self) -> bool:
        return self.pid is not None

    def env(self) -> dict[str, str]:
        """The environment of the node and of every CLI call to it."""
        folder = self.spec.folder
        inherited = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("RABBITMQ_") and key not in ("ERL_FLAGS", "ERL_AFLAGS")
        }
        return inherited | {
            "HOME": str(self.home),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.spec.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.spec.dist_port),
            "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(folder / "log"),
            "RABBITMQ_CONFIG_FILE": str(folder / "rabbitmq.conf"),
            # Never the machine's: its conf.d, advanced.config and rabbitmq-env.conf (which
            # names the node rabbit@localhost) are replaced by files of ours, absent or empty.
            "RABBITMQ_CONFIG_FILES": str(folder / "conf.d"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(folder / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(folder / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.pid_file),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def prepare(self, *, cookie: str, config: str, plugins: str) -> None:
        """The node's folder, its configuration and the cluster's cookie (mode 400)."""
        for folder in (self.home, self.spec.folder / "mnesia", self.spec.folder / "log"):
            folder.mkdir(parents=True, exist_ok=True)
        (self.spec.folder / "rabbitmq.conf").write_text(config)
        (self.spec.folder / "enabled_plugins").write_text(plugins)
        (self.spec.folder / "rabbitmq-env.conf").write_text("")
        cookie_file = self.home / ".erlang.cookie"
        if not cookie_file.exists():
            descriptor = os.open(cookie_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(cookie)

    def launch(self) -> None:
        """Starts the node in its own session (a Ctrl-C in the terminal does not reach it);
        `wait_started` says when it is up."""
        if self.is_running:
            raise LocalNodeError(f"{self.name} is already running (pid {self.pid})")
        self.reap()
        self.pid_file.unlink(missing_ok=True)
        with (self.spec.folder / "server.out").open("ab") as output:
            self._launcher = subprocess.Popen(
                [str(self.bindir / "rabbitmq-server")],
                env=self.env(),
                cwd=self.spec.folder,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.info("localnodes.rabbit_launched", node=self.name, amqp_port=self.spec.amqp_port)

    def wait_started(self, timeout: float = 90.0) -> None:
        """Until the broker application runs; fails at once if the node's launcher exits."""

        def pid_written() -> bool:
            if self._launcher is not None and self._launcher.poll() is not None:
                raise LocalNodeError(
                    f"{self.name} exited with {self._launcher.returncode} while starting:\n"
                    + self.log_tail()
                )
            return read_pid(self.pid_file) is not None

        try:
            wait_until(pid_written, timeout=timeout, what=f"{self.name}'s pid file")
            # `wait` follows the pid: it fails as soon as the VM is gone, instead of timing out.
            self.ctl("wait", str(self.pid_file), "--timeout", f"{timeout:g}", timeout=timeout + 5)
        except LocalNodeError as error:
            raise LocalNodeError(f"{error}\n{self.log_tail()}") from None
        log.info("localnodes.rabbit_running", node=self.name, pid=self.pid)

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        return self.tool("rabbitmqctl", *args, timeout=timeout)

    def tool(self, script: str, *args: str, timeout: float = 60.0) -> str:
        """`rabbitmqctl`, `rabbitmq-queues`, … always with `-n` this node and its cookie."""
        return run(
            [self.bindir / script, "-n", self.name, "-q", *args], env=self.env(), timeout=timeout
        )

    def stop(self, timeout: float = 60.0) -> None:
        """Graceful `rabbitmqctl stop`, then SIGKILL of our pid if the node is still there."""
        if self.is_running:
            try:
                self.ctl("stop", str(self.pid_file), timeout=timeout)
            except LocalNodeError as error:
                log.warning("localnodes.rabbit_stop_forced", node=self.name, error=str(error))
            kill_ours(read_pid(self.pid_file), self.home)
        self.reap()
        log.info("localnodes.rabbit_stopped", node=self.name)

    def kill(self) -> None:
        """SIGKILL of the Erlang VM, as a crash would: no goodbye to the other nodes."""
        if not kill_ours(read_pid(self.pid_file), self.home):
            raise LocalNodeError(f"{self.name} is not running: nothing to kill")
        self.reap()
        log.info("localnodes.rabbit_killed", node=self.name)

    def reap(self) -> None:
        """Collects the launching shell once the VM is gone, so that no zombie stays behind."""
        if self._launcher is not None:
            try:
                self._launcher.wait(timeout=10)
            except subprocess.TimeoutExpired:
                return
            self._launcher = None

    def log_tail(self, lines: int = 30) -> str:
        texts = []
        for path in (self.spec.folder / "server.out", self.log_file):
            if path.exists():
                texts.append("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts)
