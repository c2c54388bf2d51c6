"""MCP resources and the `cite` prompt through the official `mcp` client over real stdio: a real
`server.py` serving two KBs built by the real pipeline, one holding a source with a Korean
name with spaces in a folder, a Markdown file with headings, a text file of three form-feed
pages and enough files that resources/list takes three pages of cursors."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest
import pytest_asyncio
from conftest import clean_env
from mcp_types import PaginatedRequestParams

import kb as kbmod
from ingest import ingest
from surface import resources

REPO = Path(__file__).resolve().parent.parent
KOREAN = "계약서 2024/임대 계약 (최종).txt"
module_loop = pytest.mark.asyncio(loop_scope="module")
FILES = {
    "docs": {KOREAN: "임대 계약서\n임대료는 매월 1일에 지급한다.\n보증금은 천만 원이다.\n",
             "guide.md": "# Installing\nRun the installer once.\n\n## Upgrading\n"
                         "Stop the server first.\nThen run it again.\n",
             "pages.txt": "first page line\n\fsecond page\nhas two lines\n\fthird\n",
             **{f"bulk/n{i:03d}.txt": f"note {i}" for i in range(150)}},
    "mail": {"a.txt": "alpha", "b.txt": "beta"},
}


def build(base: Path, folder: Path, kb_id: str) -> None:
    for name, text in FILES[kb_id].items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    kb = kbmod.open_or_create(base, kb_id)
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    (kb.folder / "config.json").write_text(json.dumps({**config, "embedding": {
        "provider": "none"}}), encoding="utf-8")
    summary = ingest(kbmod.load(base, kb_id), [folder])
    assert summary.indexed == len(FILES[kb_id]), summary


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(tmp_path_factory):
    """An official-SDK ClientSession on `python server.py` over stdio."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    tmp = tmp_path_factory.mktemp("resources")
    base = tmp / "base"
    build(base, tmp / "docs", "docs")
    build(base, tmp / "mail", "mail")
    params = StdioServerParameters(command=sys.executable,
                                   args=[str(REPO / "server.py"), "--base-path", str(base)],
                                   env=clean_env(), cwd=str(REPO))
    log = tmp / "server.log"
    opened: asyncio.Future = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def hold() -> None:  # one task enters and leaves the client's task groups
        with log.open("w", encoding="utf-8") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), \
                    ClientSession(read, write) as client:
                await client.initialize()
                opened.set_result(client)
                await done.wait()

    task = asyncio.create_task(hold())
    await asyncio.wait([task, opened], return_when=asyncio.FIRST_COMPLETED)
    if not opened.done():
        await task  # raises why the server did not start
    yield opened.result()
    done.set()
    await task
    assert "Traceback" not in log.read_text(encoding="utf-8")


async def read_json(session, uri: str) -> dict:
    result = await session.read_resource(uri)
    (content,) = result.contents
    assert content.mime_type == "application/json"
    return json.loads(content.text)


def test_a_source_name_is_percent_encoded_whole_in_its_uri():
    uri = resources.source_uri("docs", f"docs/{KOREAN}")
    assert uri == ("linecite://docs/docs%2F%EA%B3%84%EC%95%BD%EC%84%9C%202024%2F%EC%9E%84%EB"
                   "%8C%80%20%EA%B3%84%EC%95%BD%20%28%EC%B5%9C%EC%A2%85%29.txt")
    assert unquote(uri.split("/", 3)[3]) == f"docs/{KOREAN}"
    assert resources.source_uri("docs", "a/b", 3).endswith("/a%2Fb/3")


