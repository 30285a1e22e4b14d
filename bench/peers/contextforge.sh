#!/usr/bin/env bash
# IBM's ContextForge gateway in front of one Streamable HTTP MCP server, for the benchmark's peers
# section (bench/peers/setup.sh installs it into target/bench-peers/contextforge).
#
#   bench/peers/contextforge.sh UPSTREAM_URL PORT
#
# Starts `mcpgateway` (uvicorn, one worker) on 127.0.0.1:PORT with a SQLite database in a
# temporary directory, no UI and no admin API, a JWT secret of its own, stateful MCP sessions
# (USE_STATEFUL_SESSIONS: it forwards a client's session to one upstream session instead of one
# per request), loopback upstreams allowed past its SSRF guard, rate limiting off. It registers the upstream as the
# gateway `fast` and a virtual server exposing its tools, then prints `url` (the virtual server's
# MCP endpoint), `bearer` (a token the clients must send), `settings` and `ready`, and stays in the
# foreground until killed; the benchmark kills its whole process group.
set -euo pipefail
[[ $# -eq 2 && $2 =~ ^[0-9]+$ ]] || { echo "usage: $0 UPSTREAM_URL PORT" >&2; exit 2; }
upstream=$1 port=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv="$here/../../target/bench-peers/contextforge"
data=$(mktemp -d)
trap 'kill 0 2>/dev/null; rm -rf "$data"' EXIT

export HOST=127.0.0.1 PORT=$port
export DATABASE_URL="sqlite:///$data/mcp.db"
secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
export JWT_SECRET_KEY=$(secret) AUTH_ENCRYPTION_SECRET=$(secret)
export PLATFORM_ADMIN_EMAIL=admin@example.com PLATFORM_ADMIN_PASSWORD="Ad-$(secret)"
export BASIC_AUTH_PASSWORD="Ba-$(secret)" DEFAULT_USER_PASSWORD="Du-$(secret)"
export MCPGATEWAY_UI_ENABLED=false MCPGATEWAY_ADMIN_API_ENABLED=false
export USE_STATEFUL_SESSIONS=true
export SSRF_ALLOW_LOCALHOST=true SSRF_ALLOW_PRIVATE_NETWORKS=true
# Its per-client rate limits (and 15-minute lockout) would refuse a load test outright.
export RATE_LIMITING_ENABLED=false
export CACHE_TYPE=memory LOG_LEVEL=ERROR
"$venv/bin/mcpgateway" --host 127.0.0.1 --port "$port" --workers 1 >&2 &

base="http://127.0.0.1:$port"
for _ in $(seq 1 600); do
  curl -sf "$base/health" >/dev/null 2>&1 && break
  sleep 0.2
done
token=$("$venv/bin/python" -m mcpgateway.utils.create_jwt_token --username "$PLATFORM_ADMIN_EMAIL" \
  --exp 120 --secret "$JWT_SECRET_KEY" 2>/dev/null | tail -n 1)
api() { curl -sS -f -H "authorization: Bearer $token" -H 'content-type: application/json' "$@"; }
api -X POST "$base/gateways" -d "{\"name\":\"fast\",\"url\":\"$upstream\",\"transport\":\"STREAMABLEHTTP\"}" >&2
tools=$(api "$base/tools" | "$venv/bin/python" -c 'import json,sys; print(json.dumps([t["id"] for t in json.load(sys.stdin)]))')
server=$(api -X POST "$base/servers" -d "{\"server\":{\"name\":\"bench\",\"associated_tools\":$tools}}" \
  | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "url $base/servers/$server/mcp"
echo "bearer $token"
echo "settings stateful sessions, SQLite, in-memory cache, no rate limits, mcpgateway --workers 1"
echo "ready"
wait
