"""The few private names of fastmcp and mcp the server relies on, in one place.

- `replace_request_handler`: fastmcp lists every resource at once and cuts a page from the
  list; a KB of 100,000 sources needs its own paged `resources/list`, and fastmcp's public API
  has no way to register one, so the low-level server's handler table is written directly.
  `resources/subscribe` and `resources/unsubscribe`, which fastmcp does not serve at all, are
  added the same way (mcp then declares `resources.subscribe` from the handler's presence).
- `connection_of`: the connection a request came on (mcp's per-request ServerSession holds
  it privately), to know one host across its requests and to tell it of changes after the
  request is answered (surface/subscriptions.py).
- `claimed_stdin`: mcp claims fd 0 for the wire (fd 0 then reads the null device, so a child
  process or a handler reading stdin gets EOF, not protocol bytes); the bounded stdio reader
  claims it the same way, through mcp's own private helper.
- `run_stdio`: fastmcp's stdio runner used as it is, with its `stdio_server` swapped for the
  bounded one (surface/stdio_transport.py).

Written for fastmcp 4.1 up to 4.3 and mcp 2.3 up to 2.4; an upgrade outside those ranges fails
tests/test_adapters.py.

Layer: adapter (adapters/): used by server.py, surface/stdio_transport.py and
surface/subscriptions.py only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, BinaryIO

WRITTEN_FOR = [("fastmcp", "4.1", "4.3"), ("mcp", "2.3", "2.4")]  # distribution, from, below


def replace_request_handler(mcp: Any, method: str, params_type: type, handler: Callable) -> None:
    """Answer `method` with `handler` instead of fastmcp's own handler (or where it has none)."""
    mcp._mcp_server.add_request_handler(method, params_type, handler)


def connection_of(session: Any) -> Any:
    """The mcp `Connection` a request's ServerSession speaks through: one per host connection
    on the handshake-era protocols, with the public `protocol_version`, `notify`-based
    `send_resource_updated` and `send_resource_list_changed` (they never raise)."""
    return session._connection


def claimed_stdin() -> BinaryIO:
    """fd 0 claimed as mcp claims it; stdin's own buffer where this mcp has no such claim."""
    from mcp.server import stdio

    claim = getattr(stdio, "_claim_fd", None)
    opener = getattr(stdio, "_open_stdin_diversion", None)
    if claim is None or opener is None:
        return sys.stdin.buffer
    buffer, _release = claim(0, sys.stdin, "rb", opener)
    return buffer


def run_stdio(mcp: Any, stdio_server: Callable) -> None:
    """fastmcp's stdio runner over `stdio_server` (blocks until stdin closes)."""
    from fastmcp.server.mixins import transport

    transport.stdio_server = stdio_server
    mcp.run("stdio", show_banner=False)
