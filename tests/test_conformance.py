"""The official MCP conformance suite (npm @modelcontextprotocol/conformance) against a real
`server.py --transport http`: the scenarios that test the protocol rather than the suite's own
sample tools (those call `test_simple_text`, `test_reconnection` and the like, which a document
server has no reason to carry). .ci/run installs the suite under .ci/node; elsewhere set
LINECITE_CONFORMANCE to its `conformance` command, or the test skips saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, http_server_process

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ("server-initialize", "ping", "tools-list", "resources-list", "prompts-list",
             "logging-set-level", "server-sse-multiple-streams",
             # issue 49 item 6: these three answered -32601 Method not found
             "completion-complete", "resources-subscribe", "resources-unsubscribe")


def conformance_command() -> str:
    found = os.environ.get("LINECITE_CONFORMANCE") or shutil.which(
        "conformance", path=str(REPO / ".ci" / "node" / "node_modules" / ".bin"))
    if not found:
        pytest.skip("needs the MCP conformance suite: `npm install --prefix .ci/node "
                    "@modelcontextprotocol/conformance@0.1.9` (.ci/run does)")
    return found


@pytest.fixture(scope="module")
def http_url(tmp_path_factory):
    """A real HTTP server over a KB with one note, so the lists it answers are not empty."""
    root = tmp_path_factory.mktemp("conformance")
    docs, base = root / "docs", root / "base"
    docs.mkdir()
    (docs / "note.txt").write_text("The pump station log was signed off.\n", encoding="utf-8")
    subprocess.run([sys.executable, str(REPO / "ingest.py"), str(docs), "--base-path",
                    str(base), "--quiet"], env=clean_env(), cwd=REPO, check=True,
                   capture_output=True, timeout=300)
    with http_server_process(base, root / "server.log", clean_env()) as url:
        yield url


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_conformance_scenario_passes(http_url, scenario, tmp_path):
    command = conformance_command()
    ran = subprocess.run([command, "server", "--url", http_url, "--scenario", scenario],
                         capture_output=True, text=True, encoding="utf-8", cwd=tmp_path,
                         timeout=120)
    [checks_file] = tmp_path.glob("results/*/checks.json")
    checks = json.loads(checks_file.read_text(encoding="utf-8"))
    failed = [c for c in checks if c["status"] not in ("SUCCESS", "INFO")]
    assert checks and not failed, f"{failed}\n{ran.stdout[-3000:]}"
    assert ran.returncode == 0, ran.stdout[-3000:]
