"""FastMCP's proxy in front of one Streamable HTTP MCP server, for the benchmark's peers section.

    fastmcp_proxy.py UPSTREAM_URL PORT [--session-per-call]

Serves Streamable HTTP on http://127.0.0.1:PORT/mcp. By default the proxy holds one connected
backend client and every call goes over its one upstream session (FastMCP's "connected client"
mode; it warns that clients then share that session's context, and it validates results against
their output schema instead of relaying them as they are). With --session-per-call it is
given the URL instead, FastMCP's default, and opens a new upstream session for every request.
Prints `url`, `settings` and `ready` lines for the benchmark; the benchmark waits for the port.
"""

import asyncio
import sys

from fastmcp import Client
from fastmcp.server import create_proxy


async def main() -> None:
    upstream, port = sys.argv[1], int(sys.argv[2])
    per_call = "--session-per-call" in sys.argv[3:]
    if per_call:
        target = upstream
        settings = "a new upstream session per request (FastMCP's default)"
    else:
        # A connected plain Client: FastMCP reuses its session for every request (a connected
        # ProxyClient would be copied into a new session per request).
        target = Client(upstream)
        await target.__aenter__()
        settings = "one shared backend session (a connected Client)"
    proxy = create_proxy(target, name="bench-proxy")
    print(f"url http://127.0.0.1:{port}/mcp", flush=True)
    print(f"settings {settings}, Streamable HTTP, uvicorn, one process", flush=True)
    print("ready", flush=True)
    await proxy.run_http_async(
        show_banner=False, transport="http", host="127.0.0.1", port=port, path="/mcp", log_level="warning"
    )


if __name__ == "__main__":
    asyncio.run(main())
