"""The stdio transport keeps the HTTP transport's request bounds: a megabyte JSON-RPC id or an
endless line is refused with a short "Invalid Request", never echoed or held whole (an
over-long line's answer carries its id when its head names a short one), and the same server
then answers a real client's requests as before."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from conftest import clean_env

from common import limits

REPO = Path(__file__).resolve().parent.parent
INITIALIZE = {"jsonrpc": "2.0", "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "bounds-test", "version": "1"}}}


class RawServer:
    """`python server.py` over its real pipes, spoken to line by line."""

    def __init__(self, base: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "server.py")], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=clean_env(LINECITE_HOME=str(base), LINECITE_WARM_UP="0"))

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def reply(self, timeout: float = 30.0) -> bytes:
        """The next line the server writes (fails the test if none comes in time)."""
        box: list[bytes] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()))
        reader.start()
        reader.join(timeout)
        assert box and box[0], "the server wrote no answer"
        return box[0]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        finally:
            self.proc.kill()


def message(**fields) -> bytes:
    return json.dumps({**INITIALIZE, **fields}).encode("utf-8") + b"\n"


def test_a_megabyte_id_and_an_endless_line_are_refused_and_the_server_goes_on(tmp_path):
    server = RawServer(tmp_path)
    try:
        server.send(message(id="x" * 100_000))  # within the line bound, over the id bound
        first = server.reply()
        assert len(first) < 1_000, "the long id came back"
        refusal = json.loads(first)
        assert refusal["id"] is None and refusal["error"]["code"] == -32600
        assert "JSON-RPC id is 100,000 characters long" in refusal["error"]["message"]
        server.send(message(id="x" * 1_000_000))  # a megabyte: over the line bound
        third = server.reply()
        assert len(third) < 1_000 and json.loads(third)["id"] is None

        # 8 MB with no newline until the end: skipped at the bound, never parsed whole
        server.send(b'{"jsonrpc": "2.0", "id": 7, "method": "' + b"m" * 8_000_000 + b'"}\n')
        second = json.loads(server.reply())
        assert second["id"] == 7  # read from the line's head, so the client sees why
        assert f"more than {limits.MAX_REQUEST_BYTES:,} bytes" in second["error"]["message"]

        server.send(message(id=1))
        answer = json.loads(server.reply())
        assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"]
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        server.send(b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}\n')
        tools = json.loads(server.reply())
        assert tools["id"] == 2
        assert "search" in {tool["name"] for tool in tools["result"]["tools"]}
    finally:
        server.close()


def test_a_line_just_under_the_bound_still_reaches_the_protocol_layer(tmp_path):
    """The bound refuses what is over it, not what is near it: a long (valid) line is read."""
    server = RawServer(tmp_path)
    try:
        padding = "p" * (limits.MAX_REQUEST_BYTES - 400)
        server.send(message(id=5, params={**INITIALIZE["params"], "pad": padding}))
        answer = json.loads(server.reply())
        assert answer["id"] == 5 and "result" in answer
    finally:
        server.close()