@module_loop
async def test_every_source_of_every_kb_is_listed_once_across_cursor_pages(session):
    seen, cursor, pages = [], None, 0
    while True:
        answer = await session.list_resources(params=PaginatedRequestParams(cursor=cursor))
        pages += 1
        assert len(answer.resources) <= resources.LIST_PAGE
        seen += [(str(r.uri), r.name, r.mime_type) for r in answer.resources]
        cursor = answer.next_cursor
        if not cursor:
            break
    assert pages == 2  # 155 sources at 100 a page
    expected = [("docs", f"docs/{n}") for n in FILES["docs"]] + [("mail", f"mail/{n}")
                                                                for n in FILES["mail"]]
    assert sorted((uri, name) for uri, name, _ in seen) == sorted(
        (resources.source_uri(k, n), n) for k, n in expected)
    assert {mime for *_, mime in seen} == {"application/json"}
    from mcp.shared.exceptions import MCPError

    with pytest.raises(MCPError, match="invalid cursor"):
        await session.list_resources(params=PaginatedRequestParams(cursor="bm90IG91cnM="))


@module_loop
async def test_templates_and_the_outline_of_a_korean_source_with_spaces(session):
    templates = {t.uri_template for t in (await session.list_resource_templates())
                 .resource_templates}
    assert templates == {resources.SOURCE_TEMPLATE, resources.PAGE_TEMPLATE}
    name = f"docs/{KOREAN}"
    outline = await read_json(session, resources.source_uri("docs", name))
    assert (outline["source"], outline["pages"], outline["state"]) == (name, 1, "ready")
    assert outline["page_lines"] == [{"page": 1, "lines": 3,
                                      "uri": resources.source_uri("docs", name, 1)}]
    guide = await read_json(session, resources.source_uri("docs", "docs/guide.md"))
    assert guide["headings"] == [{"page": 1, "line": 1, "text": "Installing"},
                                 {"page": 1, "line": 4, "text": "Upgrading"}]
    paged = await read_json(session, resources.source_uri("docs", "docs/pages.txt"))
    assert [(p["page"], p["lines"]) for p in paged["page_lines"]] == [(1, 1), (2, 2), (3, 1)]


@module_loop
async def test_a_page_reads_as_read_range_reads_it(session):
    name = f"docs/{KOREAN}"
    page = await read_json(session, resources.source_uri("docs", name, 1))
    assert [line["text"] for line in page["lines"]] == FILES["docs"][KOREAN].splitlines()
    assert page["citation"] == f"{name}, page 1, lines 1-3"
    called = await session.call_tool("read_range", {"source": name, "page": 1, "kb_id": "docs"})
    assert called.structured_content == page
    second = await read_json(session, resources.source_uri("docs", "docs/pages.txt", 2))
    assert [line["line"] for line in second["lines"]] == [1, 2]


@module_loop
@pytest.mark.parametrize("uri, words", [
    (resources.source_uri("docs", "docs/pages.txt", 9), "page 9 is out of range"),
    (resources.source_uri("docs", "docs/pages.txt") + "/x", "is not a page number"),
    (resources.source_uri("docs", "docs/nope.txt"), "unknown source 'docs/nope.txt'"),
    (resources.source_uri("nokb", "docs/pages.txt"), "unknown kb_id 'nokb'"),
])
async def test_a_wrong_resource_uri_says_what_to_do(session, uri, words):
    from mcp.shared.exceptions import MCPError

    with pytest.raises(MCPError, match=words):
        await session.read_resource(uri)


@module_loop
async def test_the_cite_prompt_tells_the_search_read_range_quote_workflow(session):
    prompts = {p.name: p for p in (await session.list_prompts()).prompts}
    assert {a.name for a in prompts["cite"].arguments} == {"question", "kb_id"}
    got = await session.get_prompt("cite", {"question": "보증금은 얼마인가?", "kb_id": "docs"})
    text = got.messages[0].content.text
    assert text.startswith("Question: 보증금은 얼마인가?")
    assert text.index("`search`") < text.index("`read_range(") < text.index("Quote") < \
        text.index("`verify_citation(")  # issue 48: quotes are checked before answering
    assert 'kb_id="docs"' in text and "source, page N, lines A-B" in text
    every = (await session.get_prompt("cite", {})).messages[0].content.text
    assert 'kb_id="*"' in every
