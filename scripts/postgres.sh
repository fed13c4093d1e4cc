#!/usr/bin/env bash
# A private PostgreSQL server for the ledger's tests, for CI and developers.
#
#   eval "$(scripts/postgres.sh start)"   # prints: export CAPSTAN_TEST_POSTGRES_DSN=...
#   make test                             # the PostgreSQL ledger tests now run
#   scripts/postgres.sh stop
#
# start creates a cluster in $CAPSTAN_PG_DIR (default /tmp/capstan-postgres-$UID)
# the first time, starts it on 127.0.0.1 on the first free port from
# $CAPSTAN_PG_PORT (default 55432), with its Unix socket inside that directory,
# creates the role and database "capstan" (password "capstan-test-password";
# the role is the cluster's superuser, so tests may create their schemas),
# and prints the DSN as an export line on stdout; everything else goes to
# stderr. Running it again reuses a running server. It never touches the
# system's default cluster.
#
# PostgreSQL comes from Debian's packages: as root, start installs them when
# they are missing (apt-get, quietly); otherwise it says what to install. A
# root caller runs the server as the "postgres" user, since PostgreSQL refuses
# to run as root; the directory must then be reachable by that user (the
# default under /tmp is).
set -euo pipefail

DIR=${CAPSTAN_PG_DIR:-/tmp/capstan-postgres-$(id -u)}
FIRST_PORT=${CAPSTAN_PG_PORT:-55432}
USER_NAME=capstan
PASSWORD=capstan-test-password
DATABASE=capstan

say() { echo "postgres.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# bindir prints the newest installed PostgreSQL's bin directory.
bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return; fi
  return 1
}

install_postgres() {
  bindir >/dev/null && return
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null ||
    die "PostgreSQL is not installed; install it (Debian/Ubuntu: sudo apt-get install postgresql) and run this again"
  say "installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  bindir >/dev/null || die "apt-get installed postgresql but no initdb was found under /usr/lib/postgresql"
}

# as_owner runs a command as the cluster's owner, from /, so that a working
# directory the owner cannot read does not matter.
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

running() { [ -f "$DIR/data/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; }

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

dsn() { echo "postgres://$USER_NAME:$PASSWORD@127.0.0.1:$(cat "$DIR/port")/$DATABASE"; }

start() {
  install_postgres
  BIN=$(bindir)
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
  mkdir -p "$DIR"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$DIR"; fi
  chmod 700 "$DIR"

  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    say "creating a cluster in $DIR/data"
    local pwfile="$DIR/pwfile"
    echo "$PASSWORD" >"$pwfile"
    if [ "$(id -u)" = 0 ]; then chown postgres: "$pwfile"; fi
    as_owner "$BIN/initdb" -D "$DIR/data" -U "$USER_NAME" --pwfile="$pwfile" \
      -E UTF8 --locale=C --auth-local=trust --auth-host=scram-sha-256 >"$DIR/initdb.log" 2>&1 ||
      { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
    rm -f "$pwfile"
  fi

  if running && [ -f "$DIR/port" ]; then
    say "already running on 127.0.0.1:$(cat "$DIR/port")"
  else
    local port=$FIRST_PORT started=
    for _ in $(seq 1 20); do
      if ! port_taken "$port" &&
        as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
          -o "-p $port -k $DIR -c listen_addresses=127.0.0.1" start >/dev/null 2>&1; then
        started=1
        break
      fi
      port=$((port + 1))
    done
    [ -n "$started" ] || { tail -n 20 "$DIR/server.log" >&2 2>/dev/null || true; die "could not start PostgreSQL on any port from $FIRST_PORT; see $DIR/server.log"; }
    echo "$port" >"$DIR/port"
    say "started on 127.0.0.1:$port (data and log in $DIR)"
  fi

  local port
  port=$(cat "$DIR/port")
  export PGPASSWORD=$PASSWORD
  if [ -z "$("$BIN/psql" -h 127.0.0.1 -p "$port" -U "$USER_NAME" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" ]; then
    "$BIN/createdb" -h 127.0.0.1 -p "$port" -U "$USER_NAME" "$DATABASE"
  fi
  echo "export CAPSTAN_TEST_POSTGRES_DSN='$(dsn)'"
}

stop() {
  BIN=$(bindir) || exit 0
  if running; then
    as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
    say "stopped the server in $DIR"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  dsn)
    BIN=$(bindir) || die "PostgreSQL is not installed"
    { [ -f "$DIR/port" ] && running; } || die "not running in $DIR; run: scripts/postgres.sh start"
    dsn
    ;;
  *) die "usage: scripts/postgres.sh start|stop|dsn" ;;
esac
