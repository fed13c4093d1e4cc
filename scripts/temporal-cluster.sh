#!/usr/bin/env bash
# A real Temporal cluster on PostgreSQL, for developers (and later the
# tests): the pinned server's frontend, history, matching and worker services
# as four processes from one config, with PostgreSQL persistence and
# PostgreSQL advanced visibility.
#
#   scripts/temporal-cluster.sh install          # builds the server into .bin/
#   eval "$(scripts/temporal-cluster.sh start)"   # prints: export TEMPORAL_ADDRESS=...
#   scripts/temporal-cluster.sh status
#   scripts/temporal-cluster.sh stop
#   scripts/temporal-cluster.sh prepare          # databases, ports and config only
#
# (`make cluster` and `make cluster-down` run install+start and stop.)
#
# install builds go.temporal.io/server at $SERVER_VERSION from the Go module
# proxy — cmd/server as .bin/temporal-server and the SQL schema tool
# cmd/tools/sql as .bin/temporal-sql-tool — the way the Makefile installs the
# Temporal CLI (about 4 minutes on two cores the first time). Running it
# again keeps binaries of the same version.
#
# start uses the PostgreSQL of scripts/postgres.sh (CAPSTAN_TEST_POSTGRES_DSN
# when set, else it runs `scripts/postgres.sh start`), creates the databases
# temporal and temporal_visibility there when missing (CAPSTAN_CLUSTER_DB
# names the first; the second is its name + _visibility), sets up or updates
# their schemas with temporal-sql-tool from the module's schema/postgresql/v12,
# writes $DIR/config.yaml (free loopback ports from $CAPSTAN_CLUSTER_PORT,
# default 17233; deploy/temporal/dynamicconfig.yaml as the dynamic config),
# starts the four services, waits for the frontend to answer and for the
# namespace "default" (created when missing) to be served, and prints the
# export line on stdout; everything else goes to stderr. Running it again
# restarts only the services that are not running, on the same ports, so it
# also brings back a service that died. It never drops a database.
#
# State — config, ports, pid files, one log per service — lives in
# $CAPSTAN_CLUSTER_DIR (default /tmp/capstan-cluster-$UID). stop ends the four
# processes (SIGTERM, then SIGKILL after 20 s) and leaves the databases, so
# the next start finds its workflows again. The Temporal CLI (.bin/temporal,
# `make temporal`) is used for the health check and the namespace.
set -euo pipefail

SERVER_VERSION=v1.32.1 # v1.32.2 needs Go >= 1.26.10
SERVER_MODULE=go.temporal.io/server

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CAPSTAN_CLUSTER_BIN:-$ROOT/.bin}
TEMPORAL=${CAPSTAN_TEMPORAL_BIN:-$ROOT/.bin/temporal}
DIR=${CAPSTAN_CLUSTER_DIR:-/tmp/capstan-cluster-$(id -u)}
FIRST_PORT=${CAPSTAN_CLUSTER_PORT:-17233}
DB=${CAPSTAN_CLUSTER_DB:-temporal}
VIS_DB=${DB}_visibility
LOG_LEVEL=${CAPSTAN_CLUSTER_LOG_LEVEL:-info}
NAMESPACE=default
# Start order: history owns the shards the others wait for.
SERVICES="history matching frontend worker"
# CAPSTAN_CLUSTER_DYNAMIC_CONFIG: another file, for the tests (the same
# settings and a few of their own).
DYNAMIC_CONFIG=${CAPSTAN_CLUSTER_DYNAMIC_CONFIG:-$ROOT/deploy/temporal/dynamicconfig.yaml}

