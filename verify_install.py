"""Check an install: start server.py over stdio with this Python and list its MCP tools.

    .venv/bin/python verify_install.py            # Linux, macOS
    .venv\\Scripts\\python verify_install.py       # Windows

Prints the tool names, one a line, and exits 1 when the server does not answer or lists fewer
than 6 tools. install.sh and install.ps1 both run it (one copy of the check for both).

Layer: installer helper (beside install.ps1/install.sh); imports no project module.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIN_TOOLS = 6


async def tool_names(server: Path, timeout: float) -> list[str]:
    """Spawn `server` on stdio with this interpreter, as an MCP host would, and list its tools."""
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    # The MCP stdio client passes only a few variables on by default: keep LINECITE_HOME & co.
    transport = StdioTransport(command=sys.executable, args=[str(server)], env=dict(os.environ),
                               cwd=str(server.parent), keep_alive=False)
    async with Client(transport, timeout=timeout) as client:
        tools = await client.list_tools()
    return sorted(tool.name for tool in tools)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, default=HERE / "server.py")
    parser.add_argument("--min-tools", type=int, default=MIN_TOOLS)
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for the server (a fresh venv's first start is slow)")
    args = parser.parse_args(argv)
    try:
        names = asyncio.run(asyncio.wait_for(tool_names(args.server, args.timeout),
                                             args.timeout))
    except Exception as err:  # any failure to start or answer is the one thing to report
        print(f"linecite verify: FAILED: {args.server} did not answer tools/list over stdio "
              f"({type(err).__name__}: {err})", file=sys.stderr)
        return 1
    for name in names:
        print(name)
    if len(names) < args.min_tools:
        print(f"linecite verify: FAILED: {len(names)} tools listed, expected at least "
              f"{args.min_tools}", file=sys.stderr)
        return 1
    print(f"linecite verify: OK, {len(names)} tools", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
