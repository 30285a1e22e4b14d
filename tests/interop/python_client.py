#!/usr/bin/env python3
"""Interop client for gatehouse, built on the official Python MCP SDK (PyPI `mcp`, 2.x).

The Rust integration tests run this as a subprocess to prove that a third-party
client can talk to gatehouse over Streamable HTTP (protocol 2025-11-25). It:

  1. connects to --url and performs the `initialize` handshake,
  2. lists tools, following `nextCursor` until it is exhausted,
  3. checks that every --expect-tool name is present,
  4. calls --call with the JSON object given in --args,
  5. closes the session (HTTP DELETE) and prints ONE JSON object on stdout:
     {"protocolVersion", "serverName", "tools", "result": {"isError", "content", "structuredContent"},
      "sampled": [the params of each sampling/createMessage the server sent], "rootsAsked": N}

With --sampling-reply TEXT it declares `sampling` and answers each sampling/createMessage with
TEXT (model "interop-model"); with --root URI (repeatable) it declares `roots` and answers
roots/list with those roots. Without them it declares neither, as the SDK does.

Exit codes: 0 success; 2 the server answered with a JSON-RPC error (details as
JSON on stderr: {"error": {"code", "message", "data"}}); 1 any other failure.

Requires Python >= 3.11 (uses the built-in BaseExceptionGroup).

Usage:
  python_client.py --url http://127.0.0.1:PORT/mcp --call echo --args '{"text":"hi"}' [--expect-tool echo]...
                   [--sampling-reply TEXT] [--root URI]...
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CallToolResult,
    CreateMessageResult,
    Implementation,
    ListRootsResult,
    PaginatedRequestParams,
    Root,
    TextContent,
)

MAX_PAGES = 1000  # guards against a server that never stops paginating


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
    parser.add_argument("--call", required=True, metavar="TOOL", help="tool to call")
    parser.add_argument("--args", default="{}", metavar="JSON", help="tool arguments as a JSON object")
    parser.add_argument("--expect-tool", action="append", default=[], metavar="NAME", help="tool that must be listed")
    parser.add_argument("--timeout", type=float, default=30.0, help="overall timeout in seconds")
    parser.add_argument("--sampling-reply", metavar="TEXT", help="declare sampling and answer with TEXT")
    parser.add_argument("--root", action="append", default=[], metavar="URI", help="declare roots; one of them")
    return parser.parse_args(argv)


async def list_all_tools(session: ClientSession) -> list[str]:
    """Collect tool names across all pages of tools/list."""
    names: list[str] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor is not None else None)
        names.extend(tool.name for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return names
        if cursor in seen:
            raise RuntimeError(f"tools/list returned a repeated nextCursor {cursor!r}")
        seen.add(cursor)
    raise RuntimeError(f"tools/list did not finish within {MAX_PAGES} pages")


def result_to_json(result: CallToolResult) -> dict[str, Any]:
    return {
        "isError": bool(result.is_error),
        "content": [block.model_dump(by_alias=True, mode="json", exclude_none=True) for block in result.content],
        "structuredContent": result.structured_content,
    }


async def run(opts: argparse.Namespace, arguments: dict[str, Any]) -> dict[str, Any]:
    url, tool, expected = opts.url, opts.call, opts.expect_tool
    client_info = Implementation(name="gatehouse-interop-python", version="1.0.0")
    sampled: list[dict[str, Any]] = []
    roots_asked = 0

    async def sample(_context: Any, params: Any) -> CreateMessageResult:
        sampled.append(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        reply = TextContent(type="text", text=opts.sampling_reply)
        return CreateMessageResult(role="assistant", content=reply, model="interop-model", stop_reason="endTurn")

    async def list_roots(_context: Any) -> ListRootsResult:
        nonlocal roots_asked
        roots_asked += 1
        return ListRootsResult(roots=[Root(uri=uri, name=f"root {i}") for i, uri in enumerate(opts.root)])

    callbacks: dict[str, Any] = {}
    if opts.sampling_reply is not None:
        callbacks["sampling_callback"] = sample
    if opts.root:
        callbacks["list_roots_callback"] = list_roots
    # Both context managers close on exit: the session stops its dispatcher, then the
    # transport sends DELETE with the Mcp-Session-Id (terminate_on_close=True).
    async with streamable_http_client(url) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream, client_info=client_info, **callbacks) as session:
            init = await session.initialize()
            tools = await list_all_tools(session)
            missing = [name for name in expected if name not in tools]
            if missing:
                raise RuntimeError(f"expected tools not listed: {missing} (listed: {tools})")
            result = await session.call_tool(tool, arguments)
    return {
        "protocolVersion": init.protocol_version,
        "serverName": init.server_info.name,
        "tools": tools,
        "result": result_to_json(result),
        "sampled": sampled,
        "rootsAsked": roots_asked,
    }


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """Flatten the (nested) exception groups that anyio task groups wrap errors in."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_errors(inner)]
    return [exc]


def report_failure(exc: BaseException, timeout_detail: str, who: str) -> int:
    """Prints a failure to stderr and returns the exit code: 2 with the JSON-RPC error when the
    server answered one, 1 for anything else."""
    leaves = leaf_errors(exc)
    for err in leaves:
        if isinstance(err, MCPError):
            payload = {"error": {"code": err.code, "message": err.message, "data": err.data}}
            print(json.dumps(payload), file=sys.stderr)
            return 2
    for err in leaves:
        detail = timeout_detail if isinstance(err, TimeoutError) else str(err)
        print(f"{who} failed: {type(err).__name__}: {detail}", file=sys.stderr)
    return 1


def tool_arguments(text: str) -> dict[str, Any]:
    """The --args value as a JSON object; ValueError with a message for the user otherwise."""
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--args is not valid JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise ValueError("--args must be a JSON object")
    return arguments


def run_main(
    opts: argparse.Namespace,
    body: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
    who: str,
    phase: Callable[[], str] | None = None,
) -> int:
    """The main of both interop scripts: runs `body` with the --args object within --timeout,
    prints what it returns as one JSON line and returns the exit code. `phase` says where a run
    that timed out was."""
    try:
        arguments = tool_arguments(opts.args)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(opts.timeout):
            return await body(arguments)

    try:
        output = anyio.run(bounded)
    except Exception as exc:  # noqa: BLE001 - report every failure the same way
        where = f" ({phase()})" if phase else ""
        return report_failure(exc, f"no answer within {opts.timeout}s{where}", who)
    print(json.dumps(output), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    return run_main(opts, lambda arguments: run(opts, arguments), "interop client")


if __name__ == "__main__":
    sys.exit(main())
