#!/usr/bin/env bash
# Runs one scenario of the official MCP conformance suite (pinned in package-lock.json) against a
# server and exits with the CLI's status (1 when at least one check is a FAILURE).
#
#   tests/conformance/run.sh URL SCENARIO [more CLI args, e.g. --verbose]
#   tests/conformance/run.sh http://localhost:8080/mcp ping
#
# The packages are installed with `npm ci` into target/conformance-node/ (never inside tests/),
# again only when the lock file changed. Works on Node 20 through an ESM import hook that supplies
# fs.globSync (see globsync-register.mjs).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 URL SCENARIO [conformance CLI args...]" >&2; exit 2; }
url=$1 scenario=$2
shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
stage="$root/target/conformance-node"
mkdir -p "$stage"

# Tests may run several scenarios at once: one installer at a time, the others wait.
exec 9>"$stage/.install.lock"
flock 9
# installed.package-lock.json is a copy of the lock that node_modules was installed from.
if [[ ! -d $stage/node_modules ]] || ! cmp -s "$here/package-lock.json" "$stage/installed.package-lock.json"; then
  echo "conformance: npm ci into $stage" >&2
  rm -f "$stage/installed.package-lock.json"
  cp "$here/package.json" "$here/package-lock.json" "$stage/"
  (cd "$stage" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
  cp "$here/package-lock.json" "$stage/installed.package-lock.json"
fi
# The hook's shim imports `glob`, so it must sit next to the node_modules that holds it.
# Copied only when changed, so a scenario already running never sees a half-written file.
for f in globsync-register.mjs globsync-hooks.mjs fs-shim.mjs; do
  cmp -s "$here/$f" "$stage/$f" || cp "$here/$f" "$stage/$f"
done
exec 9>&-

exec node --import "$stage/globsync-register.mjs" \
  "$stage/node_modules/@modelcontextprotocol/conformance/dist/index.js" \
  server --url "$url" --scenario "$scenario" "$@"
