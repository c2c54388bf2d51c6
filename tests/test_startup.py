"""The first minute of a new server (issue 30): a real `python server.py` over real stdio, the
warm-up on, spoken to with the official `mcp` client as a host speaks to it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from conftest import clean_env, ingest_cli

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SERVER = str(REPO / "server.py")

FIRST = "Harbour log\nThe harbour crane was inspected in May.\n항구 크레인 점검을 마쳤습니다.\n"
LATER = "Tide notes\nThe quillwort tide gauge was recalibrated on Friday.\n"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> tuple[Path, Path]:
    """(base, docs): a KB `default` that follows `docs`, one file indexed and embedded, so a
    warm-up opens its Chroma store."""
    root = tmp_path_factory.mktemp("startup")
    docs, base = root / "docs", root / "base"
    docs.mkdir()
    (docs / "harbour.txt").write_text(FIRST, encoding="utf-8")
    summary = ingest_cli(str(docs), "--kb", "default", base=base)
    assert summary["indexed"] == 1 and summary["embedded"] == summary["chunks"], summary
    return base, docs


def text_of(result) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


@asynccontextmanager
async def official_client(base: Path, log: Path, **env: str) -> AsyncIterator[tuple]:
    """(session, the initialize result) of a `python server.py` over stdio, driven by the
    official `mcp` client; the server's stderr goes to `log`."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=PY, args=[SERVER, "--base-path", str(base)],
                                   env=clean_env(**env), cwd=str(REPO))
    with log.open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            yield session, await session.initialize()


async def test_ingest_file_right_after_the_tools_are_listed_indexes_the_file(indexed,
                                                                            tmp_path):
    # issue 30.1: the warm-up opened Chroma in a thread while ingest_file opened it to write;
    # the call failed with "'RustBindingsAPI' object has no attribute 'bindings'" or a path
    base, docs = indexed
    later = docs / f"tide-{tmp_path.name}.txt"
    later.write_text(LATER, encoding="utf-8")
    log = tmp_path / "server.log"
    async with official_client(base, log, LINECITE_WARM_UP="1") as (session, _):
        await session.list_tools()
        done = await session.call_tool("ingest_file", {"path": str(later)})
        assert not done.is_error, text_of(done)
        summary = done.structured_content
        assert summary["indexed"] == 1 and summary["failed"] == [], summary
        found = (await session.call_tool("search", {"query": "quillwort tide gauge",
                                                    "search_mode": "vector"}))
        assert not found.is_error, text_of(found)
        hits = found.structured_content["hits"]
        assert hits and "quillwort" in hits[0]["text"], hits
        listed = (await session.call_tool("list_sources", {})).structured_content
        state = {s["name"]: s["state"] for s in listed["sources"]}
        assert state[hits[0]["source"]] == "ready", state
    assert "Traceback" not in log.read_text(encoding="utf-8")


async def test_a_failure_inside_the_server_reaches_the_agent_as_what_to_do(tmp_path):
    # issue 30.1: Chroma's own words reached the agent ("'RustBindingsAPI' object has no
    # attribute 'bindings'", a bare path); here a store whose database is overwritten
    docs, base = tmp_path / "docs", tmp_path / "base"
    docs.mkdir()
    (docs / "harbour.txt").write_text(FIRST, encoding="utf-8")
    ingest_cli(str(docs), "--kb", "default", base=base)
    (base / "default" / "chroma" / "chroma.sqlite3").write_bytes(b"not a database " * 64)
    (docs / "tide.txt").write_text(LATER, encoding="utf-8")
    log = tmp_path / "server.log"
    async with official_client(base, log) as (session, _):
        failed = await session.call_tool("ingest_file", {"path": str(docs / "tide.txt")})
        found = await session.call_tool("search", {"query": "harbour crane",
                                                   "search_mode": "bm25"})
    said = text_of(failed)
    assert failed.is_error and "try the call again" in said.lower(), said
    for internal in ("not a database", "InternalError", str(base), "code: 26"):
        assert internal not in said, said
    assert "not a database" in log.read_text(encoding="utf-8")  # the detail is in the log
    assert found.structured_content["hits"], "what was indexed before is still found"


