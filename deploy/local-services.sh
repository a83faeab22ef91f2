#!/usr/bin/env bash
# PostgreSQL and RabbitMQ for `make run` and `make test`.
#
#   deploy/local-services.sh            checks that both answer where LTM_DATABASE_URL and
#                                      LTM_AMQP_URL point (127.0.0.1:5432 and 127.0.0.1:5672
#                                      when unset); says what does not; changes nothing.
#   deploy/local-services.sh --install  `make services`: installs the local ones from Debian's
#                                      packages, lets PostgreSQL trust local TCP connections and
#                                      starts both, each only when needed (as root), saying
#                                      every change it makes; then checks as above.
set -u

DATABASE_URL=${LTM_DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/ltm}
AMQP_URL=${LTM_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}

say() { printf 'services: %s\n' "$*" >&2; }

# "HOST PORT" of a URL, scheme://[user[:password]@]host[:port][,more hosts][/…][?…];
# the first host of several; $2 when the URL gives no port.
endpoint() {
  local rest=${1#*://} host port
  rest=${rest%%[/?]*}
  rest=${rest##*@}
  rest=${rest%%,*}
  host=${rest%:*}
  port=${rest##*:}
  [ "$host" = "$rest" ] && port=$2
  printf '%s %s\n' "${host:-127.0.0.1}" "$port"
}

tcp_answers() { # host, port
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null
}

# Both answer where the settings point, or a line naming each one that does not: exit 1.
check() {
  local host port amqp_port=5672 missing=0
  read -r host port <<<"$(endpoint "$DATABASE_URL" 5432)"
  if ! tcp_answers "$host" "$port"; then
    say "PostgreSQL does not answer on $host:$port (LTM_DATABASE_URL)"
    missing=1
  fi
  [[ $AMQP_URL == amqps://* ]] && amqp_port=5671
  read -r host port <<<"$(endpoint "$AMQP_URL" "$amqp_port")"
  if ! tcp_answers "$host" "$port"; then
    say "RabbitMQ does not answer on $host:$port (LTM_AMQP_URL)"
    missing=1
  fi
  if [ "$missing" -ne 0 ]; then
    say "run \`make services\` to install and start the local ones (as root; it says each change)"
    say "or point LTM_DATABASE_URL / LTM_AMQP_URL at services that answer"
  fi
  return "$missing"
}

# --- the installing mode: only what was asked for with --install -------------------------

pg_answers() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
amqp_answers() { tcp_answers 127.0.0.1 5672; }

as_root() { # what needs it
  [ "$(id -u)" -eq 0 ] && return 0
  say "$1 needs root: run \`sudo make services\`"
  return 1
}

wait_for() { # name, check function, seconds
  local i
  for ((i = 0; i < $3 * 2; i++)); do
    "$2" && return 0
    sleep 0.5
  done
  say "$1 did not answer within $3 s"
  return 1
}

install_missing() {
  local pkgs=()
  command -v pg_ctlcluster >/dev/null || pkgs+=(postgresql)
  command -v rabbitmq-server >/dev/null || pkgs+=(rabbitmq-server)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  as_root "installing ${pkgs[*]}" || return 1
  say "installing ${pkgs[*]} (apt-get update, apt-get install)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq "${pkgs[@]}" >/dev/null
}

start_postgres() {
  local ver
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  if ! pg_answers; then
    say "starting PostgreSQL $ver (pg_ctlcluster $ver main start)"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
    wait_for PostgreSQL pg_answers 60 || return 1
  fi
  # The tests and `make run` connect as postgres over TCP without a password.
  if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
    local hba="/etc/postgresql/$ver/main/pg_hba.conf"
    as_root "editing $hba" || return 1
    say "adding 'host all all 127.0.0.1/32 trust' and 'host all all ::1/128 trust'" \
      "at the top of $hba (every local TCP connection trusted), then reloading PostgreSQL"
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
    sleep 1
  fi
}

start_rabbitmq() {
  amqp_answers && return 0
  if ! grep -q "$(hostname)" /etc/hosts; then
    as_root "editing /etc/hosts" || return 1
    say "adding '127.0.0.1 $(hostname)' to /etc/hosts (RabbitMQ's node name must resolve)"
    echo "127.0.0.1 $(hostname)" >>/etc/hosts
  fi
  say "starting RabbitMQ (rabbitmq-server -detached)"
  rabbitmq-server -detached >/dev/null 2>&1 || true
  wait_for RabbitMQ amqp_answers 90 || return 1
  rabbitmqctl await_startup >/dev/null 2>&1 || true
}

case "${1:-}" in
  "") check ;;
  --install)
    install_missing || { say "could not install the services"; exit 1; }
    start_postgres || exit 1
    start_rabbitmq || exit 1
    check && say "PostgreSQL and RabbitMQ answer"
    ;;
  *)
    say "usage: $0 [--install]"
    exit 2
    ;;
esac