say() { echo "temporal-cluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }

installed() {
  [ -x "$BIN/temporal-server" ] && [ -x "$BIN/temporal-sql-tool" ] &&
    "$BIN/temporal-server" --version 2>/dev/null | grep -q "${SERVER_VERSION#v}"
}

install() {
  if installed; then
    say "temporal-server $SERVER_VERSION already in $BIN"
    return
  fi
  command -v go >/dev/null || die "go is not on PATH"
  mkdir -p "$BIN"
  local tmp
  tmp=$(mktemp -d "$BIN/.temporal-server-build.XXXXXX")
  # shellcheck disable=SC2064 # expand $tmp now
  trap "rm -rf '$tmp'" EXIT
  say "building $SERVER_MODULE $SERVER_VERSION (cmd/server, cmd/tools/sql) into $BIN (about 4 minutes on two cores the first time)"
  local t0=$SECONDS
  (cd / && GOBIN=$tmp GOFLAGS=${GOFLAGS:-} go install \
    "$SERVER_MODULE/cmd/server@$SERVER_VERSION" \
    "$SERVER_MODULE/cmd/tools/sql@$SERVER_VERSION") >&2 ||
    die "go install of $SERVER_MODULE@$SERVER_VERSION failed"
  mv -f "$tmp/server" "$BIN/temporal-server"
  mv -f "$tmp/sql" "$BIN/temporal-sql-tool"
  say "installed $BIN/temporal-server and $BIN/temporal-sql-tool in $((SECONDS - t0)) s"
}

# module_dir prints where the module's source (its schema/ directory) is.
module_dir() {
  local d
  d=$(cd / && go mod download -json "$SERVER_MODULE@$SERVER_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -d "${d:-/nonexistent}/schema/postgresql/v12" ] ||
    die "no schema/postgresql/v12 in the module download of $SERVER_MODULE@$SERVER_VERSION"
  echo "$d"
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_of() { cat "$DIR/$1.pid" 2>/dev/null || true; }

alive() {
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

any_alive() {
  local s
  for s in $SERVICES; do alive "$s" && return 0; done
  return 1
}

# ports picks the cluster's 13 ports (the frontend's gRPC, HTTP and
# membership ports, gRPC and membership for the other three, and one metrics
# port each), free on 127.0.0.1, from $FIRST_PORT up, into $DIR/ports.
pick_ports() {
  local names="FRONTEND_GRPC FRONTEND_HTTP FRONTEND_MEMBERSHIP HISTORY_GRPC HISTORY_MEMBERSHIP MATCHING_GRPC MATCHING_MEMBERSHIP WORKER_GRPC WORKER_MEMBERSHIP FRONTEND_METRICS HISTORY_METRICS MATCHING_METRICS WORKER_METRICS"
  local port=$FIRST_PORT name out=
  for name in $names; do
    while port_taken "$port"; do
      port=$((port + 1))
      [ "$port" -lt $((FIRST_PORT + 500)) ] || die "no free ports between $FIRST_PORT and $((FIRST_PORT + 500))"
    done
    # SQL persistence keeps each service's membership port as a smallint:
    # a service on a port above 32767 dies at start ("unable to initialize
    # membership heartbeats").
    [ "$port" -le 32767 ] || die "port $port is above 32767, which SQL persistence cannot record; start lower (CAPSTAN_CLUSTER_PORT)"
    out+="${name}_PORT=$port"$'\n'
    port=$((port + 1))
  done
  printf '%s' "$out" >"$DIR/ports"
}

# parse_dsn splits postgres://user:password@host:port/db into PG_* variables
# (no percent-decoding: the password of scripts/postgres.sh needs none).
parse_dsn() {
  local re='^postgres(ql)?://([^:@/]+):([^@/]*)@([^:/]+):([0-9]+)(/.*)?$'
  [[ $1 =~ $re ]] || die "cannot read the PostgreSQL DSN (want postgres://user:password@host:port/db): $1"
  PG_USER=${BASH_REMATCH[2]}
  PG_PASSWORD=${BASH_REMATCH[3]}
  PG_HOST=${BASH_REMATCH[4]}
  PG_PORT=${BASH_REMATCH[5]}
}

sql_tool() {
  "$BIN/temporal-sql-tool" --plugin postgres12 --ep "$PG_HOST" -p "$PG_PORT" \
    -u "$PG_USER" --pw "$PG_PASSWORD" "$@"
}

# schema DB DIR: creates the database when missing (create-database leaves
# one that exists alone), then brings its schema to the newest
# version in DIR/versioned (a no-op when current).
schema() {
  local db=$1 dir=$2
  sql_tool --db "$db" create-database >"$DIR/schema-$db.log" 2>&1 ||
    { tail -n 20 "$DIR/schema-$db.log" >&2; die "could not create database $db; see $DIR/schema-$db.log"; }
  # setup-schema -v 0.0 creates the version tables (IF NOT EXISTS) and
  # leaves a database already past 0.0 as it is.
  sql_tool --db "$db" setup-schema -v 0.0 >>"$DIR/schema-$db.log" 2>&1 ||
    { tail -n 20 "$DIR/schema-$db.log" >&2; die "could not set up the schema of $db; see $DIR/schema-$db.log"; }
  sql_tool --db "$db" update-schema -d "$dir/versioned" >>"$DIR/schema-$db.log" 2>&1 ||
    { tail -n 20 "$DIR/schema-$db.log" >&2; die "could not update the schema of $db; see $DIR/schema-$db.log"; }
}

write_config() {
  # shellcheck source=/dev/null
  . "$DIR/ports"
  # Templated by the server (sprig, "enable-template" below): each process
  # gets its own metrics port from CAPSTAN_CLUSTER_METRICS_PORT.
  cat >"$DIR/config.yaml" <<EOF
# enable-template
# Written by scripts/temporal-cluster.sh; rewritten at each cold start.
log:
  stdout: true
  level: $LOG_LEVEL

persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  # Fixed once the database has its first shard; never change it after.
  numHistoryShards: 4
  datastores:
    postgres-default:
      sql:
        pluginName: postgres12
        databaseName: $DB
        connectAddr: "$PG_HOST:$PG_PORT"
        connectProtocol: tcp
        user: "$PG_USER"
        password: "$PG_PASSWORD"
        maxConns: 20
        maxIdleConns: 20
        maxConnLifetime: 1h
    postgres-visibility:
      sql:
        pluginName: postgres12
        databaseName: $VIS_DB
        connectAddr: "$PG_HOST:$PG_PORT"
        connectProtocol: tcp
        user: "$PG_USER"
        password: "$PG_PASSWORD"
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: 1h

global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: '127.0.0.1:{{ env "CAPSTAN_CLUSTER_METRICS_PORT" }}'

services:
  frontend:
    rpc:
      grpcPort: $FRONTEND_GRPC_PORT
      membershipPort: $FRONTEND_MEMBERSHIP_PORT
      httpPort: $FRONTEND_HTTP_PORT
      bindOnLocalHost: true
  history:
    rpc:
      grpcPort: $HISTORY_GRPC_PORT
      membershipPort: $HISTORY_MEMBERSHIP_PORT
      bindOnLocalHost: true
  matching:
    rpc:
      grpcPort: $MATCHING_GRPC_PORT
      membershipPort: $MATCHING_MEMBERSHIP_PORT
      bindOnLocalHost: true
  worker:
    rpc:
      grpcPort: $WORKER_GRPC_PORT
      membershipPort: $WORKER_MEMBERSHIP_PORT
      bindOnLocalHost: true

clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "127.0.0.1:$FRONTEND_GRPC_PORT"
      httpAddress: "127.0.0.1:$FRONTEND_HTTP_PORT"

dcRedirectionPolicy:
  policy: noop

dynamicConfigClient:
  filepath: "$DYNAMIC_CONFIG"
  pollInterval: 10s
EOF
}

address() {
  # shellcheck source=/dev/null
  . "$DIR/ports"
  echo "127.0.0.1:$FRONTEND_GRPC_PORT"
}

healthy() { "$TEMPORAL" operator cluster health --address "$(address)" >/dev/null 2>&1; }

# serving: the namespace is in the frontend's namespace cache (a visibility
# query answers), which lags its creation by up to the cache's refresh.
serving() { "$TEMPORAL" workflow count --address "$(address)" --namespace "$NAMESPACE" >/dev/null 2>&1; }

# start_service NAME: starts one service in the background; its pid (the
# server's own: nohup execs it) goes to $DIR/NAME.pid.
start_service() {
  local s=$1 port_var
  port_var=$(echo "$s" | tr '[:lower:]' '[:upper:]')_METRICS_PORT
  # shellcheck source=/dev/null
  . "$DIR/ports"
  say "starting $s (log in $DIR/$s.log)"
  CAPSTAN_CLUSTER_METRICS_PORT=${!port_var} nohup "$BIN/temporal-server" \
    --config-file "$DIR/config.yaml" --allow-no-auth start --service "$s" \
    >>"$DIR/$s.log" 2>&1 </dev/null &
  echo $! >"$DIR/$s.pid"
}

# listening NAME: the service's gRPC port accepts connections.
listening() {
  local port_var
  port_var=$(echo "$1" | tr '[:lower:]' '[:upper:]')_GRPC_PORT
  # shellcheck source=/dev/null
  . "$DIR/ports"
  port_taken "${!port_var}"
}

# prepare_files: the databases and their schemas, the ports and the config.
prepare_files() {
  local mod t0=$SECONDS
  mod=$(module_dir)
  schema "$DB" "$mod/schema/postgresql/v12/temporal"
  schema "$VIS_DB" "$mod/schema/postgresql/v12/visibility"
  say "schemas of $DB and $VIS_DB are current ($((SECONDS - t0)) s)"
  pick_ports
  write_config
}

# prepare: what start does before it starts a process — databases, schemas,
# free ports ($DIR/ports), $DIR/config.yaml — and nothing after, for a
# caller that runs and supervises the four processes itself (the tests:
# internal/testenv's StartCluster). Each service is then
#   CAPSTAN_CLUSTER_METRICS_PORT=<its *_METRICS_PORT> temporal-server \
#     --config-file $DIR/config.yaml --allow-no-auth start --service <name>
# It needs CAPSTAN_TEST_POSTGRES_DSN and prints the frontend's address.
prepare() {
  installed || die "temporal-server $SERVER_VERSION is not in $BIN; run: scripts/temporal-cluster.sh install (or make cluster)"
  [ -n "${CAPSTAN_TEST_POSTGRES_DSN:-}" ] || die "prepare needs CAPSTAN_TEST_POSTGRES_DSN"
  mkdir -p "$DIR"
  parse_dsn "$CAPSTAN_TEST_POSTGRES_DSN"
  prepare_files
  address
}

start() {
  installed || die "temporal-server $SERVER_VERSION is not in $BIN; run: scripts/temporal-cluster.sh install (or make cluster)"
  [ -x "$TEMPORAL" ] || die "the Temporal CLI is not at $TEMPORAL; run: make temporal"
  mkdir -p "$DIR"

  if [ -z "${CAPSTAN_TEST_POSTGRES_DSN:-}" ]; then
    eval "$("$ROOT/scripts/postgres.sh" start)"
  fi
  parse_dsn "$CAPSTAN_TEST_POSTGRES_DSN"

  local s t0=$SECONDS started=
  if any_alive && [ -f "$DIR/ports" ] && [ -f "$DIR/config.yaml" ]; then
    say "reusing the running cluster's config and ports ($DIR/config.yaml)"
  else
    prepare_files
  fi

  for s in $SERVICES; do
    if alive "$s"; then
      continue
    fi
    start_service "$s"
    started=1
  done

  # Every service up: its process alive and its gRPC port open (a process
  # that loses its port to a stray server exits, which is caught here), then
  # the frontend answering.
  local i ready
  for i in $(seq 1 240); do
    ready=1
    for s in $SERVICES; do
      alive "$s" || { tail -n 20 "$DIR/$s.log" >&2; die "$s exited; see $DIR/$s.log"; }
      listening "$s" || ready=
    done
    [ -n "$ready" ] && healthy && break
    [ "$i" = 240 ] && die "the cluster at $(address) did not answer in 120 s; see the logs in $DIR"
    sleep 0.5
  done
  if [ -n "$started" ]; then say "all four services up, frontend answers at $(address) ($((SECONDS - t0)) s)"; fi

  if ! "$TEMPORAL" operator namespace describe --address "$(address)" --namespace "$NAMESPACE" >/dev/null 2>&1; then
    # The namespace is created through the frontend; the worker service's
    # system namespace must exist first, so retry briefly.
    for i in $(seq 1 60); do
      if "$TEMPORAL" operator namespace create --address "$(address)" --namespace "$NAMESPACE" >"$DIR/namespace.log" 2>&1 ||
        grep -qi "already" "$DIR/namespace.log"; then
        say "created namespace $NAMESPACE"
        break
      fi
      [ "$i" = 60 ] && { cat "$DIR/namespace.log" >&2; die "could not create namespace $NAMESPACE"; }
      sleep 0.5
    done
  fi
  for i in $(seq 1 60); do
    serving && break
    [ "$i" = 60 ] && die "namespace $NAMESPACE is not served 30 s after its creation"
    sleep 0.5
  done
  for s in $SERVICES; do
    alive "$s" || { tail -n 20 "$DIR/$s.log" >&2; die "$s exited; see $DIR/$s.log"; }
  done
  say "cluster ready at $(address), namespace $NAMESPACE ($((SECONDS - t0)) s)"
  echo "export TEMPORAL_ADDRESS=$(address)"
}

stop_service() {
  local s=$1 pid
  pid=$(pid_of "$s")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then
      say "$s (pid $pid) still running 20 s after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    say "stopped $s (pid $pid)"
  fi
  rm -f "$DIR/$s.pid"
}

stop() {
  # The reverse of the start order: the frontend stops taking calls first.
  local s
  for s in worker frontend matching history; do stop_service "$s"; done
}

status() {
  local s rc=0
  for s in $SERVICES; do
    if alive "$s"; then
      echo "$s: running (pid $(pid_of "$s"))"
    else
      echo "$s: not running"
      rc=1
    fi
  done
  if [ -f "$DIR/ports" ]; then
    if [ -x "$TEMPORAL" ] && healthy; then
      echo "frontend: serving at $(address)"
    else
      echo "frontend: not answering at $(address)"
      rc=1
    fi
  fi
  return "$rc"
}

case "${1:-}" in
  install) install ;;
  prepare) prepare ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: scripts/temporal-cluster.sh install|prepare|start|stop|status" ;;
esac
