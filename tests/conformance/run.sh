#!/usr/bin/env bash
# Runs one scenario of the official MCP conformance suite (pinned in package-lock.json) against a
# server and exits with the CLI's status (1 when at least one check is a FAILURE).
#
#   tests/conformance/run.sh URL SCENARIO [more CLI args, e.g. --verbose]
#   tests/conformance/run.sh http://localhost:8080/mcp ping
#
# The packages are installed by scripts/npm-stage into target/conformance-node/ (never inside tests/),
# again only when the lock file changed. Works on Node 20 through an ESM import hook that supplies
# fs.globSync (see globsync-register.mjs).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 URL SCENARIO [conformance CLI args...]" >&2; exit 2; }
url=$1 scenario=$2
shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
stage="$root/target/conformance-node"
# The hook's shim imports `glob`, so it must sit next to the node_modules that holds it.
"$root/scripts/npm-stage" "$here" "$stage" globsync-register.mjs globsync-hooks.mjs fs-shim.mjs

exec node --import "$stage/globsync-register.mjs" \
  "$stage/node_modules/@modelcontextprotocol/conformance/dist/index.js" \
  server --url "$url" --scenario "$scenario" "$@"
