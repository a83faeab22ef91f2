"""Every setting of every process, read from the environment (docs/contract.md, "Settings",
rendered from the fields' descriptions by `infra.settings_table`).

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

# The settings that may come from a file (`<VARIABLE>_FILE`): those that hold a password or key.
SECRET_SETTINGS: Final = frozenset(
    {
        "database_url",
        "amqp_url",
        "discord_token",
        "llm_api_key",
        "broker_worker_password",
        "broker_bot_password",
        "broker_operator_password",
    }
)


class Settings(BaseSettings):
    """Each field's `description` is its row in docs/contract.md's settings table
    (`infra.settings_table` renders it): say there what a reader of the table needs."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    database_url: str = Field(
        default="postgresql://localhost/ltm",
        description=(
            "libpq URL; `make run` uses `postgresql://postgres@127.0.0.1:5432/ltm`; "
            "`?sslmode=verify-full&sslrootcert=FILE` for TLS; several hosts for a primary and "
            "its standby, `postgresql://u@h1:5432,h2:5432/ltm?target_session_attrs=read-write` "
            "(libpq's failover: connections go to the one that takes writes)"
        ),
    )
    # One URL, or one per node of a cluster separated by commas (`amqp.BrokerNodes`).
    amqp_url: str = Field(
        default="amqp://guest:guest@localhost:5672/",
        description=(
            "`?heartbeat=N` (60 by default) sets how soon a silently dead connection is "
            "noticed: after about 3 × (N + 1) s; `amqps://` for TLS. On a cluster, one URL per "
            "node separated by commas: a process connects to the first that answers and, when "
            "its connection is lost or refused, to the next (round-robin from the one after the "
            "node that failed). The URLs must share their scheme, user and virtual host, or the "
            "process refuses to start"
        ),
    )
    amqp_ca_file: Path | None = Field(
        default=None,
        description=(
            "`amqps://`: the CA the broker's certificate is checked against (unset: the "
            "system's); the host name is checked too"
        ),
    )
    amqp_cert_file: Path | None = Field(
        default=None,
        description="`amqps://`: a client certificate, for a broker that asks for one",
    )
    amqp_key_file: Path | None = Field(
        default=None, description="`amqps://`: the client certificate's key"
    )
    amqp_prefix: str = Field(
        default=DEFAULT_PREFIX, description="prefix of every exchange and queue (`<p>`)"
    )
    amqp_replicas: int | None = Field(
        default=None,
        ge=1,
        description=(
            "on a cluster, replicas of every quorum queue (`x-quorum-initial-group-size`) and "
            "of the audit stream (`x-initial-cluster-size`) the project declares; unset, "
            "neither argument is sent, the broker's default. The same in every process of a "
            "deployment, bots that declare the queues included (a queue declared with another "
            "value is refused by the broker: the error names this setting)"
        ),
    )
    max_memory_length: int = Field(
        default=1000, ge=1, description="code points a memory may hold, after sanitizing"
    )
    # A server's scope is of one persona lineage; a person's, of one lineage and the global
    # one (lineage 0) together: see docs/behaviour.md, create step 7.
    max_server_memories: int = Field(
        default=25,
        ge=1,
        description="server memories the create tool lets a server hold per persona lineage",
    )
    max_personal_memories: int = Field(
        default=25,
        ge=1,
        description=(
            "personal memories the create tool lets one person hold per persona lineage, "
            "lineage 0 counted with it"
        ),
    )
    shard_count: int = Field(
        default=1,
        ge=1,
        description=(
            "shard queues `ltm topology` declares; the worker declares any other shard's queue "
            "before its first reply there (so replies wait for `LTM_REPLY_TTL_S` until a "
            "gateway takes the shard) and logs a warning for a shard beyond this count"
        ),
    )
    db_retry_seconds: float = Field(
        default=10.0,
        ge=0,
        description="how long transient database faults are retried before `…_db_error`",
    )
    # A worker's transactions hold row locks for milliseconds: a longer wait is a lock held
    # from outside (an open session), which must fail one call, not stall every call.
    db_lock_timeout_s: float = Field(
        default=2.0,
        gt=0,
        description=(
            "a statement waiting longer for a row lock held from outside (an open session) "
            "fails (PostgreSQL `lock_timeout`): that call alone is retried, then answered "
            "`…_db_error` and dead-lettered for replay; the calls batched with it go on"
        ),
    )
    reply_ttl_s: int = Field(
        default=900, ge=1, description="expiration of results and embeds, in seconds"
    )
    metrics_port: int = Field(
        default=9464,
        ge=0,
        le=65535,
        description=(
            "the worker's `/metrics`, `/healthz`, `/readyz`; `0` turns them off; a second "
            "worker on one host needs another"
        ),
    )
    # This host only unless asked: a container sets 0.0.0.0 for its scraper and its health
    # check to reach the endpoints.
    metrics_host: str = Field(
        default="127.0.0.1",
        description=(
            "where the worker's and the gateway's endpoints listen; `0.0.0.0` for a scraper on "
            "another host or container (`docker-compose.yml` sets it)"
        ),
    )

    # Least privilege (docs/security.md): the broker accounts of each role, for
    # `ltm broker-definitions`, and the accounts whose tool calls the worker takes.
    broker_worker_user: str = Field(
        default="ltm-worker", description="the worker's broker user in `ltm broker-definitions`"
    )
    broker_bot_user: str = Field(
        default="ltm-bot", description="the bots' broker user in `ltm broker-definitions`"
    )
    broker_operator_user: str = Field(
        default="ltm-operator",
        description=(
            "the operators' broker user in `ltm broker-definitions`; with "
            "`LTM_TRUSTED_PUBLISHERS` set, the one account whose data requests of kind "
            "`operator` the worker runs (others are refused `untrusted_publisher`)"
        ),
    )
    broker_worker_password: SecretStr | None = Field(
        default=None,
        description="the worker's broker password (required by `ltm broker-definitions`)",
    )
    broker_bot_password: SecretStr | None = Field(
        default=None,
        description="the bots' broker password (required by `ltm broker-definitions`)",
    )
    broker_operator_password: SecretStr | None = Field(
        default=None,
        description="the operators' broker password (required by `ltm broker-definitions`)",
    )
    # Unset: every publisher is accepted (and the worker says so at start).
    trusted_publishers: Annotated[frozenset[str] | None, NoDecode] = Field(
        default=None,
        description=(
            "comma-separated broker users whose tool calls the worker runs; others are "
            "dead-lettered `untrusted publisher` (unset or blank: every publisher, said once "
            "at start)"
        ),
    )
    max_message_bytes: int = Field(
        default=262_144,
        ge=1,
        description="a tool call's body larger than this is dead-lettered `too large`, unparsed",
    )

    # Beyond the contract: how hard one worker process works.
    prefetch: int = Field(default=256, ge=1, description="deliveries in flight per worker")
    db_pool_size: int = Field(default=8, ge=1, description="database connections per worker")
    # Calls that arrive together share a transaction; this many transactions run at once.
    # One at a time lets calls gather behind it, which is what makes batches under load
    # (measured: 1 → ~500 calls/s, 2 → ~400, the database being cheaper per call in bulk).
    max_batch: int = Field(default=64, ge=1, description="calls per database transaction at most")
    batch_concurrency: int = Field(
        default=1,
        ge=1,
        description="transactions at once per worker (at most `LTM_DB_POOL_SIZE`)",
    )
    shutdown_grace_s: float = Field(
        default=20.0,
        ge=0,
        description=(
            "how long a stopping process waits for in-flight work; `make run` kills a process "
            "still running 5 s after that"
        ),
    )
    outbox_sweep_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="how often the outbox sweep looks for rows left unpublished",
    )
    outbox_retention_s: float = Field(
        default=3600.0,
        ge=0,
        description="how long published outbox rows are kept before the sweep deletes them",
    )
    log_format: str = Field(
        default="auto",
        pattern="^(auto|json|console)$",
        description="`json` (one object a line), `console`, or `auto` (console on a terminal)",
    )
    log_level: str = Field(default="INFO", description="the lowest level logged")

    # Gateway (no LTM_ prefix: these are the bot's own names).
    discord_token: SecretStr | None = Field(
        default=None,
        validation_alias="DISCORD_TOKEN",
        description="the gateway's bot token; unset, the gateway draws embeds in the terminal",
    )
    discord_api_url: str | None = Field(
        default=None,
        validation_alias="DISCORD_API_URL",
        description="another Discord REST endpoint (unset: Discord's; tests point it at a fake)",
    )
    persona_cache_ttl_s: float = Field(
        default=600.0, description="seconds an entry of the gateway's persona-state cache lives"
    )
    # A port of its own: `make run` and most hosts run a worker and a gateway side by side.
    gateway_metrics_port: int = Field(
        default=9465,
        ge=0,
        le=65535,
        description=(
            "the same endpoints for `ltm gateway`; each gateway process on one host needs its own"
        ),
    )
    user_cache_ttl_s: float = Field(
        default=1800.0, description="seconds an entry of the gateway's user cache lives"
    )
    forget_server_on_removal: bool = Field(
        default=False,
        description=(
            "`true`: a gateway removed from a guild (not an outage) asks for the erasure of "
            "that server's memories, as `bot_removed`"
        ),
    )

    # The example bot (examples/bot) and `make chat`: the LLM they ask, any endpoint that
    # speaks OpenAI's chat completions (a hosted API, llama.cpp's server, Ollama, vLLM).
    llm_base_url: str | None = Field(
        default=None,
        description=(
            "the example bot's and `make chat`'s OpenAI-compatible endpoint, up to the `/v1` "
            "its `/chat/completions` follows (`http://127.0.0.1:8080/v1`); unset, neither starts"
        ),
    )
    llm_model: str | None = Field(
        default=None,
        description="the model the example bot asks for; unset, none is named (a server of one)",
    )
    llm_api_key: SecretStr | None = Field(
        default=None,
        description="the bearer token of the example bot's LLM endpoint, when it needs one",
    )
    bot_persona_id: int | None = Field(
        default=None,
        description=(
            "the persona (`personas.persona_id`) the example Discord bot plays: one server's, "
            "where it has memories (`make chat` plays the demo's, 900001)"
        ),
    )

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

    # `ltm console`: the operators' password as an Argon2 hash; sessions end this long after
    # the login.
    console_password_hash: SecretStr | None = Field(
        default=None,
        description=(
            "the console's password, as `ltm console hash-password` prints it (an Argon2 "
            "hash); unset, `ltm console` does not start"
        ),
    )
    console_session_ttl_s: float = Field(
        default=8 * 3600.0,
        gt=0,
        description="how long a console session lasts after its login, in seconds",
    )
    # Behind a proxy that terminates TLS the request itself is plain HTTP, so the console
    # cannot see that the cookie travels encrypted.
    console_behind_tls: bool = Field(
        default=False,
        description=(
            "`true` behind a proxy that terminates TLS: the session cookie is marked `Secure` "
            "(it is anyway when the request itself came over TLS)"
        ),
    )
    console_refresh_s: float = Field(
        default=5.0,
        gt=0,
        description="how often the console's overview reads the database and the broker again",
    )

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
