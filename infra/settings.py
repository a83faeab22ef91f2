"""Every setting of every process, read from the environment (docs/contract.md, "Settings")."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts import DEFAULT_PREFIX

__all__ = ["Settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LTM_", extra="ignore", frozen=True)

    database_url: str = "postgresql://localhost/ltm"
    amqp_url: str = "amqp://guest:guest@localhost:5672/"
    amqp_prefix: str = DEFAULT_PREFIX
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


def to_sqlalchemy_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a database URL: {url!r}")
    if scheme in ("postgresql", "postgres", "postgresql+psycopg2"):
        scheme = "postgresql+psycopg"
    return f"{scheme}://{rest}"
