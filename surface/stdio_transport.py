"""The stdio transport with the request bounds the HTTP transport has (issue 34.7).

mcp's `stdio_server` reads each line of stdin whole and echoes what it holds: a line with no
newline grows without bound, and a megabyte JSON-RPC id comes back whole in the answer. Here
stdin is read a bounded line at a time: a line over limits.MAX_REQUEST_BYTES is skipped to its
newline (never held whole), and a message breaking limits.request_problem (id, progress token,
method, tool name) is answered with a JSON-RPC "Invalid Request" with a null id, as over
HTTP. An over-long line's answer carries its id when the line's head names one before its
params (as every client writes them), so the agent sees why instead of waiting for a timeout.
Every other line goes to mcp's own reader unchanged. `serve(mcp)` runs a FastMCP server
on it; fastmcp's stdio runner is used as it is, with only its `stdio_server` swapped.

Layer: transport, below server.py (which calls `serve`), above limits.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import BinaryIO

import anyio
import anyio.to_thread

from adapters import mcp_internals
from common import limits

HEAD_BYTES = 1024  # of an over-long line, kept to find its id
_HEAD_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")')


class TooLong:
    """A line over the bound, already read past; only its first HEAD_BYTES are kept."""

    def __init__(self, head: bytes) -> None:
        self.head = head

    def request_id(self) -> int | str | None:
        """The id the head names before any params, or None."""
        found = _HEAD_ID.search(self.head.split(b'"params"', 1)[0])
        return json.loads(found.group(1)) if found else None


class BoundedStdin:
    """stdin as the text lines mcp's reader iterates over, each within MAX_REQUEST_BYTES."""

    def __init__(self, buffer: BinaryIO, limit: int = limits.MAX_REQUEST_BYTES) -> None:
        self.buffer = buffer
        self.limit = limit
        self.replies: Callable | None = None  # sends a refusal; set once the streams exist
        self.ready = anyio.Event()

    def __aiter__(self) -> BoundedStdin:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await anyio.to_thread.run_sync(self._read_line, abandon_on_cancel=True)
            if line is None:
                raise StopAsyncIteration
            if isinstance(line, TooLong):
                await self._refuse(limits.oversize_problem(), line.request_id())
                continue
            problem = limits.message_problem(line)
            if problem is None:
                return line.decode("utf-8", errors="replace")
            await self._refuse(problem)

    def _read_line(self) -> bytes | TooLong | None:
        """The next line (None at the end of input), or TooLong once a line over the limit
        has been read past: at most `limit` bytes are held at any time."""
        line = self.buffer.readline(self.limit + 1)
        if not line:
            return None
        if len(line) <= self.limit or line.endswith(b"\n"):  # the newline may be byte limit+1
            return line
        head = line[:HEAD_BYTES]
        while line and not line.endswith(b"\n"):
            line = self.buffer.readline(self.limit)
        return TooLong(head)

    async def _refuse(self, problem: str, request_id: int | str | None = None) -> None:
        """Answer a refused line with mcp's own JSON-RPC error message type."""
        import mcp_types
        from mcp.shared.message import SessionMessage

        await self.ready.wait()
        error = mcp_types.jsonrpc_message_adapter.validate_python(
            limits.invalid_request(problem, request_id))
        await self.replies(SessionMessage(error))


@asynccontextmanager
async def bounded_stdio_server(*_args, **_kwargs) -> AsyncIterator[tuple]:
    """mcp's stdio_server over BoundedStdin: the same streams, stdout claimed by mcp."""
    from mcp.server.stdio import stdio_server

    stdin = BoundedStdin(mcp_internals.claimed_stdin())
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        stdin.replies = write_stream.send
        stdin.ready.set()
        yield read_stream, write_stream


def serve(mcp) -> None:
    """Run a FastMCP server over the bounded stdio transport (blocks until stdin closes)."""
    mcp_internals.run_stdio(mcp, bounded_stdio_server)
