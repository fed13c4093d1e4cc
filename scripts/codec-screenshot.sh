#!/usr/bin/env bash
# codec-screenshot.sh: the Temporal UI showing an encrypted task in
# plaintext through `starter codec-server` (docs/images/codec-ui.png).
# A dev server with its UI, the sandbox, a worker and the codec server, all
# on ports of their own, one demo task, then headless chromium. Everything
# it starts it stops.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The output path, from the caller's directory when relative.
OUT=${1:-$ROOT/docs/images/codec-ui.png}
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
cd "$ROOT"
BIN=$PWD/.bin
PORT=${PORT:-27233}; UI_PORT=${UI_PORT:-28233}; CODEC_PORT=${CODEC_PORT:-28089}
STATE=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$STATE"; }
trap cleanup EXIT
go build -o "$BIN/worker" ./cmd/worker && go build -o "$BIN/starter" ./starter && go build -o "$BIN/sandbox" ./internal/sandbox/cmd/sandbox

export CAPSTAN_CODEC_KEYS="ui-demo:$(head -c 32 /dev/urandom | base64)"
export CAPSTAN_CODEC_AUTH=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export TEMPORAL_ADDRESS=127.0.0.1:$PORT CAPSTAN_UI_URL=http://127.0.0.1:$UI_PORT
export CAPSTAN_LEDGER_DSN=sqlite://$STATE/ledger.db CAPSTAN_METRICS_ADDR= CAPSTAN_STREAM_ADDR=

# The server settings capstan relies on, as `make demo` starts its server.
server_settings=()
while IFS= read -r flag; do server_settings+=("$flag"); done < <(scripts/dev-server-flags.sh)
"$BIN/temporal" server start-dev --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT" --log-level error \
  "${server_settings[@]}" --ui-codec-endpoint "http://127.0.0.1:$CODEC_PORT/$CAPSTAN_CODEC_AUTH" >"$STATE/temporal.log" 2>&1 &
pids+=($!)
"$BIN/starter" codec-server --addr "127.0.0.1:$CODEC_PORT" >"$STATE/codec.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do "$BIN/temporal" operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1 && break; sleep 0.5; done
"$BIN/sandbox" --env-file "$STATE/sandbox.env" --task-queue capstan-sandbox >"$STATE/sandbox.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do [ -s "$STATE/sandbox.env" ] && break; sleep 0.25; done
(set -a; . "$STATE/sandbox.env"; set +a; exec "$BIN/worker" --log-format text) >"$STATE/worker.log" 2>&1 &
pids+=($!)
# The worker registers capstan's search attributes before it polls; the
# starter refuses a task until they exist.
worker=$!
for _ in $(seq 1 120); do grep -q "polling task queue" "$STATE/worker.log" && break; kill -0 "$worker" 2>/dev/null || break; sleep 0.5; done
grep -q "polling task queue" "$STATE/worker.log" || { echo "the worker did not start polling:" >&2; tail -5 "$STATE/worker.log" >&2; exit 1; }
WID=$("$BIN/starter" demo --json | sed -n 's/.*"workflow_id": *"\([^"]*\)".*/\1/p' | head -1)
echo "task $WID"
URL="http://127.0.0.1:$UI_PORT/namespaces/default/workflows/$WID"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1000 \
  --virtual-time-budget=15000 --screenshot="$OUT" "$URL" 2>/dev/null
echo "screenshot of $URL in $OUT"