async def test_the_handshake_names_linecite_and_its_version(indexed, tmp_path):
    # issue 30.8: serverInfo.version was fastmcp's (4.2.3)
    import fastmcp

    from common.version import VERSION

    async with official_client(indexed[0], tmp_path / "server.log") as (_, init):
        assert (init.server_info.name, init.server_info.version) == ("linecite", VERSION)
    assert VERSION != fastmcp.__version__
    shown = subprocess.run([PY, SERVER, "--version"], capture_output=True, text=True,
                           encoding="utf-8", cwd=REPO, timeout=60).stdout
    assert shown.strip() == f"linecite {VERSION}"


async def test_a_missing_file_is_said_not_to_exist(indexed, tmp_path):
    # issue 30.8: a typo in the path was answered "is not a file"
    base, docs = indexed
    missing = docs / "no-such-notes.txt"
    async with official_client(base, tmp_path / "server.log") as (session, _):
        result = await session.call_tool("ingest_file", {"path": str(missing)})
        folder = await session.call_tool("ingest_file", {"path": str(docs)})
    assert result.is_error and "does not exist" in text_of(result), text_of(result)
    assert folder.is_error and "is not a file" in text_of(folder), text_of(folder)


def ready_line(log: Path, within: float) -> str | None:
    """The warm-up's "ready to search" line once it is in `log`, or None after `within` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for row in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if "ready to search" in row:
                return row
        time.sleep(0.2)
    return None


async def test_stdio_warms_up_at_initialize_before_any_listing(indexed, tmp_path):
    # issue 30.7: the warm-up began only once the host listed the tools
    log = tmp_path / "server.log"
    async with official_client(indexed[0], log, LINECITE_WARM_UP="1"):
        line = await anyio.to_thread.run_sync(ready_line, log, 90.0)
    assert line is not None and "kiwipiepy" in line and "chromadb" in line, line


def test_the_http_server_warms_up_as_it_starts(indexed, tmp_path):
    # issue 30.7: the HTTP server warmed up only after its first tools/list, so its first
    # search took 18.6 s; nobody asks it anything here
    from conftest import free_port, stop_process

    log = tmp_path / "http.log"
    with log.open("w", encoding="utf-8") as errlog:
        proc = subprocess.Popen([PY, SERVER, "--transport", "http", "--port", str(free_port()),
                                 "--base-path", str(indexed[0])], stdout=subprocess.DEVNULL,
                                stderr=errlog, cwd=REPO, env=clean_env(LINECITE_WARM_UP="1"))
        try:
            line = ready_line(log, 90.0)
        finally:
            stop_process(proc)
    assert line is not None and "chromadb" in line, log.read_text(encoding="utf-8")


async def test_a_file_ingested_alone_in_a_followed_folder_keeps_the_folder_name(tmp_path):
    # issue 30.2: ingest_file named docs/news.txt `news.txt`; check_changes then proposed
    # adding `docs/news.txt` and deleting `news.txt`, and start_reindex broke the citations
    docs, base = tmp_path / "docs", tmp_path / "base"
    docs.mkdir()
    (docs / "harbour.txt").write_text(FIRST, encoding="utf-8")
    ingest_cli(str(docs), "--kb", "default", base=base)
    (docs / "news.txt").write_text(LATER, encoding="utf-8")
    async with official_client(base, tmp_path / "server.log", LINECITE_WARM_UP="1") as (
            session, _):
        await session.list_tools()
        done = await session.call_tool("ingest_file", {"path": str(docs / "news.txt")})
        assert not done.is_error, text_of(done)
        changes = (await session.call_tool("check_changes", {})).structured_content
        found = (await session.call_tool("search", {"query": "quillwort tide gauge",
                                                    "search_mode": "bm25"})).structured_content
        renamed = await session.call_tool("ingest_file", {"path": str(docs / "news.txt"),
                                                          "source_name": "news.txt"})
    assert (changes["added"], changes["modified"], changes["deleted"]) == ([], [], []), changes
    assert found["hits"][0]["source"] == "docs/news.txt", found["hits"]
    said = text_of(renamed)
    assert renamed.is_error and "'docs/news.txt'" in said and "sync would rename" in said, said
