"""The HTTP transport's defences, in front of fastmcp's Host check: DNS rebinding and foreign
browser pages (only this server's own Origin gets through, 403 otherwise), oversized or
hostile request bodies (checked against limits.py before any work: 413/400), and the bearer
token (LINECITE_HTTP_TOKEN), without which a non-loopback address is refused at start.
`middleware(host, port)` is what server.py's HTTP server and `--ui` page put in front.

Layer: surface: below server.py (which installs these), above limits.py.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from starlette.middleware import Middleware

from common import limits

# ---------------------------------------------------------------------------
TOKEN_ENV = "LINECITE_HTTP_TOKEN"  # bearer token; required when binding a non-loopback address
# ---------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def normal_host(host: str) -> str:
    """A host name or address as origins compare it: lower case, IPv6 in its short form."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def origin_key(origin: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of a browser Origin, its default port filled in; None when it is
    no plain scheme://host[:port] (a path, user info, "null", a malformed port)."""
    try:
        parts = urlsplit(origin)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or parts.path or parts.query or parts.fragment or parts.username:
        return None
    return parts.scheme.lower(), normal_host(parts.hostname), port


def own_origins(scheme: str, bind_host: str, port: int, host_header: str) -> set:
    """The origins that are this server's: the address it binds, exactly (no alias: on a
    loopback bind `localhost` or `[::1]` may reach another program's socket on our port).
    Off loopback also the Host a request was sent to, as clients name the machine in ways we
    cannot list; there a token is required, which a rebinding page cannot send."""
    own = set()
    if bind_host not in ("0.0.0.0", "::"):
        own.add((scheme, normal_host(bind_host), port))
    if not is_loopback(bind_host):
        own.add(origin_key(f"{scheme}://{host_header}"))
    return own - {None}


class OwnOriginOnly:
    """Refuse browser requests (403) from any origin but this server's own scheme, host and
    port. fastmcp's guard lets every loopback origin reach a loopback server, so a page from
    another localhost port, another scheme or 127.0.0.2 could otherwise call our tools."""

    def __init__(self, app, host: str, port: int):
        self.app = app
        self.host = host
        self.port = port

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            from starlette.datastructures import Headers
            from starlette.responses import Response

            headers = Headers(scope=scope)
            origin = headers.get("origin")
            own = own_origins(scope.get("scheme", "http"), self.host, self.port,
                              headers.get("host", ""))
            if origin is not None and origin_key(origin) not in own:
                await Response("Forbidden Origin", status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def jsonrpc_refusal(status: int, problem: str):
    """A JSON-RPC error for a request refused before any work; its id is null, never echoed."""
    from starlette.responses import JSONResponse

    return JSONResponse(limits.invalid_request(problem), status_code=status)


async def read_body(receive, limit: int) -> bytes | None:
    """A request's body, or None once it passes `limit` bytes (the rest is never read)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)  # the client went away; the app sees the same
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


class BoundedRequests:
    """Check a POSTed body against limits.py before any work: at most MAX_REQUEST_BYTES (413),
    and what answers echo (the id, the method, the tool named) bounded (400), so a megabyte
    id never comes back whole. The body is then handed on unchanged."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, limits.MAX_REQUEST_BYTES)
        if body is None:
            refusal = jsonrpc_refusal(413, limits.oversize_problem())
            await refusal(scope, receive, send)
            return
        problem = limits.message_problem(body)
        if problem:
            await jsonrpc_refusal(400, problem)(scope, receive, send)
            return
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def configured_token() -> str | None:
    """The bearer token TOKEN_ENV sets (stripped), or None when it is unset or blank."""
    return os.environ.get(TOKEN_ENV, "").strip() or None


def http_auth(host: str):
    """Bearer-token auth from TOKEN_ENV; refuse to serve a non-loopback address without it."""
    token = configured_token()
    if token and len(token) < limits.MIN_TOKEN_CHARS:
        raise SystemExit(f"linecite: {TOKEN_ENV} is {len(token)} characters long; a token "
                         f"needs at least {limits.MIN_TOKEN_CHARS} (a short one is guessed). "
                         "Set it to a long random string, e.g. the output of "
                         "python -c \"import secrets; print(secrets.token_urlsafe(32))\"")
    if not token:
        if not is_loopback(host):
            raise SystemExit(f"linecite: refusing to listen on {host} without a token; set "
                             f"{TOKEN_ENV} to a long random string (clients send it as "
                             "'Authorization: Bearer <token>'), or bind 127.0.0.1")
        return None
    from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

    return StaticTokenVerifier(tokens={token: {"client_id": "linecite", "scopes": []}})


def middleware(host: str, port: int) -> list[Middleware]:
    """The guards an HTTP server bound to host:port runs every request through, in order."""
    return [Middleware(OwnOriginOnly, host=host, port=port), Middleware(BoundedRequests)]
