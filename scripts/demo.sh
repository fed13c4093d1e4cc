#!/usr/bin/env bash
# Starts a Temporal dev server (UI included, state kept in .capstan/), a
# sandbox worker, and runs the sample task. Leaves server and worker up;
# `make down` stops them. Ports: TEMPORAL_PORT (7233) and TEMPORAL_UI_PORT (8233).
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

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
healthy() { "$BIN/temporal" operator cluster health --address "$ADDR" >/dev/null 2>&1; }

if healthy; then
  echo "Temporal server already up at $ADDR"
else
  echo "starting the Temporal dev server at $ADDR (UI on :$UI_PORT, state in .capstan/temporal.db)"
  nohup "$BIN/temporal" server start-dev \
    --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT" \
    --db-filename "$STATE/temporal.db" --log-level warn \
    --search-attribute CapstanStatus=Keyword \
    --search-attribute CapstanNeedsHuman=Bool \
    --search-attribute CapstanUnknownOps=Int \
    --search-attribute CapstanRepo=Keyword \
    --search-attribute CapstanDeadLetter=Bool \
    >"$STATE/temporal.log" 2>&1 &
  echo $! >"$STATE/temporal.pid"
  for _ in $(seq 1 120); do
    healthy && break
    alive "$STATE/temporal.pid" || { echo "the Temporal dev server exited; see .capstan/temporal.log" >&2; tail -5 "$STATE/temporal.log" >&2; exit 1; }
    sleep 0.5
  done
  healthy || { echo "the Temporal dev server did not become healthy in 60 s; see .capstan/temporal.log" >&2; exit 1; }
fi

if alive "$STATE/worker.pid"; then
  echo "sandbox worker already running (pid $(cat "$STATE/worker.pid"))"
else
  echo "starting a sandbox worker (log in .capstan/worker.log)"
  : >"$STATE/worker.log"
  nohup "$BIN/worker" --sandbox --log-format text >"$STATE/worker.log" 2>&1 &
  echo $! >"$STATE/worker.pid"
  for _ in $(seq 1 60); do
    grep -q "polling task queue" "$STATE/worker.log" && break
    alive "$STATE/worker.pid" || { echo "the worker exited:" >&2; tail -5 "$STATE/worker.log" >&2; exit 1; }
    sleep 0.5
  done
fi

"$BIN/starter" demo
echo
echo "Temporal UI: http://localhost:$UI_PORT  (server and worker stay up; 'make down' stops them)"
