"""Every setting of every process, read from the environment (docs/contract.md, "Settings").

Each secret may instead come from a file named by `<VARIABLE>_FILE` (`LTM_DATABASE_URL_FILE`,
`DISCORD_TOKEN_FILE`, …), the convention of Docker secrets: the file's content, trailing
newline dropped.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import Field, SecretStr, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from contracts import DEFAULT_PREFIX, Topology
from infra.redaction import mask_passwords

__all__ = [
    "SECRET_SETTINGS",
    "Settings",
    "SettingsError",
    "broker_urls",
    "broker_user",
    "to_sqlalchemy_url",
]

ENV_PREFIX: Final = "LTM_"

# The settings that may come from a file (`<VARIABLE>_FILE`): those that hold a password.
SECRET_SETTINGS: Final = frozenset(
    {
        "database_url",
        "amqp_url",
        "discord_token",
        "broker_worker_password",
        "broker_bot_password",
        "broker_operator_password",
    }
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    database_url: str = "postgresql://localhost/ltm"
    # One URL, or one per node of a cluster separated by commas (`amqp.BrokerNodes`).
    amqp_url: str = "amqp://guest:guest@localhost:5672/"
    # `amqps://` URLs: the CA the broker's certificate is checked against (else the system's),
    # and a client certificate for brokers that ask for one.
    amqp_ca_file: Path | None = None
    amqp_cert_file: Path | None = None
    amqp_key_file: Path | None = None
    amqp_prefix: str = DEFAULT_PREFIX
    # Replicas of every quorum queue and of the audit stream, on a cluster; unset, the broker's
    # default (docs/operations.md, "Running on a cluster"). The same in every process.
    amqp_replicas: int | None = Field(default=None, ge=1)
    max_memory_length: int = Field(default=1000, ge=1)
    # How many memories the create tool lets a scope hold: a server's of one persona lineage,
    # or a person's of one lineage and the global one (lineage 0) together.
    max_server_memories: int = Field(default=25, ge=1)
    max_personal_memories: int = Field(default=25, ge=1)
    shard_count: int = Field(default=1, ge=1)
    db_retry_seconds: float = Field(default=10.0, ge=0)
    # A worker's transactions hold row locks for milliseconds: a longer wait is a lock held
    # from outside (an open session), which must fail one call, not stall every call.
    db_lock_timeout_s: float = Field(default=2.0, gt=0)
    reply_ttl_s: int = Field(default=900, ge=1)
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    # Where /metrics, /healthz and /readyz listen: this host only unless asked (a container
    # sets 0.0.0.0 for its scraper and its health check to reach them).
    metrics_host: str = "127.0.0.1"

    # Least privilege (README, "Security"): the broker accounts of each role, for
    # `ltm broker-definitions`, and the accounts whose tool calls the worker takes.
    broker_worker_user: str = "ltm-worker"
    broker_bot_user: str = "ltm-bot"
    broker_operator_user: str = "ltm-operator"
    broker_worker_password: SecretStr | None = None
    broker_bot_password: SecretStr | None = None
    broker_operator_password: SecretStr | None = None
    # Unset: every publisher is accepted (and the worker says so at start).
    trusted_publishers: Annotated[frozenset[str] | None, NoDecode] = None
    # A tool call's body larger than this is dead-lettered without being parsed.
    max_message_bytes: int = Field(default=262_144, ge=1)

    # Beyond the contract: how hard one worker process works.
    prefetch: int = Field(default=256, ge=1)
    db_pool_size: int = Field(default=8, ge=1)
    # Calls that arrive together share a transaction; this many transactions run at once.
    # One at a time lets calls gather behind it, which is what makes batches under load
    # (measured: 1 → ~500 calls/s, 2 → ~400, the database being cheaper per call in bulk).
    max_batch: int = Field(default=64, ge=1)
    batch_concurrency: int = Field(default=1, ge=1)
    shutdown_grace_s: float = Field(default=20.0, ge=0)
    outbox_sweep_interval_s: float = Field(default=2.0, gt=0)
    outbox_retention_s: float = Field(default=3600.0, ge=0)
    log_format: str = Field(default="auto", pattern="^(auto|json|console)$")
    log_level: str = "INFO"

    # Gateway (no LTM_ prefix: these are the bot's own names).
    discord_token: SecretStr | None = Field(default=None, validation_alias="DISCORD_TOKEN")
    discord_api_url: str | None = Field(default=None, validation_alias="DISCORD_API_URL")
    persona_cache_ttl_s: float = 600.0
    # A port of its own: `make run` and most hosts run a worker and a gateway side by side.
    gateway_metrics_port: int = Field(default=9465, ge=0, le=65535)
    user_cache_ttl_s: float = 1800.0

    @field_validator("trusted_publishers", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        names = frozenset(name.strip() for name in value.split(",") if name.strip())
        return names or None  # blank is unset, not "trust nobody"

    @field_validator("amqp_url")
    @classmethod
    def _broker_urls(cls, value: str) -> str:
        broker_urls(value)  # refuses what cannot be a list of one broker's nodes
        return value

    @property
    def amqp_urls(self) -> tuple[str, ...]:
        """One URL per broker node, in the order given."""
        return broker_urls(self.amqp_url)

    @property
    def amqp_user(self) -> str | None:
        """The broker user `amqp_url` logs in as (`broker_user`)."""
        return broker_user(self.amqp_url)

    @property
    def topology(self) -> Topology:
        """The deployment's names and queue arguments: its prefix and replicas."""
        return Topology(self.amqp_prefix, replicas=self.amqp_replicas)

    # `ltm console`: the operators' password as an Argon2 hash (`ltm console hash-password`);
    # unset, the console does not start. Sessions end this long after the login.
    console_password_hash: SecretStr | None = None
    console_session_ttl_s: float = Field(default=8 * 3600.0, gt=0)
    # Behind a proxy that terminates TLS, the session cookie is marked Secure (it is anyway
    # when the request itself came over TLS).
    console_behind_tls: bool = False
    # How often the overview reads the database and the broker again (and its page asks).
    console_refresh_s: float = Field(default=5.0, gt=0)

    @property
    def sqlalchemy_url(self) -> str:
        """The same database through SQLAlchemy's psycopg 3 dialect."""
        return to_sqlalchemy_url(self.database_url)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, mask_passwords(value) if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            SecretFiles(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )


