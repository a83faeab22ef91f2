#!/bin/sh
# Run once by the postgres image when the primary of the profile `cluster` creates its
# database (docker-entrypoint-initdb.d, after the login roles): the role the standby
# replicates as, its line in pg_hba.conf, and the standby made synchronous.
set -eu

secrets=${LTM_SECRETS_DIR:-/run/secrets}

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v password="$(cat "$secrets/db-replication-password")" <<'SQL'
SELECT format('CREATE ROLE ltm_replicator REPLICATION LOGIN PASSWORD %L', :'password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ltm_replicator') \gexec
SQL

# `all` in the database column does not cover replication connections.
echo "host replication ltm_replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"

# In postgresql.auto.conf, read at the real start: set on the command line instead, it would
# hold every commit of these init scripts (run before any standby can connect) for ever.
# A commit returns once the standby `ltm_standby` has it on disk.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (ltm_standby)';
ALTER SYSTEM SET synchronous_commit = 'on';
SQL
