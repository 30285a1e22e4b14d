#!/usr/bin/env python3
"""MCP authorization with the official Python MCP SDK (PyPI `mcp`, 2.x), no human involved.

The Rust integration tests run this against gatehouse in `[identity] mode = "oauth"` and a fake
identity provider that consents at once for the user a test signed in. The SDK's own
`OAuthClientProvider` does all of MCP authorization: the 401 challenge, Protected Resource
Metadata (RFC 9728), authorization server metadata (RFC 8414), dynamic client registration
(RFC 7591), PKCE, and the token request with `resource` (RFC 8707). Only the browser is replaced:
the redirect handler GETs the authorization URL without following the redirect and keeps the
`code`, `state` and `iss` of its `Location`, which the callback handler hands back.

Then it initializes, lists tools, calls --call and prints ONE JSON object on stdout:
  {"protocolVersion", "tools", "result": {...}, "authorization": {"resource", "scope"}}
where `authorization` is what the SDK put in its authorization request. The session is left open
(no DELETE on close) so the test can see what gatehouse stored for it.

Exit codes as python_client.py: 0 success, 2 a JSON-RPC error, 1 anything else.

Usage:
  python_oauth.py --url http://127.0.0.1:PORT/mcp [--call whoami] [--args '{}'] [--timeout 30]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.types import Implementation
from python_client import list_all_tools, result_to_json, run_main

# Nothing listens here: the redirect to it is read, never followed.
REDIRECT_URI = "http://127.0.0.1:1/callback"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="gatehouse's Streamable HTTP endpoint")
    parser.add_argument("--call", default="whoami", metavar="TOOL", help="tool to call")
    parser.add_argument("--args", default="{}", metavar="JSON", help="tool arguments as a JSON object")
    parser.add_argument("--timeout", type=float, default=30.0, help="overall timeout in seconds")
    return parser.parse_args(argv)


class MemoryStorage:
    """The SDK's `TokenStorage`, in memory: one run, one client."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """Stands in for the user agent: opens the authorization URL, reads where it redirects."""

    def __init__(self) -> None:
        self.request: dict[str, list[str]] = {}
        self.answer: dict[str, list[str]] = {}

    async def redirect_handler(self, authorization_url: str) -> None:
        self.request = parse_qs(urlsplit(authorization_url).query)
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10.0) as http:
            response = await http.get(authorization_url)
        location = response.headers.get("location")
        if response.status_code not in (302, 303) or location is None:
            raise RuntimeError(f"authorization answered {response.status_code}, not a redirect: {response.text}")
        self.answer = parse_qs(urlsplit(location).query)
        if "error" in self.answer:
            raise RuntimeError(f"authorization refused: {self.answer}")

    async def callback_handler(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(
            code=first(self.answer, "code") or "", state=first(self.answer, "state"), iss=first(self.answer, "iss")
        )


def first(query: dict[str, list[str]], name: str) -> str | None:
    """The first value of a parsed query's parameter, if it has one."""
    return query.get(name, [None])[0]


async def run(url: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    browser = Browser()
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="gatehouse-interop-python-oauth",
            redirect_uris=[REDIRECT_URI],
        ),
        storage=MemoryStorage(),
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )
    client_info = Implementation(name="gatehouse-interop-python-oauth", version="1.0.0")
    async with create_mcp_http_client(auth=provider) as http_client:
        async with streamable_http_client(url, http_client=http_client, terminate_on_close=False) as (read, write):
            async with ClientSession(read, write, client_info=client_info) as session:
                init = await session.initialize()
                tools = await list_all_tools(session)
                result = await session.call_tool(tool, arguments)
    return {
        "protocolVersion": init.protocol_version,
        "tools": tools,
        "result": result_to_json(result),
        "authorization": {name: first(browser.request, name) for name in ("resource", "scope")},
    }


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    return run_main(opts, lambda arguments: run(opts.url, opts.call, arguments), "OAuth interop client")


if __name__ == "__main__":
    sys.exit(main())
