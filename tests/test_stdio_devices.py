"""Devices, pipes and swapped links through the real stdio server (issue 34, items 3 and 4):
what tests/test_safe_open.py checks in-process, asked here by a real MCP client of a real
`server.py` over stdio, so a refusal is seen the way an agent sees it, and a hang or a spin
shows as a server that stops answering.

Files present from the start are refused by the path check. A swap between that check and
the open needs the attacker's timing, which a test cannot get from outside; `launcher.py`
runs the real server with one hook instead: right after `library.allowed_path` passed a path
named in its plan, the path is swapped (a FIFO, a link to /dev/zero, a link to an outside
folder), as a local attacker racing the server would. Everything else is the real server,
SQLite and the real queue runner.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import pytest_asyncio
from conftest import call, clean_env
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from test_hostile_ingest import bm25_kb

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
ALLOWED_ENV = "LINECITE_ALLOWED_DIRS"
PROMPT = 15  # seconds: a refusal is prompt; a blocked open or a /dev/zero spin never ends
CALL_TIMEOUT = 40  # seconds a call may take before the client gives up (a hang fails here)
UNBLOCK_AFTER = 20  # seconds: a reader blocked on a FIFO is released, so a regression fails
SECRET = "The vault code is 4711."
NORMAL = "The harbour crane inspection is due in March."

pytestmark = [  # about 4 s in all (one server, one queue run): not slow
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(sys.platform == "win32",
                       reason="FIFOs (os.mkfifo) and /dev/zero exist on POSIX only"),
]

LAUNCHER = '''\
"""server.py with one test hook: a path named in the plan is swapped right after
library.allowed_path passed it (the attacker's move between the check and the open)."""
import json, os, runpy, shutil, sys
from pathlib import Path

repo, plan_file = sys.argv[1], sys.argv[2]
sys.path.insert(0, repo)
import library

plan = json.loads(Path(plan_file).read_text(encoding="utf-8"))
checked = library.allowed_path


def swap_after_check(path, kb):
    resolved = checked(path, kb)
    action = plan.pop(path, None)
    if action == "fifo":
        os.unlink(path)
        os.mkfifo(path)
    elif action == "zero":
        os.unlink(path)
        os.symlink("/dev/zero", path)
    elif action:  # the file's folder becomes a link to the outside folder `action`
        shutil.rmtree(Path(path).parent)
        os.symlink(action, Path(path).parent, target_is_directory=True)
    return resolved


library.allowed_path = swap_after_check
sys.argv = [str(Path(repo) / "server.py"), *sys.argv[3:]]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


class Setup:
    """The folders and files of one module's server."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.docs = root / "docs"  # LINECITE_ALLOWED_DIRS of KB `safe`
        self.outside = root / "outside"
        self.watched = root / "watched"  # KB `followed` follows it (sourcePaths)
        self.base = root / "base"


def make_files(setup: Setup) -> dict[str, str]:
    """Every file the tests ask for; returns the launcher's swap plan (path -> action)."""
    docs, outside, watched = setup.docs, setup.outside, setup.watched
    for folder in (docs / "sub-target", docs / "swapped", outside, watched):
        folder.mkdir(parents=True)
    (docs / "normal.txt").write_text(NORMAL, encoding="utf-8")
    (docs / "z.txt").symlink_to("/dev/zero")
    os.mkfifo(docs / "f.txt")
    for name in ("late-fifo.txt", "late-zero.txt"):  # regular files when the path is checked
        (docs / name).write_text("Harmless at check time.", encoding="utf-8")
    (outside / "secret.md").write_text(SECRET, encoding="utf-8")
    (docs / "sub").symlink_to(outside, target_is_directory=True)  # a link already
    (docs / "swapped" / "secret.md").write_text("Nothing to see here.", encoding="utf-8")
    os.link(outside / "secret.md", docs / "linked.md")
    (watched / "a.txt").write_text("Alpha report on the harbour crane.", encoding="utf-8")
    os.mkfifo(watched / "f.txt")
    (watched / "z.txt").symlink_to("/dev/zero")
    bm25_kb(setup.base, "safe")
    bm25_kb(setup.base, "followed", (watched,))
    return {str(docs / "late-fifo.txt"): "fifo", str(docs / "late-zero.txt"): "zero",
            str(docs / "swapped" / "secret.md"): str(outside)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    setup = Setup(tmp_path_factory.mktemp("stdio-devices"))
    try:
        plan = make_files(setup)
    except OSError as err:  # a file system without FIFOs, symlinks or hard links
        pytest.skip(f"this file system cannot make the test's files: {err}")
    (setup.root / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    (setup.root / "launcher.py").write_text(LAUNCHER, encoding="utf-8")
    return setup


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stdio(setup):
    """The server over stdio, with docs/normal.txt indexed through it first."""
    log = setup.root / "server.log"
    transport = StdioTransport(
        PY, [str(setup.root / "launcher.py"), str(REPO), str(setup.root / "plan.json"),
             "--base-path", str(setup.base)],
        env=clean_env(**{ALLOWED_ENV: str(setup.docs)}), cwd=str(REPO), keep_alive=False,
        log_file=log)
    async with Client(transport, timeout=CALL_TIMEOUT) as client:
        done = await call(client, "ingest_file", path=str(setup.docs / "normal.txt"),
                          kb_id="safe")
        assert done["indexed"] == 1 and done["failed"] == [], done
        yield client
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


def release_a_blocked_reader(fifo: Path) -> threading.Timer:
    """After UNBLOCK_AFTER s, open `fifo` for writing and close it: a server blocked opening
    it for reading gets EOF and answers, so a regression fails instead of hanging the run.
    Harmless when `fifo` is none (opened without truncating, closed at once)."""
    def release() -> None:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader waits, as it should be; or it is no FIFO now
            pass

    timer = threading.Timer(UNBLOCK_AFTER, release)
    timer.start()
    return timer


async def ingest_promptly(client: Client, path: Path) -> tuple[float, str]:
    """Seconds `ingest_file(path)` took, and the text of its answer (refusal or summary)."""
    timer = release_a_blocked_reader(path)
    start = time.monotonic()
    try:
        result = await client.call_tool("ingest_file", {"path": str(path), "kb_id": "safe"},
                                        raise_on_error=False)
    finally:
        timer.cancel()
    return time.monotonic() - start, result.content[0].text


async def still_searches(client: Client) -> None:
    hits = (await call(client, "search", query="harbour crane inspection", kb_id="safe",
                       search_mode="bm25"))["hits"]
    assert [h["source"] for h in hits] == ["normal.txt"]


@pytest.mark.parametrize("name", ["z.txt", "f.txt"])
async def test_a_device_link_or_fifo_is_refused_promptly_over_stdio(stdio, setup, name):
    # issue 34: a link to /dev/zero and a FIFO named like documents; the path check (the
    # link leads out of the folder; a FIFO is no file) refuses both before any open
    took, text = await ingest_promptly(stdio, setup.docs / name)
    assert took < PROMPT, text
    assert name in text and ("outside the folders" in text or "is not a file" in text), text
    assert "4711" not in text and "Traceback" not in text
    await still_searches(stdio)


@pytest.mark.parametrize("name, kind", [("late-fifo.txt", "a pipe (FIFO)"),
                                        ("late-zero.txt", "a device")])
async def test_a_fifo_or_device_swapped_in_after_the_check_fails_promptly(stdio, setup, name,
                                                                          kind):
    # regression (issue 34): the file checked was not the file opened; a FIFO swapped in
    # blocked the server's open for good, a link to /dev/zero spun it reading zeros
    took, text = await ingest_promptly(stdio, setup.docs / name)
    assert took < PROMPT, text
    summary = json.loads(text)
    assert summary["indexed"] == 0
    (failed,) = summary["failed"]
    assert (failed["source"], failed["reason"]) == (name, "not-a-regular-file"), failed
    assert f"is {kind}, not a regular file" in failed["detail"]
    await still_searches(stdio)


async def test_a_followed_folder_skips_fifo_and_device_and_indexes_the_rest(stdio):
    # regression (issue 34): a FIFO in a followed folder was dropped without a word
    plan = await call(stdio, "check_changes", kb_id="followed")
    assert plan["added"] == ["watched/a.txt"]
    skipped = {s.get("name"): s["reason"] for s in plan["skipped"]}
    assert skipped == {"watched/f.txt": "not-a-regular-file",
                       "watched/z.txt": "outside-folder"}, plan["skipped"]
    start = time.monotonic()
    started = await call(stdio, "start_reindex", kb_id="followed", scope="full")
    assert started["orchestrator"]["started"] or started["orchestrator"].get("running"), started
    info = {}
    while time.monotonic() - start < CALL_TIMEOUT:
        info = await call(stdio, "get_index_info", kb_id="followed")
        if info["status"] == "idle" and info.get("last_run"):
            break
        await asyncio.sleep(0.2)
    assert info["status"] == "idle" and info["last_run"]["ok"], info
    counts = info["sources_by_state"]
    assert info["last_run"]["counts"]["indexed"] == 1, info
    assert (counts["ready"], counts["failed"]) == (1, 0), counts
    hits = (await call(stdio, "search", query="alpha report", kb_id="followed",
                       search_mode="bm25"))["hits"]
    assert [h["source"] for h in hits] == ["watched/a.txt"]


async def test_a_folder_link_to_outside_is_refused_over_stdio(stdio, setup):
    # issue 34: ALLOWED/sub is a link to an outside folder: sub/secret.md is outside
    took, text = await ingest_promptly(stdio, setup.docs / "sub" / "secret.md")
    assert took < PROMPT
    assert "outside the folders" in text and "4711" not in text, text


async def test_a_folder_swapped_for_an_outside_link_after_the_check_is_never_read(stdio,
                                                                                  setup):
    # regression (issue 34): ALLOWED/swapped/secret.md passed the check, then `swapped`
    # became a link to the outside folder, and the outside secret was indexed and served
    took, text = await ingest_promptly(stdio, setup.docs / "swapped" / "secret.md")
    assert took < PROMPT
    summary = json.loads(text)
    assert summary["indexed"] == 0
    assert [(f["source"], f["reason"]) for f in summary["failed"]] == [
        ("secret.md", "outside-folder")], summary
    found = await call(stdio, "search", query="4711", kb_id="safe", search_mode="exact")
    assert "secret.md" not in [h["source"] for h in found["hits"]]


async def test_a_hard_link_inside_the_allowed_folder_counts_as_inside(stdio, setup):
    # decision (issue 34, docs/security.md): a hard link is a name inside the folder for the
    # same bytes, as a copy would be; it is read, and cited under its inside name
    took, text = await ingest_promptly(stdio, setup.docs / "linked.md")
    assert took < PROMPT
    summary = json.loads(text)
    assert summary["indexed"] == 1 and summary["failed"] == [], summary
    hits = (await call(stdio, "search", query="4711", kb_id="safe", source="linked.md",
                       search_mode="exact"))["hits"]
    assert [h["source"] for h in hits] == ["linked.md"]
    read = await call(stdio, "read_range", source="linked.md", page=1, kb_id="safe")
    assert read["lines"][0]["text"] == SECRET
