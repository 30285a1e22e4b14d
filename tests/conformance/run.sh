#!/usr/bin/env bash
# Runs the official MCP conformance suite (pinned in package-lock.json) against a server: one
# scenario, or every scenario a spec revision requires. Exits with the CLI's status (1 when a check
# is a FAILURE; with --requirements, when a check of a scored scenario is).
#
#   tests/conformance/run.sh URL SCENARIO [more CLI args, e.g. --verbose]
#   tests/conformance/run.sh URL --requirements REVISION [more CLI args]
#   tests/conformance/run.sh http://localhost:8080/mcp ping
#   tests/conformance/run.sh http://localhost:8080/mcp --requirements 2025-11-25
#
# The packages are installed by scripts/npm-stage into target/conformance-node/ (never inside tests/),
# again only when the lock file changed. Works on Node 20 through an ESM import hook that supplies
# fs.globSync (see globsync-register.mjs).
set -euo pipefail
usage() {
  echo "usage: $0 URL SCENARIO [conformance CLI args...]" >&2
  echo "       $0 URL --requirements REVISION [conformance CLI args...]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
url=$1
shift
if [[ $1 == --requirements ]]; then
  [[ $# -ge 2 ]] || usage
  selection=(--requirements "$2")
  shift 2
else
  selection=(--scenario "$1")
  shift
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
stage="$root/target/conformance-node"
# The hook's shim imports `glob`, so it must sit next to the node_modules that holds it.
"$root/scripts/npm-stage" "$here" "$stage" globsync-register.mjs globsync-hooks.mjs fs-shim.mjs

exec node --import "$stage/globsync-register.mjs" \
  "$stage/node_modules/@modelcontextprotocol/conformance/dist/index.js" \
  server --url "$url" "${selection[@]}" "$@"
