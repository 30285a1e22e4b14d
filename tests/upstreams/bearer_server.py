#!/usr/bin/env python3
"""An upstream MCP server that behaves like GitHub's remote MCP server, for gatehouse's tests.

Built on the official Python MCP SDK (PyPI `mcp` 2.x, `MCPServer`), served over Streamable HTTP with
stateful sessions (`Mcp-Session-Id`). Every request to /mcp must carry `Authorization: Bearer T`
where `GET {provider}/userinfo` with that bearer answers 200 (the fake OAuth provider of the tests);
the answer ({login, id, sub, email, scopes}) is cached per token for at most --cache-seconds.

  * no bearer           -> 401, WWW-Authenticate: Bearer realm="upstream"
  * a bearer the provider refuses
                        -> 401, WWW-Authenticate: Bearer realm="upstream", error="invalid_token"
  * tools/call of a tool named in --scope-for TOOL=SCOPE by a token whose scopes lack SCOPE
                        -> 403, WWW-Authenticate: Bearer error="insufficient_scope", scope="SCOPE"

GET /seen (no auth) answers a JSON list of what the server saw, in order:

  {"kind": "request", "method", "id", "login", "authorization", "headers": {lower-case: value}, "session"}
      for every JSON-RPC request that passed authentication (refused tools/calls included);
  {"kind": "cancelled", "requestId", "login"} for every notifications/cancelled;
  {"kind": "tool", "name", "login", "arguments"} for every tools/call that reaches the tools;
  {"kind": "interrupted", "name": "slow", "login"} when a cancellation stopped `slow` mid-sleep.

Tools: whoami, count, slow, ask_color, open_link, needs_url, shout, delete_repository, grow (which
adds the tool `grown`). See each tool's docstring. One prompt: greet.

Usage:
  bearer_server.py --provider http://127.0.0.1:PORT [--scope-for TOOL=SCOPE]... [--cache-seconds S]

It binds 127.0.0.1 port 0, prints exactly one line {"url": "http://127.0.0.1:PORT/mcp"} on stdout
once listening, and serves until killed or until its stdin closes (so a test that dies leaves no
server behind: keep stdin a pipe you hold open). Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
import warnings
from typing import Any, TypedDict

import anyio
import httpx2
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, UrlElicitationRequiredError
from mcp.types import ElicitRequestURLParams, ToolListChangedNotification
from pydantic import BaseModel

# ctx.info is deprecated from protocol 2026-07-28 on; gatehouse speaks 2025-11-25, where it is not.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

Scope = dict[str, Any]
Message = dict[str, Any]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", required=True, help="base URL of the OAuth provider serving GET /userinfo")
    parser.add_argument(
        "--scope-for",
        action="append",
        default=[],
        metavar="TOOL=SCOPE",
        help="a call of TOOL needs SCOPE among the token's scopes (repeatable)",
    )
    parser.add_argument(
        "--cache-seconds",
        type=float,
        default=1.0,
        help="how long a token's /userinfo answer is trusted (at most 1 s by default; 0 = ask every time)",
    )
    args = parser.parse_args(argv)
    scopes: dict[str, str] = {}
    for pair in args.scope_for:
        tool, sep, scope = pair.partition("=")
        if not sep or not tool or not scope:
            parser.error(f"--scope-for wants TOOL=SCOPE, got {pair!r}")
        scopes[tool] = scope
    args.scope_for = scopes
    return args


class ProviderUnavailable(Exception):
    """The provider answered neither 200 nor 401, or could not be reached."""


class Verifier:
    """Asks the provider who a bearer token belongs to; remembers answers for a short while."""

    def __init__(self, provider: str, cache_seconds: float) -> None:
        self.userinfo_url = provider.rstrip("/") + "/userinfo"
        self.cache_seconds = cache_seconds
        self.cache: dict[str, tuple[float, dict[str, Any]]] = {}
        self.client: httpx2.AsyncClient | None = None

    async def userinfo(self, token: str) -> dict[str, Any] | None:
        """The provider's account for `token`, or None when the provider refuses it."""
        now = time.monotonic()
        hit = self.cache.get(token)
        if hit is not None and hit[0] > now:
            return hit[1]
        if self.client is None:
            self.client = httpx2.AsyncClient(timeout=10.0, trust_env=False)
        try:
            response = await self.client.get(self.userinfo_url, headers={"Authorization": f"Bearer {token}"})
        except httpx2.HTTPError as error:
            raise ProviderUnavailable(f"GET {self.userinfo_url}: {error!r}") from error
        if response.status_code == 401:
            self.cache.pop(token, None)
            return None
        if response.status_code != 200:
            raise ProviderUnavailable(f"GET {self.userinfo_url} answered {response.status_code}")
        try:
            info = response.json()
        except ValueError as error:
            raise ProviderUnavailable(f"GET {self.userinfo_url} answered no JSON") from error
        if not isinstance(info, dict):
            raise ProviderUnavailable(f"GET {self.userinfo_url} answered {info!r}")
        if self.cache_seconds > 0:
            self.cache[token] = (now + self.cache_seconds, info)
        return info


