#!/bin/sh
# The entrypoint of each broker node of the profile `cluster`: the nodes of one cluster share
# an Erlang cookie, given as a Docker secret. Erlang reads it only from a file of the node's
# own user, readable by it alone, so it is copied there (as root) before the image's own
# entrypoint starts the node as `rabbitmq`.
set -eu

cookie=${RABBITMQ_COOKIE_FILE:-/run/secrets/erlang-cookie}
target=/var/lib/rabbitmq/.erlang.cookie

install -m 400 -o rabbitmq -g rabbitmq "$cookie" "$target"
exec docker-entrypoint.sh rabbitmq-server
