#!/usr/bin/env bash
# IBM's ContextForge gateway in front of one Streamable HTTP MCP server, for the benchmark's peers
# section (bench/peers/setup.sh installs it into target/bench-peers/contextforge).
#
#   bench/peers/contextforge.sh UPSTREAM_URL PORT
#
# Starts `mcpgateway` (plain uvicorn, one worker) on 127.0.0.1:PORT with its SQLite database in a
# mktemp directory (also its working directory, so no stray .env is read), then registers the
# upstream as the gateway `fast` (its tools become `fast-<name>`, e.g. `fast-echo`) and a virtual
# server exposing them. Then it prints, one per line:
#   url http://127.0.0.1:PORT/servers/<id>/mcp    the MCP endpoint clients call (JSON responses)
#   bearer <JWT>                                  clients must send `authorization: Bearer <JWT>`
#   settings <text>                               for the benchmark's table
#   ready
# and stays in the foreground until killed. Processes: this bash, mcpgateway, and its two sandbox
# helpers (forked jq and schema-regex workers, one each). SIGTERM/SIGINT/SIGHUP stop mcpgateway
# and remove the data; if this script is SIGKILLed alone, mcpgateway gets SIGTERM from the kernel
# (PR_SET_PDEATHSIG) and a later run removes the data left behind.
#
# Environment, and why:
#   DATABASE_URL=sqlite:///<tmp>/mcp.db   a throwaway database (migrated at start, ~5 s)
#   USE_STATEFUL_SESSIONS=true            a client's MCP session keeps one upstream session instead
#                                         of one per request (default false: ~2-3x slower)
#   JWT_SECRET_KEY, AUTH_ENCRYPTION_SECRET, PLATFORM_ADMIN_PASSWORD, BASIC_AUTH_PASSWORD,
#   DEFAULT_USER_PASSWORD                 random per run (defaults are weak and warned about); the
#                                         bearer is minted for PLATFORM_ADMIN_EMAIL with the secret
#   MCPGATEWAY_UI_ENABLED=false, MCPGATEWAY_ADMIN_API_ENABLED=false   no admin UI or admin API
#                                         (/gateways, /tools and /servers are the plain REST API)
#   SSRF_ALLOW_LOCALHOST=true, SSRF_ALLOW_PRIVATE_NETWORKS=true       the upstream is on loopback
#   RATE_LIMITING_ENABLED=false           its per-client limits would refuse a load test
#   CACHE_TYPE=memory                     one worker, no Redis; the default caches in the database
#   JQ_FILTER_WORKERS=1, REGEX_WORKERS=1  one process per sandbox pool instead of two (not on the
#                                         tools/call path)
#   LOG_LEVEL=ERROR                       it would otherwise log to stderr per request
set -euo pipefail
[[ $# -eq 2 && $2 =~ ^[0-9]+$ ]] || { echo "usage: $0 UPSTREAM_URL PORT" >&2; exit 2; }
upstream=$1 port=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv="$(cd "$here/../.." && pwd)/target/bench-peers/contextforge"
[[ -x $venv/bin/mcpgateway ]] || { echo "$0: $venv/bin/mcpgateway missing: run bench/peers/setup.sh" >&2; exit 1; }

# Data of earlier runs that were SIGKILLed (their owner's pid no longer runs).
tmp=${TMPDIR:-/tmp}
for old in "$tmp"/bench-contextforge.*; do
  [[ -d $old ]] || continue
  owner=$(cat "$old/owner" 2>/dev/null || true)
  [[ -n $owner ]] && kill -0 "$owner" 2>/dev/null && continue
  [[ -z $owner && -n $(find "$old" -maxdepth 0 -mmin -1) ]] && continue # just made by another run
  rm -rf "$old"
done
data=$(mktemp -d "$tmp/bench-contextforge.XXXXXX")
echo $$ >"$data/owner"
cd "$data"

gateway=
stop() {
  trap - EXIT INT TERM HUP
  if [[ -n $gateway ]] && kill -0 "$gateway" 2>/dev/null; then
    kill -TERM "$gateway" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$gateway" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$gateway" 2>/dev/null; then # graceful shutdown took over 5 s
      helpers=$(pgrep -P "$gateway" || true)
      kill -KILL "$gateway" $helpers 2>/dev/null || true
    fi
  fi
  rm -rf "$data"
}
trap stop EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
export HOST=127.0.0.1 PORT=$port
export DATABASE_URL="sqlite:///$data/mcp.db"
export JWT_SECRET_KEY=$(secret) AUTH_ENCRYPTION_SECRET=$(secret)
export PLATFORM_ADMIN_EMAIL=admin@example.com PLATFORM_ADMIN_PASSWORD="Ad-$(secret)"
export BASIC_AUTH_PASSWORD="Ba-$(secret)" DEFAULT_USER_PASSWORD="Du-$(secret)"
export MCPGATEWAY_UI_ENABLED=false MCPGATEWAY_ADMIN_API_ENABLED=false
export USE_STATEFUL_SESSIONS=true
export SSRF_ALLOW_LOCALHOST=true SSRF_ALLOW_PRIVATE_NETWORKS=true
export RATE_LIMITING_ENABLED=false
export CACHE_TYPE=memory JQ_FILTER_WORKERS=1 REGEX_WORKERS=1 LOG_LEVEL=ERROR

# mcpgateway asks the kernel for SIGTERM when this script dies, then becomes mcpgateway (same pid).
"$venv/bin/python" -c '
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("contextforge.sh exited before mcpgateway started")
os.execv(sys.argv[2], sys.argv[2:])
' $$ "$venv/bin/mcpgateway" --host 127.0.0.1 --port "$port" --workers 1 >&2 </dev/null &
gateway=$!

base="http://127.0.0.1:$port"
for i in $(seq 1 1200); do
  kill -0 "$gateway" 2>/dev/null || { echo "$0: mcpgateway exited while starting" >&2; exit 1; }
  curl -sf "$base/health" >/dev/null 2>&1 && break
  ((i < 1200)) || { echo "$0: mcpgateway not healthy within 240 s" >&2; exit 1; }
  sleep 0.2
done
token=$("$venv/bin/python" -m mcpgateway.utils.create_jwt_token --username "$PLATFORM_ADMIN_EMAIL" \
  --exp 1440 --secret "$JWT_SECRET_KEY" 2>/dev/null | tail -n 1)
api() { curl -sS -f -H "authorization: Bearer $token" -H 'content-type: application/json' "$@"; }
field() { "$venv/bin/python" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

gw=$(api -X POST "$base/gateways" -d "{\"name\":\"fast\",\"url\":\"$upstream\",\"transport\":\"STREAMABLEHTTP\"}" | field 'd["id"]')
# The upstream's tools (their ids), once the gateway has listed them.
tools='[]'
for _ in $(seq 1 50); do
  tools=$(api "$base/tools" | field "json.dumps([t['id'] for t in d if t.get('gatewayId') == '$gw'])")
  [[ $tools != '[]' ]] && break
  sleep 0.2
done
[[ $tools != '[]' ]] || { echo "$0: the upstream's tools did not appear in 10 s" >&2; exit 1; }
server=$(api -X POST "$base/servers" -d "{\"server\":{\"name\":\"bench\",\"associated_tools\":$tools}}" | field 'd["id"]')

echo "url $base/servers/$server/mcp"
echo "bearer $token"
echo "settings stateful sessions (USE_STATEFUL_SESSIONS), SQLite, in-memory cache, no rate limits, uvicorn 1 worker + 2 sandbox helpers"
echo "ready"
wait "$gateway"
