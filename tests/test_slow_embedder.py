"""A slow or failing embedder over real stdio: `python server.py` on a KB whose Ollama (a
small server on 127.0.0.1 in the test, speaking /api/embed) hangs or answers 503.

Regression (issue 25, item 4): a query embedding used the indexing retry policy (60 s
timeout, 6 tries, 120 s budget) while holding the KB's lock, so one sleeping Ollama stalled
`search`, `read_range` and `list_sources` on the KB for 30-120 s. And (issue 45, item 8) a
search right after a start waited for the warm-up's slow embedder.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import call, clean_env, tool_error
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from test_embedders import DOCS, Provider, config_for, make_kb, write_docs

import ingest
from providers import embedders

REPO = Path(__file__).resolve().parent.parent
PAUSE = 1.0  # s, the breaker's first pause in the spawned server (LINECITE_EMBED_PAUSE)
QUERY = "cargo containers crane"


class FlakyOllama(Provider):
    """Ollama's /api/embed that can be switched to hang (accept, read, never answer) or to
    answer 503, and back; `requests` counts what reached it."""

    def __init__(self) -> None:
        super().__init__("ollama")
        self.mode = "ok"
        self.release = threading.Event()

    def answer(self, path: str, headers, body: dict) -> tuple[int, dict, dict]:
        if self.mode == "hang":
            self.release.wait(120)
        if self.mode != "ok":
            return 503, {}, {"error": "model runner is unavailable"}
        return super().answer(path, headers, body)

    def close(self) -> None:
        self.release.set()
        super().close()


@pytest.fixture
def ollama(tmp_path: Path):
    """A KB `docs` indexed through a working FlakyOllama."""
    server = FlakyOllama()
    kb = make_kb(tmp_path, config_for(server))
    summary = ingest.ingest(kb, [write_docs(tmp_path / "docs", DOCS)])
    assert (summary.indexed, summary.embedded) == (3, 3)
    yield server
    server.close()


def client(tmp_path: Path, warm_up: bool = False) -> Client:
    transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path",
                                                str(tmp_path / "base")],
                               env=clean_env(LINECITE_EMBED_PAUSE=str(PAUSE),
                                             LINECITE_WARM_UP="1" if warm_up else "0"),
                               cwd=str(REPO), keep_alive=False, log_file=tmp_path / "server.log")
    return Client(transport, timeout=180)


async def timed(coro, limit: float) -> tuple[object, float]:
    """(the result, seconds taken); fails the test when it takes longer than `limit`."""
    started = time.monotonic()
    result = await asyncio.wait_for(coro, limit)
    return result, time.monotonic() - started


async def search(mcp: Client, mode: str = "auto") -> dict:
    return await call(mcp, "search", query=QUERY, search_mode=mode, top_k=3)


@pytest.mark.parametrize("failure", ["hang", "503"])
async def test_a_failing_embedder_degrades_to_bm25_at_once_then_recovers(
        ollama, tmp_path, failure) -> None:
    async with client(tmp_path) as mcp:
        warm = await search(mcp)  # loads the segmenter and Chroma; the vector leg works
        assert "degraded" not in warm and warm["hits"][0]["ranks"]["vector"] == 1
        ollama.mode, asked = failure, len(ollama.requests)

        first, seconds = await timed(search(mcp), 3.0)
        assert first["hits"][0]["source"].endswith("harbour.txt")  # BM25 still finds it
        assert first["hits"][0]["ranks"] == {"bm25": 1, "vector": None}
        problem = "no answer within 2.5 s" if failure == "hang" else "HTTP 503"
        assert f"did not embed the query ({problem})" in first["degraded"]
        assert "failing since" in first["degraded"] and "then try it again" in first["degraded"]
        assert len(ollama.requests) == asked + 1  # one try, no retries

        # the breaker is open: no request, no wait, and the same note
        second, seconds = await timed(search(mcp), 1.0)
        assert seconds < 0.5 and second["hits"] == first["hits"]
        assert problem in second["degraded"] and "failing since" in second["degraded"]
        error = await asyncio.wait_for(tool_error(mcp, "search", query=QUERY,
                                                  search_mode="vector"), 1.0)
        assert "start it, or check 'embedding.baseUrl'" in error
        assert len(ollama.requests) == asked + 1

        # the server is back and the pause is over: one query tries, and closes the breaker
        ollama.mode = "ok"
        await asyncio.sleep(PAUSE + 0.2)
        back, _ = await timed(search(mcp, "vector"), 3.0)
        assert back["hits"][0]["source"].endswith("harbour.txt")
        assert back["hits"][0]["ranks"]["vector"] == 1 and "degraded" not in back
        again = await search(mcp)
        assert "degraded" not in again and len(ollama.requests) == asked + 3


async def test_read_range_and_list_sources_answer_while_a_search_waits_on_the_embedder(
        ollama, tmp_path) -> None:
    async with client(tmp_path) as mcp:
        warm = await search(mcp)
        hit = warm["hits"][0]
        ollama.mode = "hang"
        stuck = asyncio.create_task(search(mcp))
        while len(ollama.requests) < 2:  # the stuck search's request reached the server
            await asyncio.sleep(0.05)
        listed, seconds = await timed(call(mcp, "list_sources", kb_id="docs"), 1.0)
        assert listed["total"] == 3 and seconds < 0.5
        lines, seconds = await timed(call(mcp, "read_range", source=hit["source"],
                                          page=hit["page"], line_start=hit["line_start"],
                                          line_end=hit["line_end"]), 1.0)
        assert lines["lines"][0]["text"] == hit["text"] and seconds < 0.5
        assert not stuck.done()  # both answered while the search still waited
        result = await asyncio.wait_for(stuck, 3.0)
        assert "degraded" in result


async def test_a_search_while_the_warm_up_loads_answers_from_bm25_within_the_budget(
        ollama, tmp_path) -> None:
    # issue 45 (8): the slowest answers of the soak (4.4 s under load) were the first after a
    # start, waiting for the warm-up to load the embedder and Chroma; the embedder here is
    # slow to give its first vector, as Ollama loading its model is
    ollama.mode, asked = "hang", len(ollama.requests)
    async with client(tmp_path, warm_up=True) as mcp:
        await mcp.list_tools()  # as a host does at once: the warm-up starts
        while len(ollama.requests) == asked:  # the warm-up's load waits on the embedder
            await asyncio.sleep(0.05)
        first, _ = await timed(search(mcp), embedders.QUERY_TIMEOUT)  # the query's budget
        assert first["hits"][0]["source"].endswith("harbour.txt")
        assert first["hits"][0]["ranks"] == {"bm25": 1, "vector": None}
        assert first["degraded"].startswith("the meaning index is still loading")
        assert len(ollama.requests) == asked + 1  # it did not wait on the embedder itself
        ollama.mode = "ok"
        ollama.release.set()  # the embedder answers the warm-up, within its query timeout
        log = tmp_path / "server.log"
        while "ready to search" not in log.read_text(encoding="utf-8", errors="replace"):
            await asyncio.sleep(0.1)
        later = await search(mcp)
        assert "degraded" not in later and later["hits"][0]["ranks"]["vector"] == 1


def test_a_query_gets_one_try_within_the_bound() -> None:
    # the same bug in-process: the query waited 60 s per try, 6 tries
    server = FlakyOllama()
    try:
        embedder = embedders.embedder_for(config_for(server))
        server.mode = "hang"
        started = time.monotonic()
        with pytest.raises(embedders.EmbedderUnreachable, match="no answer within 2.5 s"):
            embedder.embed_query("x")
        assert time.monotonic() - started < embedders.QUERY_TIMEOUT + 0.5
        assert len(server.requests) == 1
    finally:
        server.close()
