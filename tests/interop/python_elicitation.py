#!/usr/bin/env python3
"""Interop URL-elicitation client for gatehouse, built on the official Python MCP SDK (PyPI `mcp`, 2.x).

The Rust integration tests run this as a subprocess to prove that a third-party
client can complete gatehouse's sign-in flow over Streamable HTTP (protocol
2025-11-25) using URL-mode elicitation. It:

  1. connects to --url with an elicitation callback, so the client declares
     {"elicitation": {"form": {}, "url": {}}}, and a message handler that records
     every `notifications/elicitation/complete` elicitationId,
  2. performs the `initialize` handshake and waits until the GET SSE stream (on
     which the completion notifications arrive) is open,
  3. calls --call with the JSON object given in --args; the call must fail with
     JSON-RPC error -32042 (URL elicitation required). For every entry of
     `data.elicitations` it prints one line on stdout:
       {"event": "elicitation", "elicitationId", "url", "message"}
  4. waits for a completion notification for every listed elicitationId, printing
       {"event": "completed", "elicitationId"}
     per id, in arrival order,
  5. retries the call, closes the session (HTTP DELETE) and prints a final line
       {"event": "result", "result": {"isError", "content", "structuredContent"}}

With --stdio GATEHOUSE the script launches `GATEHOUSE stdio` instead (the SDK's stdio
client, the environment passed on) and speaks to it over its stdin and stdout: there is no
GET stream to wait for in step 2, the completion notifications arrive on stdout, and a line
of stdout that is not a JSON-RPC message is a failure. With --basic-auth USER:PASSWORD every
HTTP request carries HTTP basic auth (a reverse proxy in front of gatehouse asks for it); with
--user NAME every HTTP request names NAME in X-Forwarded-User (gatehouse's header identity). With
--list-tools it prints
  {"event": "tools", "names": [...]}
after initializing.

With --in-call the tool is expected to ask within the call instead (gatehouse's
`elicit = "request"`): the server sends `elicitation/create` (URL mode) on the
call's own SSE stream and the call waits for the user. Then:

  3'. the elicitation callback prints, per request,
       {"event": "elicitation", "elicitationId", "url", "message", "mode"}
      and answers with --action (accept, decline or cancel),
  4'. with --progress, call_tool gets a progress callback, which prints
       {"event": "progress", "progress", "total", "message"}
      per notifications/progress for the call,
  5'. the call itself must answer with a result (a -32042 error, or a result
      before any elicitation request, is a failure), printed as the final
      "result" line as above.

Every stdout line is one JSON object, flushed as soon as it is printed, so the
caller can act on the elicitation lines (open the URL) while this script waits.

Exit codes: 0 success; 2 the retried call answered with a JSON-RPC error (details
as JSON on stderr: {"error": {"code", "message", "data"}}); 1 any other failure,
including a first call that does not fail with -32042 (or, with --in-call, one
that does, or that never asks) and a --timeout (overall, in seconds) that runs out.

Requires Python >= 3.11 (uses the built-in BaseExceptionGroup).

Usage:
  python_elicitation.py --url http://127.0.0.1:PORT/mcp --call whoami [--args '{}'] [--timeout 60]
  python_elicitation.py --url ... --call pay --args '{...}' --in-call [--action decline] [--progress]
  python_elicitation.py --stdio target/debug/gatehouse --list-tools --call me
  python_elicitation.py --url http://127.0.0.1:PORT/mcp --basic-auth demo:demo-password --call me
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, MCPError
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from python_client import result_to_json, run_main
from mcp.types import (
    URL_ELICITATION_REQUIRED,
    CallToolResult,
    ElicitCompleteNotification,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    ErrorData,
    Implementation,
)


class ProtocolFailure(RuntimeError):
    """The server broke the expected flow; reported as exit code 1, never 2."""


@dataclass
class Flow:
    """State shared between the main task, the message handler and the HTTP hook."""

    # elicitationIds from notifications/elicitation/complete, in arrival order (unbounded buffer).
    completions_in: MemoryObjectSendStream[str] = field(init=False)
    completions_out: MemoryObjectReceiveStream[str] = field(init=False)
    # Set once the GET SSE stream answered; get_status holds its HTTP status.
    get_answered: anyio.Event = field(default_factory=anyio.Event)
    get_status: int | None = None
    phase: str = "connecting"
    pending: list[str] = field(default_factory=list)
    # Lines of the server's stdout that were not JSON-RPC messages (--stdio).
    bad_lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.completions_in, self.completions_out = anyio.create_memory_object_stream[str](math.inf)

    def describe(self) -> str:
        if self.phase == "waiting for completion" and self.pending:
            return f"{self.phase} of elicitationId(s) {self.pending}"
        return self.phase


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server = parser.add_mutually_exclusive_group(required=True)
    server.add_argument("--url", help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
    server.add_argument("--stdio", metavar="GATEHOUSE", help="launch `GATEHOUSE stdio` and speak over its stdin/stdout")
    parser.add_argument("--basic-auth", metavar="USER:PASSWORD", help="HTTP basic auth on every request")
    parser.add_argument("--user", metavar="NAME", help="X-Forwarded-User on every request")
    parser.add_argument("--list-tools", action="store_true", help="print the tools' names after initializing")
    parser.add_argument("--call", required=True, metavar="TOOL", help="tool to call")
    parser.add_argument("--args", default="{}", metavar="JSON", help="tool arguments as a JSON object")
    parser.add_argument("--timeout", type=float, default=60.0, help="overall timeout in seconds")
    parser.add_argument(
        "--in-call", action="store_true", help="expect elicitation/create within the call instead of -32042"
    )
    parser.add_argument(
        "--action",
        choices=["accept", "decline", "cancel"],
        default="accept",
        help="the answer to in-call elicitation requests",
    )
    parser.add_argument("--progress", action="store_true", help="ask for progress notifications (with --in-call)")
    opts = parser.parse_args(argv)
    if (opts.action != "accept" or opts.progress) and not opts.in_call:
        parser.error("--action and --progress need --in-call")
    if opts.basic_auth is not None and (opts.stdio or ":" not in opts.basic_auth):
        parser.error("--basic-auth needs --url and the form USER:PASSWORD")
    return opts


def emit(event: dict[str, Any]) -> None:
    """One JSON object per stdout line, flushed so the caller sees it immediately."""
    print(json.dumps(event), flush=True)


def parse_elicitations(err: MCPError) -> list[dict[str, Any]]:
    """Validate `data.elicitations` of a -32042 error; return [{"elicitationId", "url", "message"}]."""
    data = err.data
    raw = data.get("elicitations") if isinstance(data, dict) else None
    if not isinstance(raw, list) or not raw:
        raise ProtocolFailure(f"-32042 error without a non-empty data.elicitations list: data={json.dumps(data)}")
    entries: list[dict[str, Any]] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ProtocolFailure(f"data.elicitations entry is not an object: {json.dumps(item)}")
        if item.get("mode") != "url":
            raise ProtocolFailure(f"data.elicitations entry is not mode \"url\": {json.dumps(item)}")
        eid, url, message = item.get("elicitationId"), item.get("url"), item.get("message")
        if not isinstance(eid, str) or not eid or not isinstance(url, str) or not url:
            raise ProtocolFailure(f"data.elicitations entry lacks elicitationId/url strings: {json.dumps(item)}")
        if not isinstance(message, str):
            raise ProtocolFailure(f"data.elicitations entry lacks a message string: {json.dumps(item)}")
        entries.append({"elicitationId": eid, "url": url, "message": message})
    ids = [entry["elicitationId"] for entry in entries]
    if len(set(ids)) != len(ids):
        raise ProtocolFailure(f"data.elicitations repeats an elicitationId: {ids}")
    return entries


@dataclass
class InCall:
    """--in-call: how to answer elicitation/create, and whether to ask for progress."""

    action: str
    progress: bool
    asked: int = 0


async def call_in_call(session: ClientSession, tool: str, arguments: dict[str, Any], in_call: InCall) -> CallToolResult:
    """The call that asks within itself: it must answer with a result, after asking at least once."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        emit({"event": "progress", "progress": progress, "total": total, "message": message})

    try:
        result = await session.call_tool(tool, arguments, progress_callback=on_progress if in_call.progress else None)
    except MCPError as err:
        if err.code == URL_ELICITATION_REQUIRED:
            raise ProtocolFailure(
                f"expected elicitation/create within the call, got error {err.code}: {json.dumps(err.data)}"
            ) from err
        raise
    if not in_call.asked:
        raise ProtocolFailure(
            f"the call answered without sending elicitation/create: {json.dumps(result_to_json(result))}"
        )
    return result


