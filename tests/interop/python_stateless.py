#!/usr/bin/env python3
"""A gated call through the official Python MCP SDK's `Client` (PyPI `mcp`, 2.x) on protocol
2026-07-28, where a request that needs the user answers `input_required`.

The Rust integration tests run this as a subprocess. It connects to --url with --mode (`auto`
sends `server/discover` first; `2026-07-28` adopts the revision at once), calls --call with the
JSON object --args, and lets the SDK drive the input_required rounds: the SDK hands each URL-mode
`elicitation/create` to the elicitation callback, which prints one line
  {"event": "elicitation", "mode", "url", "message"}
and answers with --action: `accept` (the user agreed to open the link; the default), `decline` or
`cancel`. The SDK retries with that answer and the request state; after an accept the server holds
the retry until the user has finished in the browser (the test does that part over HTTP, on
whichever replica it likes). With --no-elicitation the client has no elicitation callback, so it
declares no elicitation capability at all (as an application that never set one does). A form-mode
elicitation accepted gets --form-content (a JSON object) as its content. With --sampling-reply TEXT
the client declares `sampling` and answers each sampling/createMessage with TEXT (model
"interop-model"), printing {"event": "sampling", "params"}; with --root URI (repeatable) it
declares `roots` and answers roots/list with those roots, printing {"event": "roots"}. When the
call returns it prints a final line
  {"event": "result", "protocolVersion", "result": {"isError", "content", "structuredContent"}}

Every stdout line is one JSON object, flushed at once. Exit codes: 0 success; 2 the call answered
with a JSON-RPC error (as JSON on stderr); 1 anything else, including --timeout (seconds) running out.

Usage:
  python_stateless.py --url http://127.0.0.1:PORT/mcp --call me [--args '{}'] [--mode auto]
                      [--action accept|decline|cancel | --no-elicitation] [--form-content JSON]
                      [--sampling-reply TEXT] [--root URI]... [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mcp.client.client import Client
from mcp.client.session import ClientRequestContext
from mcp.types import (
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    Implementation,
    ListRootsResult,
    Root,
    TextContent,
)
from python_client import result_to_json, run_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="gatehouse's Streamable HTTP endpoint")
    parser.add_argument("--call", required=True, metavar="TOOL", help="tool to call")
    parser.add_argument("--args", default="{}", metavar="JSON", help="tool arguments as a JSON object")
    parser.add_argument("--mode", default="auto", help="the Client's mode: auto, or a protocol version")
    parser.add_argument(
        "--action",
        choices=["accept", "decline", "cancel"],
        default="accept",
        help="the answer to every elicitation",
    )
    parser.add_argument(
        "--no-elicitation",
        action="store_true",
        help="give the client no elicitation callback (it then declares no elicitation capability)",
    )
    parser.add_argument("--form-content", default="{}", metavar="JSON", help="content of an accepted form")
    parser.add_argument("--sampling-reply", metavar="TEXT", help="declare sampling and answer with TEXT")
    parser.add_argument("--root", action="append", default=[], metavar="URI", help="declare roots; one of them")
    parser.add_argument("--timeout", type=float, default=60.0, help="overall timeout in seconds")
    return parser.parse_args(argv)


def emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


async def run(opts: argparse.Namespace, arguments: dict[str, Any]) -> dict[str, Any]:
    url, tool, mode, action = opts.url, opts.call, opts.mode, opts.action
    client_info = Implementation(name="gatehouse-interop-python-stateless", version="1.0.0")

    async def on_elicitation(_context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        emit(
            {
                "event": "elicitation",
                "mode": getattr(params, "mode", None),
                "url": getattr(params, "url", None),
                "message": params.message,
            }
        )
        form = getattr(params, "mode", "form") in (None, "form")
        content = json.loads(opts.form_content) if form and action == "accept" else None
        return ElicitResult(action=action, content=content)

    async def on_sampling(_context: ClientRequestContext, params: Any) -> CreateMessageResult:
        emit({"event": "sampling", "params": params.model_dump(by_alias=True, mode="json", exclude_none=True)})
        reply = TextContent(type="text", text=opts.sampling_reply)
        return CreateMessageResult(role="assistant", content=reply, model="interop-model", stop_reason="endTurn")

    async def on_roots(_context: ClientRequestContext) -> ListRootsResult:
        emit({"event": "roots"})
        return ListRootsResult(roots=[Root(uri=uri, name=f"root {i}") for i, uri in enumerate(opts.root)])

    callbacks: dict[str, Any] = {}
    if not opts.no_elicitation:
        callbacks["elicitation_callback"] = on_elicitation
    if opts.sampling_reply is not None:
        callbacks["sampling_callback"] = on_sampling
    if opts.root:
        callbacks["list_roots_callback"] = on_roots
    async with Client(url, mode=mode, client_info=client_info, **callbacks) as client:
        result = await client.call_tool(tool, arguments)
        version = client.protocol_version
    return {"event": "result", "protocolVersion": version, "result": result_to_json(result)}


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    return run_main(opts, lambda arguments: run(opts, arguments), "stateless client")


if __name__ == "__main__":
    sys.exit(main())
