"""Search across knowledge bases: a real `server.py` over stdio (fastmcp's Client; once over
streamable HTTP) serving four KBs built by the real pipeline: `manuals` (an OpenAI-format
embedder on 127.0.0.1), `code`
(an Ollama-format one of another dimension), `notes` (`embedding: none`, forty notes that all
match) and `broken` (its fulltext.sqlite3 overwritten). One search over all ranks the three
that answer fairly, names the damaged one, and every hit reads back through read_range with its
own kb_id; the bounds on kb_id lists hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from conftest import call, clean_env, free_port, stop_process, tool_error
from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from test_embedders import KEYS, MODELS, Provider

import kb as kbmod
from common.limits import UserError
from ingest import ingest
from library import Library
from ranking import filters
from ranking.request import SearchRequest
from service import multikb

REPO = Path(__file__).resolve().parent.parent
QUERY = "harbour crane containers"
ONE_KB_ORDER = [("crane.txt", 1.0), ("budget.txt", 0.318421)]  # as before issue 47
module_loop = pytest.mark.asyncio(loop_scope="module")  # share the module's stdio server
DOCS = {
    "manuals": {"crane.txt": "The harbour crane lifts cargo containers onto the ships.",
                "budget.txt": "The hospital budget grows by two percent next year."},
    "code": {"crane.py": "def lift_containers(crane):\n    # the harbour crane moves containers\n"
                         "    return crane.lift()\n",
             "tax.py": "def vat(amount):\n    return amount * 0.2\n"},
    "notes": {f"n{i:02d}.txt": f"harbour crane containers crane containers harbour, note {i}"
              for i in range(40)},
    "broken": {"gone.txt": "harbour crane containers, soon unreadable"},
}


def build(base: Path, tmp: Path, kb_id: str, embedding: dict) -> None:
    folder = tmp / "files" / kb_id
    for name, text in DOCS[kb_id].items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    kb = kbmod.open_or_create(base, kb_id)
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    (kb.folder / "config.json").write_text(json.dumps({**config, "embedding": embedding}),
                                           encoding="utf-8")
    summary = ingest(kbmod.load(base, kb_id), [folder])
    assert summary.indexed == len(DOCS[kb_id]) and not summary.failed, summary


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The base with the four KBs, and the two embedding servers they use."""
    openai, ollama = Provider("openai"), Provider("ollama", dim=64)
    key_env, key = KEYS["openai"]
    old = os.environ.get(key_env)
    os.environ[key_env] = key
    tmp = tmp_path_factory.mktemp("multikb")
    base = tmp / "base"
    build(base, tmp, "manuals", {"provider": "openai", "model": MODELS["openai"],
                                 "baseUrl": openai.url, "apiKeyPreset": "OpenAI"})
    build(base, tmp, "code", {"provider": "ollama", "model": MODELS["ollama"],
                              "baseUrl": ollama.url, "dimension": 64})
    build(base, tmp, "notes", {"provider": "none"})
    build(base, tmp, "broken", {"provider": "none"})
    index = base / "broken" / "fulltext.sqlite3"
    for extra in ("-wal", "-shm"):
        Path(f"{index}{extra}").unlink(missing_ok=True)
    index.write_bytes(b"this is no database " * 400)
    yield base, {key_env: key}
    openai.close()
    ollama.close()
    if old is None:
        os.environ.pop(key_env, None)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(world):
    """One `python server.py` over stdio for the module; its stderr shows no traceback."""
    base, env = world
    log = base.parent / "server.log"
    transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path", str(base)],
                               env=clean_env(**env), cwd=str(REPO), keep_alive=False,
                               log_file=log)
    async with Client(transport, timeout=60) as session:
        yield session
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


