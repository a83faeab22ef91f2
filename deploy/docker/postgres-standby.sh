#!/bin/sh
# The entrypoint of the standby of the profile `cluster`. At its first start (an empty data
# folder) it copies the primary with pg_basebackup -R, which also writes the connection to
# stream from (primary_conninfo, under the name the primary's synchronous_standby_names
# waits for) and standby.signal; then, and at every later start, the image's own entrypoint
# starts PostgreSQL, as a hot standby.
set -eu

primary=${LTM_PRIMARY_HOST:-postgres-primary}
port=${LTM_PRIMARY_PORT:-5432}
secrets=${LTM_SECRETS_DIR:-/run/secrets}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    until pg_isready --host "$primary" --port "$port" --quiet; do
        echo "standby: waiting for $primary"
        sleep 1
    done
    install -d -m 700 -o postgres -g postgres "$PGDATA"
    PGPASSWORD=$(cat "$secrets/db-replication-password") \
        gosu postgres pg_basebackup --pgdata "$PGDATA" --write-recovery-conf \
        --wal-method stream --checkpoint fast --progress \
        --dbname "host=$primary port=$port user=ltm_replicator application_name=ltm_standby"
fi
exec docker-entrypoint.sh postgres