@asynccontextmanager
async def http_transport(url: str, flow: Flow, basic_auth: str | None, user: str | None):  # type: ignore[no-untyped-def]
    """Streamable HTTP, noting when the GET SSE stream answers; with basic auth and the user when given."""

    async def on_response(response: httpx2.Response) -> None:
        # Fires when the response headers arrive, i.e. before the SSE body is read.
        if response.request.method != "GET" or response.is_redirect:
            return
        if flow.get_status is None or response.is_success:
            flow.get_status = response.status_code
        flow.get_answered.set()

    auth = httpx2.BasicAuth(*basic_auth.split(":", 1)) if basic_auth is not None else None
    headers = {"X-Forwarded-User": user} if user is not None else None
    http_client = create_mcp_http_client(headers=headers, auth=auth)
    http_client.event_hooks = {"response": [on_response]}
    # The client is ours, so we close it; the transport still sends DELETE with the
    # Mcp-Session-Id on exit (terminate_on_close=True), before the session is left.
    async with http_client, streamable_http_client(url, http_client=http_client) as streams:
        yield streams


def stdio_transport(gatehouse: str) -> AbstractAsyncContextManager[Any]:
    """`gatehouse stdio` as a child process, with this script's environment."""
    return stdio_client(StdioServerParameters(command=gatehouse, args=["stdio"], env=dict(os.environ)))


