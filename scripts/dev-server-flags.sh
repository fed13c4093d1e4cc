#!/usr/bin/env bash
# Prints, one per line, the dev server's flags for the settings in
# deploy/temporal/dynamicconfig.yaml: --dynamic-config-value=KEY=VALUE.
# `make demo` starts its dev server with them; testenv.DevServerFlags reads
# the same file for the tests' (deploy's tests check both agree). It reads
# the file's one shape only — a top-level key, then `  - value: JSON` — which
# the same tests hold the file to.
set -euo pipefail
file="$(cd "$(dirname "$0")/.." && pwd)/deploy/temporal/dynamicconfig.yaml"
awk '
  /^[A-Za-z][^:]*:[ \t]*$/ { key = $0; sub(/:[ \t]*$/, "", key); next }
  /^  - value:/ { v = $0; sub(/^  - value:[ \t]*/, "", v); sub(/[ \t]+$/, "", v); print "--dynamic-config-value=" key "=" v }
' "$file"