@module_loop
async def test_every_kb_at_once_ranks_fairly_names_the_damaged_one_and_reads_back(client):
    got = await call(client, "search", query=QUERY, kb_id="*", top_k=8)
    report = {r["kb_id"]: r for r in got["knowledge_bases"]}
    assert {k: r["status"] for k, r in report.items()} == {
        "broken": "damaged", "code": "ok", "manuals": "ok", "notes": "ok"}
    assert "--kb broken --rebuild" in report["broken"]["error"]
    assert "broken did not answer" in got["failed"]
    assert got["kb_id"] == ["broken", "code", "manuals", "notes"]
    # forty matching notes do not crowd out the one matching file of each other KB
    # (each KB's best scores 1; ties go by the order the KBs are named)
    top = [(h["kb_id"], Path(h["source"]).name) for h in got["hits"][:3]]
    assert top[:2] == [("code", "crane.py"), ("manuals", "crane.txt")] and top[2][0] == "notes"
    assert got["hits"][0]["score"] == 1.0 and len(got["hits"]) == 8
    assert [h["score"] for h in got["hits"]] == sorted((h["score"] for h in got["hits"]),
                                                       reverse=True)
    for hit in got["hits"]:
        lines = await call(client, "read_range", source=hit["source"], page=hit["page"],
                           line_start=hit["line_start"], line_end=hit["line_end"],
                           kb_id=hit["kb_id"])
        assert "\n".join(line["text"] for line in lines["lines"]) == hit["text"], hit
        assert lines["kb_id"] == hit["kb_id"]


@module_loop
async def test_a_list_in_vector_mode_takes_each_kb_embedder_and_names_the_kb_without_one(client):
    got = await call(client, "search", query="containers crane", kb_id=["code", "manuals",
                                                                        "notes"],
                     search_mode="vector", top_k=4)
    assert {h["kb_id"] for h in got["hits"]} == {"code", "manuals"}
    assert {Path(h["source"]).name for h in got["hits"][:2]} == {"crane.py", "crane.txt"}
    notes = next(r for r in got["knowledge_bases"] if r["kb_id"] == "notes")
    assert notes["status"] == "error" and "no embedder" in notes["error"]


@module_loop
async def test_filters_across_kbs_say_which_hold_nothing_that_passes(client):
    got = await call(client, "search", query=QUERY, kb_id=["manuals", "code", "notes"],
                     types=["code"])
    assert {h["kb_id"] for h in got["hits"]} == {"code"}
    status = {r["kb_id"]: r["status"] for r in got["knowledge_bases"]}
    assert status == {"manuals": "no_match", "code": "ok", "notes": "no_match"}
    text = await tool_error(client, "search", query=QUERY, kb_id=["manuals", "notes"],
                            types=["pdf"])
    assert "no knowledge base could answer" in text and "types text (2), txt (2)" in text


@module_loop
async def test_kb_id_lists_are_bounded_and_checked(client):
    text = await tool_error(client, "search", query=QUERY, kb_id=[f"k{i}" for i in range(11)])
    assert f"holds 11 items; send at most {multikb.MAX_SEARCH_KBS}" in text
    text = await tool_error(client, "search", query=QUERY, kb_id=["manuals", "nope"])
    assert "unknown kb_id 'nope'" in text and "broken, code, manuals, notes" in text
    text = await tool_error(client, "search", query=QUERY, kb_id=[])
    assert "empty list" in text
    tools = {t.name: t for t in await client.list_tools()}
    described = json.dumps(tools["search"].input_schema["properties"]["kb_id"])
    assert f"at most {multikb.MAX_SEARCH_KBS} a search" in described


def test_every_kb_beyond_the_bound_is_refused_with_the_way_out(world, monkeypatch):
    base, _ = world
    monkeypatch.setattr(multikb, "MAX_SEARCH_KBS", 3)
    library = Library(base)
    try:
        with pytest.raises(UserError, match='"\\*" would search 4 knowledge bases; one search '
                                            "takes at most 3: pass a list"):
            library.search(SearchRequest.checked(QUERY, 5, "bm25", "*"))
        got = library.search(SearchRequest.checked(QUERY, 5, "bm25", ["notes", "manuals"],
                                                   filters=filters.parse(path="n0*.txt")))
        assert {h["kb_id"] for h in got["hits"]} == {"notes"}
    finally:
        library.close()