async def run(opts: argparse.Namespace, arguments: dict[str, Any], flow: Flow, in_call: InCall | None) -> dict[str, Any]:
    tool = opts.call
    client_info = Implementation(name="gatehouse-interop-python-elicitation", version="1.0.0")

    async def elicitation_callback(
        context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        if in_call is None:
            # Without --in-call no elicitation/create is expected; the callback declares the capability.
            return ElicitResult(action="decline")
        in_call.asked += 1
        event: dict[str, Any] = {"event": "elicitation", "mode": params.mode, "message": params.message}
        if isinstance(params, ElicitRequestURLParams):
            event |= {"elicitationId": params.elicitation_id, "url": params.url}
        emit(event)
        return ElicitResult(action=in_call.action)

    async def message_handler(message: IncomingMessage) -> None:
        if isinstance(message, ElicitCompleteNotification):
            flow.completions_in.send_nowait(message.params.elicitation_id)
        elif isinstance(message, Exception) and opts.stdio:
            # Over stdio an exception is a line of stdout that is not a JSON-RPC message.
            flow.bad_lines.append(repr(message))
        # Over HTTP transport-level exceptions also land here; the SDK retries the GET stream
        # itself, and a stream that never delivers shows up as the timeout, so they are ignored.

    transport = stdio_transport(opts.stdio) if opts.stdio else http_transport(opts.url, flow, opts.basic_auth, opts.user)
    async with transport as (read_stream, write_stream):
        async with ClientSession(
            read_stream,
            write_stream,
            elicitation_callback=elicitation_callback,
            message_handler=message_handler,
            client_info=client_info,
        ) as session:
            flow.phase = "initializing"
            await session.initialize()
            if opts.list_tools:
                listed = await session.list_tools()
                emit({"event": "tools", "names": [t.name for t in listed.tools]})

            if in_call is not None:
                flow.phase = f"calling {tool} (expecting elicitation/create within the call)"
                result = await call_in_call(session, tool, arguments, in_call)
                flow.phase = "closing the session"
                return {"event": "result", "result": result_to_json(result)}

            # The SDK opens the GET SSE stream once notifications/initialized is sent; the
            # completion notifications travel on it, so make sure it is open before calling.
            if not opts.stdio:
                flow.phase = "waiting for the GET SSE stream"
                await flow.get_answered.wait()
                if flow.get_status is None or not 200 <= flow.get_status < 300:
                    raise ProtocolFailure(f"GET SSE stream not opened: HTTP {flow.get_status}")

            flow.phase = f"calling {tool} (expecting -32042)"
            try:
                first = await session.call_tool(tool, arguments)
            except MCPError as err:
                if err.code != URL_ELICITATION_REQUIRED:
                    detail = json.dumps({"code": err.code, "message": err.message, "data": err.data})
                    raise ProtocolFailure(f"expected error {URL_ELICITATION_REQUIRED}, got {detail}") from err
                entries = parse_elicitations(err)
            else:
                raise ProtocolFailure(
                    f"expected error {URL_ELICITATION_REQUIRED}, but the call succeeded: "
                    f"{json.dumps(result_to_json(first))}"
                )
            for entry in entries:
                emit({"event": "elicitation", **entry})

            # Completions may have arrived before the error response; they are buffered in order.
            flow.phase = "waiting for completion"
            flow.pending = [entry["elicitationId"] for entry in entries]
            while flow.pending:
                eid = await flow.completions_out.receive()
                if eid in flow.pending:
                    flow.pending.remove(eid)
                    emit({"event": "completed", "elicitationId": eid})

            flow.phase = f"retrying {tool}"
            result = await session.call_tool(tool, arguments)
            flow.phase = "closing the session"
    if flow.bad_lines:
        raise ProtocolFailure(f"stdout carried lines that are not JSON-RPC messages: {flow.bad_lines}")
    return {"event": "result", "result": result_to_json(result)}


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    flows: list[Flow] = []

    async def body(arguments: dict[str, Any]) -> dict[str, Any]:
        # Made here: anyio's Event and streams need the running event loop.
        flow = Flow()
        flows.append(flow)
        in_call = InCall(action=opts.action, progress=opts.progress) if opts.in_call else None
        return await run(opts, arguments, flow, in_call)

    return run_main(
        opts, body, "interop elicitation client", lambda: flows[0].describe() if flows else "starting"
    )


if __name__ == "__main__":
    sys.exit(main())
