#!/bin/sh
# Run once by the postgres image when it creates its database (docker-entrypoint-initdb.d):
# the login role of each part, a member of that part's role only, with its password from a
# Docker secret. `ltm migrate --roles` then grants the roles what each part uses.
set -eu

secrets=${LTM_SECRETS_DIR:-/run/secrets}

for part in worker gateway operator; do
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
        -v role="ltm_$part" -v login="ltm_${part}_login" \
        -v password="$(cat "$secrets/db-$part-password")" <<'SQL'
SELECT format('CREATE ROLE %I NOLOGIN', :'role')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE %I', :'login', :'password', :'role') \gexec
SQL
done
