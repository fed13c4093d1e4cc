#!/usr/bin/env bash
# Stops the worker, the sandbox and the Temporal dev server started by
# scripts/demo.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
STATE=$PWD/.capstan
for name in worker sandbox temporal; do
  pidfile=$STATE/$name.pid
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
rm -f "$STATE/sandbox.env"
