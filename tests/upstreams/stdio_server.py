#!/usr/bin/env python3
"""A stdio MCP server for gatehouse's tests of local upstreams, on the official Python MCP SDK
(PyPI `mcp` 2.x, `MCPServer`). It reads its secret from the environment, as such servers do.

Tools:
  token_hash  sha256 (hex) of the environment variable API_TOKEN, or "unset" when there is none
  pid         this process's id, as text
  crash       exits the process with status 3 without answering
  leak        writes "the token is <API_TOKEN>" to stderr, then answers "ok"
  flood       writes a line of `before` x's followed by API_TOKEN, then `lines` lines
              "<marker> <n>", to stderr; answers "ok"

Usage: stdio_server.py [--pid-file PATH]   (JSON-RPC on stdin/stdout; the SDK's own logs go to
stderr). With --pid-file, the process appends its id to PATH as it starts.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("stdio-upstream", version="1.0.0", log_level="WARNING")


@server.tool(structured_output=False)
def token_hash() -> str:
    """The sha256 (hex) of API_TOKEN, or "unset"."""
    token = os.environ.get("API_TOKEN")
    return "unset" if token is None else hashlib.sha256(token.encode()).hexdigest()


@server.tool(structured_output=False)
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


@server.tool(structured_output=False)
def crash() -> str:
    """Exits with status 3 at once, leaving the call unanswered."""
    sys.stderr.flush()
    os._exit(3)


@server.tool(structured_output=False)
def leak() -> str:
    """Writes the token to stderr (as a careless server might), then answers "ok"."""
    print(f"the token is {os.environ.get('API_TOKEN', '')}", file=sys.stderr, flush=True)
    return "ok"


@server.tool(structured_output=False)
def flood(before: int, lines: int, marker: str) -> str:
    """Writes API_TOKEN after `before` x's on one line, then `lines` numbered lines, to stderr."""
    print("x" * before + os.environ.get("API_TOKEN", ""), file=sys.stderr)
    for n in range(lines):
        print(f"{marker} {n}", file=sys.stderr)
    sys.stderr.flush()
    return "ok"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--pid-file")
    options = parser.parse_args()
    if options.pid_file:
        with open(options.pid_file, "a", encoding="utf-8") as pids:
            pids.write(f"{os.getpid()}\n")
    server.run("stdio")
