"""A PostgreSQL primary and its synchronous standby of our own, or one instance alone.

Each instance has its own data folder, port and socket folder, so the machine's own cluster
(its `pg_ctlcluster` clusters, port 5432) is never read or touched. The servers run as the
`postgres` user (PostgreSQL refuses root); only the postmaster pids of our data folders are
ever signalled.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from pydantic import BaseModel, ConfigDict

from harness.localnodes import state
from harness.localnodes.configuration import STANDBY_NAME, TlsFiles, postgres_settings, postgres_url
from harness.localnodes.host import (
    LocalNodeError,
    chown_to_postgres,
    free_port,
    is_ours,
    kill_ours,
    new_base_dir,
    postgres_command,
    read_pid,
    remove_if_empty,
    run,
    wait_until,
)
from infra.observability.logs import get_logger

__all__ = ["PostgresInstance", "PostgresPair", "PostgresPairSpec", "postgres_bindir"]

log = get_logger("ltm.localnodes")

STATE_PART = "postgres"


def _version(folder: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in folder.name.split(".") if part.isdigit())


def postgres_bindir() -> Path:
    """The newest installed server's programs: Debian's `/usr/lib/postgresql/<major>/bin`,
    else where `pg_ctl` is found."""
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = [folder for folder in debian.iterdir() if (folder / "bin" / "initdb").exists()]
        if versions:
            return max(versions, key=_version) / "bin"
    found = shutil.which("pg_ctl")
    if found is None:
        raise LocalNodeError("PostgreSQL's server is not installed: no initdb or pg_ctl found")
    return Path(found).resolve().parent


class PostgresInstance:
    """One server of ours: its data folder, port and postmaster."""

    def __init__(self, role: str, data_dir: Path, port: int, bindir: Path) -> None:
        self.role = role
        self.data_dir = data_dir
        self.port = port
        self.bindir = bindir

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / f"{self.role}.log"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid when it runs: its command line names our data folder."""
        pid = read_pid(self.data_dir / "postmaster.pid")
        return pid if is_ours(pid, self.data_dir) else None

    @property
    def is_running(self) -> bool:
        return self.pid is not None

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=2"

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(self.conninfo(dbname), autocommit=True)

    def pg_ctl(self, *args: str, timeout: float = 60.0) -> str:
        command: list[str | Path] = [self.bindir / "pg_ctl", "-D", self.data_dir, *args]
        return run(postgres_command(command), timeout=timeout)

    def start(self, timeout: float = 60.0) -> None:
        try:
            self.pg_ctl(
                "-l", str(self.log_file), "-w", "-t", f"{timeout:.0f}", "start", timeout=timeout + 5
            )
        except LocalNodeError as error:
            raise LocalNodeError(f"{error}\n{self.log_tail()}") from None
        log.info("localnodes.postgres_running", role=self.role, port=self.port, pid=self.pid)

    def stop(self) -> None:
        """Fast shutdown (sessions ended, nothing lost), else SIGKILL of our postmaster."""
        if self.is_running:
            try:
                self.pg_ctl("-m", "fast", "-w", "-t", "30", "stop", timeout=35)
            except LocalNodeError as error:
                log.warning("localnodes.postgres_stop_forced", role=self.role, error=str(error))
            kill_ours(read_pid(self.data_dir / "postmaster.pid"), self.data_dir)
        log.info("localnodes.postgres_stopped", role=self.role, port=self.port)

    def kill(self) -> None:
        """SIGKILL of the postmaster, as a crash of the machine it runs on would look."""
        if not kill_ours(read_pid(self.data_dir / "postmaster.pid"), self.data_dir):
            raise LocalNodeError(f"the {self.role} is not running: nothing to kill")
        log.info("localnodes.postgres_killed", role=self.role, port=self.port)

    def configure(self, settings: str) -> None:
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n" + settings)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


class PostgresPairSpec(BaseModel):
    """The pair as the state file records it."""

    model_config = ConfigDict(frozen=True)

    base_dir: Path
    bindir: Path
    primary_port: int
    standby_port: int | None = None
    tls: TlsFiles | None = None