class SecretFiles(PydanticBaseSettingsSource):
    """`<VARIABLE>_FILE` for each of `SECRET_SETTINGS`: the value is that file's content, one
    trailing newline dropped. Setting both the variable and its `_FILE` is an error."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        variable = environment_variable(field_name, field)
        path = os.environ.get(f"{variable}_FILE")
        if path is None:
            return None, field_name, False
        if variable in os.environ:
            raise SettingsError(f"{variable} and {variable}_FILE are both set: set only one")
        try:
            content = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise SettingsError(f"{variable}_FILE: cannot read {path}: {error.strerror}") from None
        return content.removesuffix("\n").removesuffix("\r"), field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            if name not in SECRET_SETTINGS:
                continue
            value, _, _ = self.get_field_value(field, name)
            if value is not None:
                values[_input_key(name, field)] = value
        return values


def environment_variable(field_name: str, field: FieldInfo) -> str:
    """The variable a setting is read from: its alias (`DISCORD_TOKEN`), else `LTM_<NAME>`."""
    alias = field.validation_alias
    return alias if isinstance(alias, str) else f"{ENV_PREFIX}{field_name.upper()}"


def _input_key(field_name: str, field: FieldInfo) -> str:
    alias = field.validation_alias
    return alias if isinstance(alias, str) else field_name


def broker_urls(amqp_url: str) -> tuple[str, ...]:
    """The URLs of `LTM_AMQP_URL`, one per node (commas separate them), checked: each an
    `amqp://` or `amqps://` URL with a host, all of one scheme, one user and one virtual host
    (one broker, reached through any of its nodes)."""
    urls = tuple(url.strip() for url in amqp_url.split(","))
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() not in ("amqp", "amqps") or not parts.hostname:
            raise ValueError(f"not an amqp:// or amqps:// URL with a host: {mask_passwords(url)!r}")
    if len(urls) > 1:
        for what, of in (("scheme", _scheme), ("user", broker_user), ("virtual host", _vhost)):
            if len({of(url) for url in urls}) > 1:
                raise ValueError(
                    f"the URLs of LTM_AMQP_URL name different {what}s: every node of one "
                    f"broker is reached with the same {what} "
                    f"({mask_passwords(', '.join(urls))})"
                )
    return urls


def _scheme(url: str) -> str:
    return urllib.parse.urlsplit(url).scheme.lower()


def _vhost(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path[1:]) or "/"


def broker_user(amqp_url: str) -> str | None:
    """The broker user an AMQP URL (the first of a list) logs in as, the `user_id` its
    messages may carry: the URL's, else RabbitMQ's `guest`; None when a client certificate
    names the user (`?auth=external`)."""
    parts = urllib.parse.urlsplit(amqp_url.split(",", 1)[0].strip())
    if parts.username:
        return urllib.parse.unquote(parts.username)
    external = urllib.parse.parse_qs(parts.query).get("auth", [""])[0].lower() == "external"
    return None if external else "guest"


def to_sqlalchemy_url(url: str) -> str:
    """The same database through SQLAlchemy's psycopg 3 dialect. A libpq URL over several
    hosts (`postgresql://u@h1:p1,h2:p2/db?target_session_attrs=read-write`, libpq's failover)
    becomes SQLAlchemy's form of it, `postgresql+psycopg://u@/db?host=h1:p1&host=h2:p2&…`."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a database URL: {mask_passwords(url)!r}")
    if scheme in ("postgresql", "postgres", "postgresql+psycopg2"):
        scheme = "postgresql+psycopg"
    authority, _, path = rest.partition("/")
    user, at, hosts = authority.rpartition("@")
    if "," not in hosts:
        return f"{scheme}://{rest}"
    database, _, query = path.partition("?")
    listed = "&".join(f"host={urllib.parse.quote(host, safe=':[]')}" for host in hosts.split(","))
    return f"{scheme}://{user}{at}/{database}?{listed}{'&' if query else ''}{query}"
