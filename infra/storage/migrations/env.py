"""Alembic environment: migrations run on one synchronous psycopg connection."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

url = context.config.get_main_option("sqlalchemy.url")
if url is None:  # pragma: no cover - set by infra.storage.database.migrate
    raise RuntimeError("sqlalchemy.url is not set")

engine = create_engine(url, poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(connection=connection, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
