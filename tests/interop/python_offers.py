#!/usr/bin/env python3
"""Resources, prompts and completions through gatehouse with the official Python MCP SDK's
`Client` (PyPI `mcp`, 2.x), in either protocol era.

The Rust integration tests run this as a subprocess. It connects to --url with --mode (`legacy`
for the 2025-11-25 handshake, `2026-07-28` for the stateless revision), then:

  1. lists resources, resource templates and prompts (their URIs and names),
  2. reads --read URI (repeatable),
  3. gets --prompt NAME with the JSON object --args as its arguments,
  4. completes --complete-argument NAME=VALUE of --complete-prompt NAME,
  5. with --subscribe URI (handshake era): subscribes to it, calls the tool --trigger, and waits
     for `notifications/resources/updated` for URI on the session's stream,

and prints ONE JSON object on stdout:
  {"protocolVersion", "resources", "templates", "prompts", "read": [contents...], "prompt": {...},
   "completion": [values], "updated": URI or null}

Exit codes: 0 success; 2 the server answered with a JSON-RPC error (as JSON on stderr); 1 anything
else, including --timeout (seconds) running out.

Usage:
  python_offers.py --url http://127.0.0.1:PORT/mcp [--mode legacy] [--read URI]... [--prompt NAME]
                   [--args '{"city": "Paris"}'] [--complete-prompt NAME --complete-argument NAME=VALUE]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
from mcp.client.client import Client
from mcp.types import Implementation, PromptReference, ResourceUpdatedNotification
from python_client import run_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="gatehouse's Streamable HTTP endpoint")
    parser.add_argument("--mode", default="legacy", help="the Client's mode: legacy, auto, or a protocol version")
    parser.add_argument("--read", action="append", default=[], metavar="URI", help="a resource to read")
    parser.add_argument("--prompt", metavar="NAME", help="a prompt to get, with --args as its arguments")
    parser.add_argument("--args", default="{}", metavar="JSON", help="the prompt's arguments as a JSON object")
    parser.add_argument("--complete-prompt", metavar="NAME", help="a prompt whose argument to complete")
    parser.add_argument("--complete-argument", metavar="NAME=VALUE", help="the argument and what is typed so far")
    parser.add_argument("--subscribe", metavar="URI", help="subscribe to URI and wait for its update")
    parser.add_argument("--trigger", metavar="TOOL", help="the tool that makes the server send updates")
    parser.add_argument("--timeout", type=float, default=60.0, help="overall timeout in seconds")
    return parser.parse_args(argv)


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def run(opts: argparse.Namespace, arguments: dict[str, Any]) -> dict[str, Any]:
    client_info = Implementation(name="gatehouse-interop-python-offers", version="1.0.0")
    updates: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification) and str(message.params.uri) == opts.subscribe:
            updates.append(str(message.params.uri))
            arrived.set()

    async with Client(opts.url, mode=opts.mode, client_info=client_info, message_handler=on_message) as client:
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        prompts = await client.list_prompts()
        read = []
        for uri in opts.read:
            result = await client.read_resource(uri)
            read.extend(dump(content) for content in result.contents)
        prompt = None
        if opts.prompt:
            prompt = dump(await client.get_prompt(opts.prompt, {k: str(v) for k, v in arguments.items()}))
        completion = None
        if opts.complete_prompt:
            name, _, value = (opts.complete_argument or "=").partition("=")
            ref = PromptReference(type="ref/prompt", name=opts.complete_prompt)
            completed = await client.complete(ref, {"name": name, "value": value})
            completion = completed.completion.values
        if opts.subscribe:
            await client.subscribe_resource(opts.subscribe)
            await client.call_tool(opts.trigger, {})
            await arrived.wait()
            await client.unsubscribe_resource(opts.subscribe)
        version = client.protocol_version
    return {
        "protocolVersion": version,
        "resources": [str(r.uri) for r in resources.resources],
        "templates": [t.uri_template for t in templates.resource_templates],
        "prompts": [p.name for p in prompts.prompts],
        "read": read,
        "prompt": prompt,
        "completion": completion,
        "updated": updates[0] if updates else None,
    }


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    return run_main(opts, lambda arguments: run(opts, arguments), "offers client")


if __name__ == "__main__":
    sys.exit(main())
