#!/usr/bin/env bash
# Starts the TypeScript SDK's example Streamable HTTP server (the benchmark baseline) on PORT.
#
#   bench/ts-server/run.sh PORT        # serves http://127.0.0.1:PORT/mcp until killed (SIGINT/SIGTERM)
#
# The SDK version is pinned in package-lock.json and installed with `npm ci` into
# target/bench-ts-server/ (again only when the lock file changed). Notes for load generators:
# it only accepts Host localhost/127.0.0.1/[::1], caps sessions at 1000 and keeps every response
# of a session in memory, so DELETE sessions or restart it between runs.
set -euo pipefail
[[ $# -eq 1 && $1 =~ ^[0-9]+$ ]] || { echo "usage: $0 PORT" >&2; exit 2; }
port=$1

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
stage="$root/target/bench-ts-server"
"$root/scripts/npm-stage" "$here" "$stage"

# stdout off: the example logs every request, which would make the benchmark measure the logging.
MCP_PORT=$port exec node "$stage/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js" >/dev/null