def test_merged_scores_are_over_each_kb_best_and_ties_alternate():
    many = [{"score": s, "id": f"a{i}"} for i, s in enumerate([8.0, 8.0, 6.0, 4.0])]
    one = [{"score": 0.2, "id": "b0"}, {"score": 0.1, "id": "b1"}]
    got = multikb.merged([many, one], 5)
    assert [h["id"] for h in got] == ["a0", "b0", "a1", "a2", "b1"]
    assert [h["score"] for h in got] == [1.0, 1.0, 1.0, 0.75, 0.5]
    assert got[1]["kb_score"] == 0.2


async def test_over_http_the_same_search_names_every_kb(world, tmp_path):
    """`server.py --transport http` with fastmcp's streamable-HTTP client."""
    base, env = world
    port = free_port()
    with (tmp_path / "http.log").open("w", encoding="utf-8") as errlog:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "server.py"), "--transport", "http", "--port", str(port),
             "--base-path", str(base)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=errlog, env=clean_env(**env), cwd=REPO)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "http.log").read_text(encoding="utf-8")
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not answer within 60 s"
                time.sleep(0.2)
        async with Client(StreamableHttpTransport(url), timeout=60) as http:
            got = await call(http, "search", query=QUERY, kb_id="*", search_mode="bm25")
    finally:
        stop_process(proc)
    assert {r["kb_id"]: r["status"] for r in got["knowledge_bases"]} == {
        "broken": "damaged", "code": "ok", "manuals": "ok", "notes": "ok"}
    assert {h["kb_id"] for h in got["hits"][:3]} == {"code", "manuals", "notes"}


@module_loop
async def test_a_word_no_kb_holds_shows_no_strong_hit_and_says_so(client):
    # issue 47: each KB's scores were divided by its own best, so `kiosk`, a word no KB
    # holds, came back scored 1.000 from the KBs whose vector leg found something
    got = await call(client, "search", query="kiosk", kb_id=["code", "manuals", "notes"],
                     top_k=6)
    assert {h["kb_id"] for h in got["hits"]} == {"code", "manuals"}
    for hit in got["hits"]:
        assert hit["score"] < 0.5 and hit["weak"] is True, hit
        assert hit["matched"] == {"words": 0, "of": 1, "terms": []}
        assert isinstance(hit["similarity"], float)  # their vector legs' cosines
    assert got["note"].startswith("No knowledge base searched holds a word of the query")
    report = {r["kb_id"]: r for r in got["knowledge_bases"]}
    assert "it holds 2 sources: types" in report["manuals"]["note"]
    assert report["notes"]["note"].startswith("No word of the query occurs in knowledge base "
                                              "'notes': nothing was found; it holds 40 sources")
    assert report["manuals"]["evidence"] == 0.0


@module_loop
async def test_a_kb_with_the_words_outranks_one_without(client):
    # issue 47: `code` holds neither word, yet its best vector hit scored 1.000 beside
    # `manuals`' real match and came first (ties went to the KB named first)
    got = await call(client, "search", query="hospital budget", kb_id=["code", "manuals"],
                     top_k=4)
    first = got["hits"][0]
    assert (first["kb_id"], Path(first["source"]).name) == ("manuals", "budget.txt")
    assert first["score"] == 1.0 and first["matched"]["words"] == 2 and "weak" not in first
    assert all(h["score"] < 0.5 and h["weak"] for h in got["hits"] if h["kb_id"] == "code")
    assert "note" not in got


@module_loop
async def test_one_kb_ranks_as_before_and_says_what_found_each_hit(client):
    # the evidence fields change no one-KB ranking (the quality benchmarks depend on it)
    got = await call(client, "search", query="crane budget lifts", kb_id="manuals", top_k=5)
    assert [(Path(h["source"]).name, h["score"]) for h in got["hits"]] == ONE_KB_ORDER
    assert [h["matched"]["terms"] for h in got["hits"]] == [["crane", "lifts"], ["budget"]]
