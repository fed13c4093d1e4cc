#!/usr/bin/env bash
# The pinned Jaeger, the collector the trace test (internal/e2e
# TestLongTraceInJaeger) exports the demo task's spans to and reads them
# back from.
#
#   eval "$(scripts/jaeger.sh)"   # prints: export CAPSTAN_JAEGER_BIN=...
#   make test-long                # the trace test now runs
#
# Jaeger v1.75.0's cmd/jaeger (Jaeger v2: an OpenTelemetry Collector build
# with Jaeger's storage and query extensions) is a Go tool of its own
# module, tools/jaeger, not of capstan's: its ~300 modules would otherwise
# join capstan's module graph and move shared ones (gRPC, OpenTelemetry,
# genproto) for the product. It builds from the Go module proxy into
# .bin/jaeger (about 6 minutes of CPU; 18 on two busy cores); running it
# again reuses a build of the same version. Everything goes to stderr but
# the export line.
set -euo pipefail

VERSION=v1.75.0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${CAPSTAN_JAEGER_BIN:-$ROOT/.bin/jaeger}
STAMP=$BIN.version

say() { echo "jaeger.sh: $*" >&2; }

if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$VERSION" ]; then
  say "jaeger $VERSION: $BIN"
else
  say "building jaeger $VERSION (tools/jaeger) into $BIN"
  mkdir -p "$(dirname "$BIN")"
  (cd "$ROOT/tools/jaeger" && go build -o "$BIN" github.com/jaegertracing/jaeger/cmd/jaeger) >&2
  echo "$VERSION" >"$STAMP"
fi
echo "export CAPSTAN_JAEGER_BIN=$(printf %q "$BIN")"