class Recorder:
    """What the server saw, in order, for GET /seen."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, **event: Any) -> None:
        self.events.append(event)


def bearer_token(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def jsonrpc_messages(body: bytes) -> list[Message]:
    """The JSON-RPC messages of a POST body; none when it is not JSON (the SDK answers that)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return []
    items = parsed if isinstance(parsed, list) else [parsed]
    return [item for item in items if isinstance(item, dict)]


async def respond(send: Any, status: int, body: Any, headers: list[tuple[str, str]] | None = None) -> None:
    payload = json.dumps(body).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers or []]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


async def read_body(receive: Any) -> bytes | None:
    """The whole request body, or None when the client went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Any) -> Any:
    """A `receive` that hands the already-read body to the app, then passes on what follows."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class Gate:
    """ASGI middleware: bearer authentication against the provider, per-tool scopes, recording."""

    def __init__(self, app: Any, verifier: Verifier, recorder: Recorder, scope_for: dict[str, str]) -> None:
        self.app = app
        self.verifier = verifier
        self.recorder = recorder
        self.scope_for = scope_for

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path == "/seen" and scope["method"] == "GET":
            return await respond(send, 200, self.recorder.events)
        if path.rstrip("/") != "/mcp":
            return await self.app(scope, receive, send)

        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        authorization = headers.get("authorization")
        token = bearer_token(authorization)
        if token is None:
            return await respond(
                send,
                401,
                {"error": "unauthorized", "error_description": "missing bearer token"},
                [("www-authenticate", 'Bearer realm="upstream"')],
            )
        try:
            user = await self.verifier.userinfo(token)
        except ProviderUnavailable as error:
            print(f"bearer_server: cannot check a token: {error}", file=sys.stderr, flush=True)
            return await respond(send, 502, {"error": "provider_unavailable"})
        if user is None:
            return await respond(
                send,
                401,
                {"error": "invalid_token", "error_description": "the provider does not know this token"},
                [("www-authenticate", 'Bearer realm="upstream", error="invalid_token"')],
            )
        login = user.get("login")
        # The tools read the caller from the Starlette request's state.
        scope.setdefault("state", {})["upstream_user"] = user

        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:
            return
        refused: str | None = None
        for message in jsonrpc_messages(body):
            method = message.get("method")
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            if isinstance(method, str) and "id" in message:
                self.recorder.add(
                    kind="request",
                    method=method,
                    id=message.get("id"),
                    login=login,
                    authorization=authorization,
                    headers=headers,
                    session=headers.get("mcp-session-id"),
                )
            if method == "notifications/cancelled":
                self.recorder.add(kind="cancelled", requestId=params.get("requestId"), login=login)
            if method == "tools/call":
                name = params.get("name")
                needed = self.scope_for.get(name) if isinstance(name, str) else None
                scopes = user.get("scopes") or []
                if needed is not None and needed not in scopes:
                    refused = needed
                else:
                    self.recorder.add(kind="tool", name=name, login=login, arguments=params.get("arguments"))
        if refused is not None:
            return await respond(
                send,
                403,
                {"error": "insufficient_scope", "error_description": f"this call needs the scope {refused}"},
                [("www-authenticate", f'Bearer error="insufficient_scope", scope="{refused}"')],
            )
        await self.app(scope, replaying(body, receive), send)


class Color(BaseModel):
    color: str


class WhoAmI(TypedDict):
    login: str | None
    scopes: list[str]


def caller(ctx: Context) -> dict[str, Any]:
    """The provider's account of whoever made the current request (set by `Gate`)."""
    request = ctx.request_context.request
    state = getattr(request, "state", None)
    user = getattr(state, "upstream_user", None) if state is not None else None
    return user if isinstance(user, dict) else {}


