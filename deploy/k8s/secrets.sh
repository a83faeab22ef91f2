#!/bin/sh
# The files kustomization.yaml's secretGenerator reads, made where missing: random passwords,
# and the URLs built from them, naming every broker node and both database hosts (the
# processes fail over between them). Usage: sh deploy/k8s/secrets.sh [FOLDER]
# (default: deploy/k8s/secrets.sh-output, the folder kustomization.yaml reads, git-ignored).
#
# Where the broker and the database are (defaults: a RabbitMQ cluster `ltm-rabbitmq` of three
# nodes in namespace `rabbitmq`, as its cluster operator names them; a PostgreSQL primary and
# standby `postgres-0`/`postgres-1` behind the headless Service `postgres` of `database`):
#   LTM_K8S_BROKER_NODES     host:port of each node, space-separated
#   LTM_K8S_BROKER_SERVICE   host:port of a Service any node answers (KEDA takes one URL)
#   LTM_K8S_DATABASE_HOSTS   host:port of each database host, comma-separated
# Existing passwords are kept (put a managed service's own there first); the URLs are written
# again from them. Put the bot's token in FOLDER/discord-token yourself.
set -eu

here=$(dirname "$0")
dir=${1:-$here/secrets.sh-output}
rabbitmq=ltm-rabbitmq-server
nodes=${LTM_K8S_BROKER_NODES:-"$rabbitmq-0.ltm-rabbitmq-nodes.rabbitmq.svc:5672 $rabbitmq-1.ltm-rabbitmq-nodes.rabbitmq.svc:5672 $rabbitmq-2.ltm-rabbitmq-nodes.rabbitmq.svc:5672"}
service=${LTM_K8S_BROKER_SERVICE:-ltm-rabbitmq.rabbitmq.svc:5672}
hosts=${LTM_K8S_DATABASE_HOSTS:-postgres-0.postgres.database.svc:5432,postgres-1.postgres.database.svc:5432}
vhost=ltm
database=ltm

umask 077
mkdir -p "$dir"
chmod 700 "$dir"

password() {
    # Letters and digits only: they go into URLs unescaped.
    if [ ! -s "$dir/$1" ]; then
        head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32 > "$dir/$1"
    fi
}

secret() {
    cat "$dir/$1"
}

# amqp://USER:PASSWORD@NODE/VHOST for each node, comma-separated.
broker_url() {
    urls=
    for node in $nodes; do
        urls="${urls:+$urls,}amqp://$1:$2@$node/$vhost"
    done
    printf '%s\n' "$urls" > "$dir/$3"
}

# libpq connects to the first of the hosts that accepts writes: the primary, whichever it is.
database_url() {
    printf 'postgresql://%s:%s@%s/%s?target_session_attrs=read-write\n' \
        "$1" "$2" "$hosts" "$database" > "$dir/$3"
}

for name in db-owner-password db-worker-password db-gateway-password \
    broker-worker-password broker-bot-password; do
    password "$name"
done

database_url ltm_admin "$(secret db-owner-password)" admin-database-url
database_url ltm_worker_login "$(secret db-worker-password)" worker-database-url
database_url ltm_gateway_login "$(secret db-gateway-password)" gateway-database-url
broker_url ltm-worker "$(secret broker-worker-password)" worker-amqp-url
broker_url ltm-bot "$(secret broker-bot-password)" bot-amqp-url
printf 'amqp://ltm-worker:%s@%s/%s\n' "$(secret broker-worker-password)" "$service" "$vhost" \
    > "$dir/keda-amqp-url"

echo "secrets in $dir: $(ls "$dir" | wc -l) files"
[ -s "$dir/discord-token" ] || echo "put the bot's Discord token in $dir/discord-token" >&2
