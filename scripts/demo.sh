#!/usr/bin/env bash
# Starts a Temporal dev server (UI included, state kept in .capstan/), the
# sandbox program (fake model, GitHub and Slack on loopback), an ordinary
# worker pointed at it through the environment it hands out, and runs the
# sample task. Leaves all three up; `make down` stops them.
# Ports: TEMPORAL_PORT (7233) and TEMPORAL_UI_PORT (8233); the sandbox takes
# free loopback ports and says which in .capstan/sandbox.env.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=$PWD/.bin
STATE=$PWD/.capstan
PORT=${TEMPORAL_PORT:-7233}
UI_PORT=${TEMPORAL_UI_PORT:-8233}
ADDR=127.0.0.1:$PORT
mkdir -p "$STATE"
export TEMPORAL_ADDRESS=$ADDR
export CAPSTAN_UI_URL=http://localhost:$UI_PORT
export CAPSTAN_LEDGER_DSN=${CAPSTAN_LEDGER_DSN:-sqlite://$STATE/ledger.db}
# The sandbox's own queue (or the one CAPSTAN_TASK_QUEUE names); the sandbox
# refuses to hand out capstan, the queue of real tasks.
QUEUE=${CAPSTAN_TASK_QUEUE:-capstan-sandbox}
# The worker runs under Worker Versioning as this deployment version, made
# current below (docs/configuration.md: deploying a new version).
export CAPSTAN_DEPLOYMENT_NAME=${CAPSTAN_DEPLOYMENT_NAME:-capstan-demo}
export CAPSTAN_BUILD_ID=${CAPSTAN_BUILD_ID:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo dev)}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
healthy() { "$BIN/temporal" operator cluster health --address "$ADDR" >/dev/null 2>&1; }
# stop NAME: stops the process of .capstan/NAME.pid, gracefully first.
stop() {
  local pidfile=$STATE/$1.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  fi
  rm -f "$pidfile"
}

if healthy; then
  echo "Temporal server already up at $ADDR"
else
  # The server settings capstan relies on (fairness), from
  # deploy/temporal/dynamicconfig.yaml, as docker-compose.yml's server has them.
  server_settings=() # a read loop, not mapfile: macOS ships bash 3.2
  while IFS= read -r flag; do server_settings+=("$flag"); done < <(scripts/dev-server-flags.sh)
  [ "${#server_settings[@]}" -gt 0 ] || { echo "scripts/dev-server-flags.sh printed no settings" >&2; exit 1; }
  echo "starting the Temporal dev server at $ADDR (UI on :$UI_PORT, state in .capstan/temporal.db)"
  # The --search-attribute flags are capstan's attributes, so that a task
  # starts before any worker has registered them; a test
  # (deploy/searchattributes_test.go) holds them to workflows.SearchAttributes.
  nohup "$BIN/temporal" server start-dev \
    --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT" \
    --db-filename "$STATE/temporal.db" --log-level warn \
    --search-attribute CapstanStatus=Keyword \
    --search-attribute CapstanUnknownOps=Int \
    --search-attribute CapstanRepo=Keyword \
    --search-attribute CapstanFlags=KeywordList \
    --search-attribute CapstanTenant=Keyword \
    "${server_settings[@]}" \
    >"$STATE/temporal.log" 2>&1 &
  echo $! >"$STATE/temporal.pid"
  for _ in $(seq 1 120); do
    healthy && break
    alive "$STATE/temporal.pid" || { echo "the Temporal dev server exited; see .capstan/temporal.log" >&2; tail -5 "$STATE/temporal.log" >&2; exit 1; }
    sleep 0.5
  done
  healthy || { echo "the Temporal dev server did not become healthy in 60 s; see .capstan/temporal.log" >&2; exit 1; }
fi

if alive "$STATE/sandbox.pid" && [ -s "$STATE/sandbox.env" ] && grep -qx "CAPSTAN_TASK_QUEUE=$QUEUE" "$STATE/sandbox.env"; then
  echo "sandbox already running (pid $(cat "$STATE/sandbox.pid"))"
else
  # A worker left running points at the old sandbox's ports.
  stop worker
  stop sandbox
  echo "starting the sandbox (log in .capstan/sandbox.log)"
  rm -f "$STATE/sandbox.env"
  nohup "$BIN/sandbox" --env-file "$STATE/sandbox.env" --task-queue "$QUEUE" >"$STATE/sandbox.log" 2>&1 &
  echo $! >"$STATE/sandbox.pid"
  # The sandbox writes the file, whole, once all three servers listen.
  for _ in $(seq 1 60); do
    [ -s "$STATE/sandbox.env" ] && break
    alive "$STATE/sandbox.pid" || { echo "the sandbox exited:" >&2; tail -5 "$STATE/sandbox.log" >&2; exit 1; }
    sleep 0.25
  done
  [ -s "$STATE/sandbox.env" ] || { echo "the sandbox did not start serving in 15 s; see .capstan/sandbox.log" >&2; exit 1; }
fi

# The worker's environment and starter's: the sandbox's base URLs, tokens
# and queue, exactly the settings that point a worker at the real services.
set -a
# shellcheck source=/dev/null
. "$STATE/sandbox.env"
set +a

if alive "$STATE/worker.pid" && [ -s "$STATE/worker.build" ]; then
  echo "worker already running (pid $(cat "$STATE/worker.pid"))"
  CAPSTAN_BUILD_ID=$(cat "$STATE/worker.build")
else
  # A worker of an older demo, unversioned, is replaced.
  stop worker
  echo "$CAPSTAN_BUILD_ID" >"$STATE/worker.build"
  echo "starting a worker pointed at the sandbox (log in .capstan/worker.log)"
  : >"$STATE/worker.log"
  nohup "$BIN/worker" --log-format text >"$STATE/worker.log" 2>&1 &
  echo $! >"$STATE/worker.pid"
  for _ in $(seq 1 60); do
    grep -q "polling task queue" "$STATE/worker.log" && break
    alive "$STATE/worker.pid" || { echo "the worker exited:" >&2; tail -5 "$STATE/worker.log" >&2; exit 1; }
    sleep 0.5
  done
fi

# New tasks go to the current version: make this worker's build current
# (its version exists once the worker has polled, so retry briefly).
for i in $(seq 1 40); do
  if "$BIN/temporal" worker deployment set-current-version --address "$ADDR" \
      --deployment-name "$CAPSTAN_DEPLOYMENT_NAME" --build-id "$CAPSTAN_BUILD_ID" --yes >"$STATE/deploy.log" 2>&1; then
    echo "build $CAPSTAN_BUILD_ID is current in deployment $CAPSTAN_DEPLOYMENT_NAME"
    break
  fi
  [ "$i" = 40 ] && { echo "could not make build $CAPSTAN_BUILD_ID current (a worker left from an older demo? make down, then make demo); see .capstan/deploy.log" >&2; exit 1; }
  sleep 0.5
done

"$BIN/starter" demo
echo
echo "Temporal UI: http://localhost:$UI_PORT  (server, sandbox and worker stay up; 'make down' stops them)"