def build_server(recorder: Recorder) -> MCPServer:
    server = MCPServer("bearer-upstream", version="1.0.0", log_level="WARNING")

    @server.tool()
    async def whoami(ctx: Context) -> WhoAmI:
        """Who the bearer token belongs to, and its scopes."""
        user = caller(ctx)
        return {"login": user.get("login"), "scopes": list(user.get("scopes") or [])}

    @server.tool(structured_output=False)
    async def count(n: int, ctx: Context) -> str:
        """Sends n progress notifications (progress 1..n of n, "step i"), then answers."""
        for i in range(1, n + 1):
            await ctx.report_progress(i, n, f"step {i}")
        return f"counted {n}"

    @server.tool(structured_output=False)
    async def slow(seconds: float, ctx: Context) -> str:
        """Sleeps; a notifications/cancelled for the call stops it (and is recorded)."""
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            recorder.add(kind="interrupted", name="slow", login=caller(ctx).get("login"))
            raise
        return f"slept {seconds}"

    @server.tool(structured_output=False)
    async def ask_color(ctx: Context) -> str:
        """Asks the user for a colour with a form-mode elicitation."""
        answer = await ctx.elicit("What is your favourite colour?", Color)
        if answer.action == "accept":
            return f"you chose {answer.data.color}"
        return "declined" if answer.action == "decline" else "cancelled"

    @server.tool(structured_output=False)
    async def open_link(ctx: Context, url: str = "http://127.0.0.1:9/open", complete: bool = False) -> str:
        """Asks the user to open `url` with a URL-mode elicitation; answers the action (accept,
        decline or cancel). With `complete`, an accepted elicitation is then reported finished
        (notifications/elicitation/complete)."""
        elicitation_id = str(uuid.uuid4())
        answer = await ctx.elicit_url("Please open this page to continue.", url, elicitation_id)
        if complete and answer.action == "accept":
            await ctx.session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)
        return answer.action

    @server.tool(structured_output=False)
    async def needs_url() -> str:
        """Always fails with -32042 (URL elicitation required) naming http://127.0.0.1:9/finish."""
        raise UrlElicitationRequiredError(
            [
                ElicitRequestURLParams(
                    message="Finish setting up in your browser.",
                    url="http://127.0.0.1:9/finish",
                    elicitation_id=str(uuid.uuid4()),
                )
            ]
        )

    @server.tool(structured_output=False)
    async def shout(text: str, ctx: Context) -> str:
        """Logs `text` at info level (notifications/message), then answers it in upper case."""
        await ctx.info(text)
        return text.upper()

    @server.tool(structured_output=False)
    async def delete_repository(name: str) -> str:
        """Pretends to delete a repository (list it with --scope-for delete_repository=delete_repo)."""
        return f"deleted {name}"

    async def grown() -> str:
        """A tool that `grow` added."""
        return "grown"

    @server.tool(structured_output=False)
    async def grow(ctx: Context, stream: str = "standalone") -> str:
        """Adds the tool `grown` (once) and sends notifications/tools/list_changed: on the session's
        standalone GET stream (`stream` = "standalone", dropped when none is open, as the SDK does)
        or on this call's own response stream (`stream` = "request")."""
        if all(tool.name != "grown" for tool in await server.list_tools()):
            server.add_tool(grown, structured_output=False)
        related = ctx.request_id if stream == "request" else None
        await ctx.session.send_notification(ToolListChangedNotification(), related_request_id=related)
        return "grew"

    @server.prompt()
    def greet(name: str) -> str:
        """A greeting for `name`."""
        return f"Hello, {name}."

    return server


class Server(uvicorn.Server):
    """Prints the URL once the socket accepts connections and the app has started."""

    def __init__(self, config: uvicorn.Config, url: str) -> None:
        super().__init__(config)
        self.url = url

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            sys.stdout.write(json.dumps({"url": self.url}) + "\n")
            sys.stdout.flush()


def exit_when_stdin_closes() -> None:
    def watch() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()


def main() -> None:
    args = parse_args()
    recorder = Recorder()
    mcp = build_server(recorder)
    app = Gate(mcp.streamable_http_app(), Verifier(args.provider, args.cache_seconds), recorder, args.scope_for)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    exit_when_stdin_closes()
    Server(config, f"http://127.0.0.1:{port}/mcp").run(sockets=[sock])


if __name__ == "__main__":
    main()
