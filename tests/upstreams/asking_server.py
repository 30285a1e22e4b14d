#!/usr/bin/env python3
"""A plain stdio MCP server for gatehouse's tests, on the standard library alone: it behaves as
many real servers do on a healthy start, and asks its client for things during a call.

On start it writes a banner line to stderr ("asking-server ready on stdio"), as many servers do;
once initialized it asks its client for `roots/list` (as the reference server does), and writes
"roots/list answered: result" (or "error") to stderr when the answer comes.

Tools:
  hello   answers "hello"
  ask     sends `sampling/createMessage` to its client, waits for the answer, and answers
          "sampled: <the answer's text>" (or "sampling failed: <error>")
"""

from __future__ import annotations

import json
import sys
import threading
import uuid

BANNER = "asking-server ready on stdio"
LOCK = threading.Lock()
ROOTS: set[str] = set()


def send(message: dict) -> None:
    with LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def result(request_id, value) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def text(request_id, words: str) -> dict:
    return result(request_id, {"content": [{"type": "text", "text": words}], "isError": False})


def request(method: str, params: dict) -> str:
    request_id = f"ask-{uuid.uuid4()}"
    send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    return request_id


def ask(method: str, params: dict):
    """Sends a request and reads stdin until its answer: the result, or the error."""
    request_id = request(method, params)
    for line in sys.stdin:
        reply = json.loads(line)
        if reply.get("id") == request_id and "method" not in reply:
            return reply
    return {}


TOOLS = [
    {"name": "hello", "description": "Says hello.", "inputSchema": {"type": "object"}},
    {"name": "ask", "description": "Asks the client's model for a colour.", "inputSchema": {"type": "object"}},
]


def handle(message: dict) -> dict | None:
    method = message.get("method")
    request_id = message.get("id")
    params = message.get("params") or {}
    if method == "notifications/initialized":
        ROOTS.add(request("roots/list", {}))
        return None
    if method is None and request_id in ROOTS:
        answered = "result" if "result" in message else "error"
        print(f"roots/list answered: {answered}", file=sys.stderr, flush=True)
        return None
    if method is None or request_id is None:
        return None
    if method == "initialize":
        return result(
            request_id,
            {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "asking-server", "version": "1.0.0"},
            },
        )
    if method == "ping":
        return result(request_id, {})
    if method == "tools/list":
        return result(request_id, {"tools": TOOLS})
    if method != "tools/call":
        return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}}
    name = params.get("name")
    if name == "hello":
        return text(request_id, "hello")
    if name == "ask":
        asked = {
            "messages": [{"role": "user", "content": {"type": "text", "text": "name a colour"}}],
            "maxTokens": 10,
        }
        reply = ask("sampling/createMessage", asked)
        if "result" in reply:
            return text(request_id, f"sampled: {reply['result'].get('content', {}).get('text')}")
        return text(request_id, f"sampling failed: {json.dumps(reply.get('error'))}")
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"no tool {name}"}}


def main() -> None:
    print(BANNER, file=sys.stderr, flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        answer = handle(json.loads(line))
        if answer is not None:
            send(answer)


if __name__ == "__main__":
    main()
