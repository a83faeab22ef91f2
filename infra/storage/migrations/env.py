"""Alembic environment: migrations run on one synchronous psycopg connection; autogenerate and
`alembic check` compare the database to `infra.storage.schema`'s metadata."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from infra.storage.migrations import expressions
from infra.storage.schema import metadata

url = context.config.get_main_option("sqlalchemy.url")
if url is None:  # pragma: no cover - set by infra.storage.database.alembic_config
    raise RuntimeError("sqlalchemy.url is not set")

engine = create_engine(url, poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        transaction_per_migration=True,
        target_metadata=metadata,
        compare_type=True,
        # The metadata's defaults are written as PostgreSQL shows them back, so that they
        # compare as equal text.
        compare_server_default=True,
        # Which check constraints exist (Alembic's opt-in plugin), and their expressions and
        # the partial indexes' predicates, which Alembic leaves uncompared.
        autogenerate_plugins=[
            "alembic.autogenerate.*",
            "alembic.ext.checkconstraint_byname",
            expressions.PLUGIN,
        ],
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
