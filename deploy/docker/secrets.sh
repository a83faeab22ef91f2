#!/bin/sh
# The secrets docker-compose.yml reads, made where missing: random passwords, and the URLs
# built from them. Usage: sh deploy/docker/secrets.sh [FOLDER]   (default: ./secrets)
#
# Existing passwords are kept (a database or broker already set up with them still works);
# the URLs are written again from them. The folder is yours alone; each file is readable by
# the containers' users, which see only the files they are given.
set -eu

dir=${1:-secrets}
umask 077
mkdir -p "$dir"
chmod 700 "$dir"

password() {
    # Letters and digits only: they go into URLs unescaped.
    if [ ! -s "$dir/$1" ]; then
        head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32 > "$dir/$1"
    fi
}

url() {
    printf '%s\n' "$2" > "$dir/$1"
}

secret() {
    cat "$dir/$1"
}

for name in postgres-password \
    db-worker-password db-gateway-password db-operator-password \
    broker-worker-password broker-bot-password broker-operator-password \
    db-replication-password erlang-cookie; do
    password "$name"
done

database=postgres:5432/ltm
url admin-database-url "postgresql://ltm_admin:$(secret postgres-password)@$database"
url worker-database-url "postgresql://ltm_worker_login:$(secret db-worker-password)@$database"
url gateway-database-url "postgresql://ltm_gateway_login:$(secret db-gateway-password)@$database"
url operator-database-url "postgresql://ltm_operator_login:$(secret db-operator-password)@$database"

broker=rabbitmq:5672/ltm
url worker-amqp-url "amqp://ltm-worker:$(secret broker-worker-password)@$broker"
url bot-amqp-url "amqp://ltm-bot:$(secret broker-bot-password)@$broker"
url operator-amqp-url "amqp://ltm-operator:$(secret broker-operator-password)@$broker"

# The profile `cluster`: every broker node in each URL (the processes fail over between them),
# and both database hosts, libpq connecting to whichever accepts writes.
nodes() {
    printf 'amqp://%s:%s@rabbitmq-1:5672/ltm,amqp://%s:%s@rabbitmq-2:5672/ltm,amqp://%s:%s@rabbitmq-3:5672/ltm' \
        "$1" "$2" "$1" "$2" "$1" "$2"
}
hosts=postgres-primary:5432,postgres-standby:5432/ltm?target_session_attrs=read-write
url cluster-admin-database-url "postgresql://ltm_admin:$(secret postgres-password)@$hosts"
url cluster-worker-database-url "postgresql://ltm_worker_login:$(secret db-worker-password)@$hosts"
url cluster-gateway-database-url "postgresql://ltm_gateway_login:$(secret db-gateway-password)@$hosts"
url cluster-operator-database-url "postgresql://ltm_operator_login:$(secret db-operator-password)@$hosts"
url cluster-worker-amqp-url "$(nodes ltm-worker "$(secret broker-worker-password)")"
url cluster-bot-amqp-url "$(nodes ltm-bot "$(secret broker-bot-password)")"
url cluster-operator-amqp-url "$(nodes ltm-operator "$(secret broker-operator-password)")"

chmod 644 "$dir"/*
# The Erlang cookie is copied into each node's own file by its entrypoint; still, no one
# else reads it here.
chmod 600 "$dir/erlang-cookie"
echo "secrets in $dir: $(ls "$dir" | wc -l) files"
