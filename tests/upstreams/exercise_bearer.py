#!/usr/bin/env python3
"""Drives every tool of bearer_server.py with the official Python MCP SDK's client, as a client of
the upstream itself would, and prints ONE JSON report on stdout for tests/mcp_upstreams.rs:

  {"tools": [names], "whoami": structuredContent,
   "progress": [[progress, total, message]...], "count": text,
   "logs": [[level, data]...], "shout": text,
   "form": {"mode", "message", "schema"}, "ask_color": text,
   "url": {"mode", "message", "url", "elicitationId"}, "open_link": text, "completed": [elicitationId...],
   "needs_url": {"code", "data"},
   "list_changed": count, "grow": text, "tools_after_grow": [names],
   "slow": "cancelled"}

The form elicitation is answered {"color": "teal"}, the URL one "accept". `slow` is cancelled once
GET /seen shows the server got the call. Exit code 0 on success, 1 on any failure (stderr says why).

Usage: exercise_bearer.py --url http://127.0.0.1:PORT/mcp --token TOKEN
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from mcp import ClientSession, MCPError
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import (
    ElicitCompleteNotification,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    Implementation,
    LoggingMessageNotificationParams,
    ToolListChangedNotification,
)


def text(result: Any) -> str:
    return result.content[0].text


async def seen_slow_call(http: Any, seen_url: str) -> None:
    """Waits until the server has seen the call of `slow` (a condition, polled)."""
    while True:
        events = (await http.get(seen_url)).json()
        if any(e.get("kind") == "tool" and e.get("name") == "slow" for e in events):
            return
        await anyio.sleep(0.05)


async def run(url: str, token: str) -> dict[str, Any]:
    report: dict[str, Any] = {"progress": [], "logs": [], "completed": [], "list_changed": 0}

    async def on_elicit(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        if isinstance(params, ElicitRequestURLParams):
            report["url"] = {
                "mode": params.mode,
                "message": params.message,
                "url": params.url,
                "elicitationId": params.elicitation_id,
            }
            return ElicitResult(action="accept")
        report["form"] = {"mode": params.mode, "message": params.message, "schema": params.requested_schema}
        return ElicitResult(action="accept", content={"color": "teal"})

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        report["logs"].append([params.level, params.data])

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, ElicitCompleteNotification):
            report["completed"].append(message.params.elicitation_id)
        elif isinstance(message, ToolListChangedNotification):
            report["list_changed"] += 1

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        report["progress"].append([progress, total, message])

    client_info = Implementation(name="gatehouse-upstream-exercise", version="1.0.0")
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read_stream, write_stream):
            async with ClientSession(
                read_stream,
                write_stream,
                client_info=client_info,
                elicitation_callback=on_elicit,
                logging_callback=on_log,
                message_handler=on_message,
            ) as session:
                await session.initialize()
                report["tools"] = [tool.name for tool in (await session.list_tools()).tools]
                report["whoami"] = (await session.call_tool("whoami", {})).structured_content
                report["count"] = text(await session.call_tool("count", {"n": 3}, progress_callback=on_progress))
                report["shout"] = text(await session.call_tool("shout", {"text": "hello"}))
                report["ask_color"] = text(await session.call_tool("ask_color", {}))
                report["open_link"] = text(await session.call_tool("open_link", {"complete": True}))
                try:
                    await session.call_tool("needs_url", {})
                    raise RuntimeError("needs_url answered instead of failing with -32042")
                except MCPError as err:
                    report["needs_url"] = {"code": err.code, "data": err.data}
                report["grow"] = text(await session.call_tool("grow", {"stream": "request"}))
                report["tools_after_grow"] = [tool.name for tool in (await session.list_tools()).tools]
                seen_url = url.removesuffix("/mcp") + "/seen"
                async with anyio.create_task_group() as group:

                    async def call_slow() -> None:
                        await session.call_tool("slow", {"seconds": 600})
                        report["slow"] = "answered"

                    group.start_soon(call_slow)
                    await seen_slow_call(http, seen_url)
                    group.cancel_scope.cancel()
                report.setdefault("slow", "cancelled")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(args.timeout):
            return await run(args.url, args.token)

    try:
        report = anyio.run(bounded)
    except BaseException as error:  # noqa: BLE001 - any failure is reported, then exit 1
        print(f"exercise_bearer.py failed: {error!r}", file=sys.stderr)
        raise SystemExit(1) from None
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