class PostgresPair:
    """A primary and a synchronous standby (`standby1`), or the primary alone.

    The roles are where each instance started: after `promote_standby`, the one called
    `standby` takes the writes. `url()` lists both, so that a libpq client finds the writable
    one either way.
    """

    def __init__(self, spec: PostgresPairSpec) -> None:
        self.spec = spec
        folder = spec.base_dir / "postgres"
        self.primary = PostgresInstance(
            "primary", folder / "primary", spec.primary_port, spec.bindir
        )
        self.standby = (
            PostgresInstance("standby", folder / "standby", spec.standby_port, spec.bindir)
            if spec.standby_port is not None
            else None
        )

    @classmethod
    def plan(
        cls,
        base_dir: Path | None = None,
        *,
        standby: bool = True,
        base_port: int | None = None,
        tls: TlsFiles | None = None,
        bindir: Path | None = None,
    ) -> PostgresPair:
        """Folders and ports (free ones, from `base_port` when given); nothing started yet."""
        base = (base_dir or new_base_dir()).resolve()
        taken: set[int] = set()
        return cls(
            PostgresPairSpec(
                base_dir=base,
                bindir=(bindir or postgres_bindir()).resolve(),
                primary_port=free_port(taken, start=base_port),
                standby_port=free_port(taken, start=base_port) if standby else None,
                tls=tls,
            )
        )

    @classmethod
    def recorded(cls, base_dir: Path) -> PostgresPair | None:
        description = state.recorded(base_dir).get(STATE_PART)
        if description is None:
            return None
        return cls(PostgresPairSpec.model_validate(description["spec"]))

    @property
    def instances(self) -> list[PostgresInstance]:
        return [self.primary] + ([self.standby] if self.standby is not None else [])

    @property
    def folder(self) -> Path:
        return self.spec.base_dir / "postgres"

    def _record(self) -> None:
        state.remember(
            self.spec.base_dir,
            STATE_PART,
            {
                "spec": self.spec.model_dump(mode="json"),
                "pids": {instance.role: instance.pid for instance in self.instances},
            },
        )

    def start(self, timeout: float = 60.0) -> PostgresPair:
        """initdb, the primary, then the standby copied from it; returns once the standby
        confirms commits. A start that fails stops what it started."""
        self._prepare_folder()
        self._record()
        try:
            self._create_primary()
            self.primary.start(timeout)
            if self.standby is not None:
                self._create_standby(self.standby)
                self.standby.start(timeout)
                self.wait_synchronous(timeout)
            self._record()
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def _prepare_folder(self) -> None:
        self.spec.base_dir.mkdir(parents=True, exist_ok=True)
        if self.folder.exists():
            raise LocalNodeError(f"{self.folder} exists: stop what runs there first")
        self.folder.mkdir()
        (self.folder / "sockets").mkdir()
        for path in (self.folder, self.folder / "sockets"):
            chown_to_postgres(path)
        try:
            run(postgres_command(["test", "-w", self.folder]), timeout=10)
        except LocalNodeError:
            raise LocalNodeError(
                f"the postgres user cannot write in {self.folder}: every folder above it must"
                " be searchable by that user; choose a base folder such as /tmp/ltm-cluster"
            ) from None

    def _create_primary(self) -> None:
        # --no-sync: a folder for tests and local runs; the server itself fsyncs every commit.
        initdb: list[str | Path] = [
            self.spec.bindir / "initdb",
            f"--pgdata={self.primary.data_dir}",
            "--auth=trust",
            "--username=postgres",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        run(postgres_command(initdb), timeout=120)
        self.primary.configure(
            postgres_settings(
                port=self.primary.port,
                socket_dir=self.folder / "sockets",
                synchronous_standby=STANDBY_NAME if self.standby is not None else None,
                tls=self.spec.tls is not None,
            )
        )
        if self.spec.tls is not None:
            self._install_tls(self.spec.tls)

    def _install_tls(self, tls: TlsFiles) -> None:
        """Copies the files into the data folder: PostgreSQL wants its key owned by the server's
        user and readable by it alone. The standby's base backup carries them over."""
        for source, name in ((tls.cert, "server.crt"), (tls.key, "server.key"), (tls.ca, "ca.crt")):
            target = self.primary.data_dir / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            chown_to_postgres(target)

    def _create_standby(self, standby: PostgresInstance) -> None:
        # The application name must be in the conninfo that -R writes, else the primary
        # does not recognize its synchronous standby.
        source = (
            f"host=127.0.0.1 port={self.primary.port} user=postgres application_name={STANDBY_NAME}"
        )
        basebackup: list[str | Path] = [
            self.spec.bindir / "pg_basebackup",
            f"--dbname={source}",
            f"--pgdata={standby.data_dir}",
            "--write-recovery-conf",
            "--wal-method=stream",
            "--create-slot",
            f"--slot={STANDBY_NAME}",
        ]
        run(postgres_command(basebackup), timeout=120)
        standby.configure(
            postgres_settings(
                port=standby.port,
                socket_dir=self.folder / "sockets",
                synchronous_standby=None,
                tls=self.spec.tls is not None,
            )
        )

    def sync_state(self) -> str | None:
        """`sync` when the primary waits for the standby's confirmation of each commit."""
        try:
            with self.primary.connect() as connection:
                row = connection.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
        except psycopg.OperationalError:
            return None
        return str(row[0]) if row is not None else None

    def wait_synchronous(self, timeout: float = 60.0) -> None:
        wait_until(
            lambda: self.sync_state() == "sync",
            timeout=timeout,
            what=f"{STANDBY_NAME} to stream synchronously",
        )
        log.info("localnodes.postgres_standby_synchronous", standby=STANDBY_NAME)

    def kill_primary(self) -> None:
        self.primary.kill()

    def promote_standby(self, timeout: float = 60.0) -> None:
        """The standby takes the writes (after the primary is gone: two primaries would
        diverge)."""
        if self.standby is None:
            raise LocalNodeError("this pair has no standby to promote")
        self.standby.pg_ctl("-w", "-t", f"{timeout:.0f}", "promote", timeout=timeout + 5)
        log.info("localnodes.postgres_standby_promoted", port=self.standby.port)

    def url(self, dbname: str = "postgres", params: Mapping[str, str] | None = None) -> str:
        """The libpq URL over both instances: connections go to the one that takes writes."""
        return postgres_url([instance.port for instance in self.instances], dbname, params)

    def stop(self, *, remove: bool = True) -> None:
        """Stops both (gracefully, else by SIGKILL of our postmaster); with `remove`, deletes
        their folders and the record of them, and the base folder if nothing else is left."""
        for instance in reversed(self.instances):
            instance.stop()
        if remove:
            shutil.rmtree(self.folder, ignore_errors=True)
            state.forget(self.spec.base_dir, STATE_PART)
            remove_if_empty(self.spec.base_dir)
        else:
            self._record()

    def describe(self) -> dict[str, Any]:
        return {
            "instances": [
                {
                    "role": instance.role,
                    "pid": instance.pid,
                    "port": instance.port,
                    "data_dir": str(instance.data_dir),
                }
                for instance in self.instances
            ],
            "url": self.url(),
        }
