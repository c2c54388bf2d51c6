"""A vector store of another shape is reported `degraded` when it opens (issue 34 item 6).

Two collections seen in the field stand in place of a KB's `chroma/`, each built here with
chromadb directly: 384-dim vectors with no identity metadata (the first release's collections
carry none, so it passed as the builtin's 512-dim vectors), and a collection whose metadata
names another model. Before the fix the KB said `ready`, get_index_info warned of nothing,
and vector search failed inside Chroma ('expecting embedding with dimension of 384, got
512') with no fix named. Real parts throughout: the `ingest.py` CLI with the builtin model,
embedded Chroma, library.Library, and `python server.py` over stdio with fastmcp's Client.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import call, clean_env, tool_error
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

import chroma_store
import fulltext
from common.limits import UserError
from index import states
from library import Library
from ranking.request import SearchRequest

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
KB = "default"
FIX = f"start_reindex(kb_id={KB!r}, scope=\"embedding\")"
TEXT = ("Harbour inspection report\nThe crane on pier four needs new cables before winter.\n"
        "\f항만 점검 보고서\n4번 부두의 크레인은 겨울 전에 케이블을 교체해야 한다.\n")
ANOTHER_MODEL = {"provider": "openai", "model": "e5-small", "dimension": 384}

pytestmark = pytest.mark.slow  # the builtin model loads in the CLI and in each reader


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Path:
    """A base folder whose KB was indexed by the CLI with the builtin embedder (512 dims)."""
    root = tmp_path_factory.mktemp("shape")
    folder = root / "docs"
    folder.mkdir()
    (folder / "harbour.txt").write_text(TEXT, encoding="utf-8")
    base = root / "base"
    proc = subprocess.run([PY, str(REPO / "ingest.py"), str(folder), "--kb", KB,
                           "--base-path", str(base), "--quiet"], capture_output=True,
                          text=True, encoding="utf-8", env=clean_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["embedded"] == summary["chunks"] > 0, summary
    return base


def with_foreign_store(indexed: Path, tmp_path: Path, identity: dict | None) -> Path:
    """A copy of the indexed base whose `chroma/` is replaced by a 384-dim collection under
    the KB's collection name, one vector per chunk, with `identity` as its metadata."""
    import chromadb
    from chromadb.config import Settings

    base = tmp_path / "base"
    shutil.copytree(indexed, base)
    shutil.rmtree(base / KB / "chroma")
    conn = fulltext.connect(base / KB / fulltext.FILENAME)
    ids = sorted(states.indexed_chunk_ids(conn))
    conn.close()
    client = chromadb.PersistentClient(str(base / KB / "chroma"),
                                       Settings(anonymized_telemetry=False))
    metadata = {chroma_store.IDENTITY_PREFIX + k: v for k, v in identity.items()} \
        if identity else None
    collection = client.create_collection(chroma_store.collection_name(KB),
                                          embedding_function=None, metadata=metadata,
                                          configuration={"hnsw": {"space": "cosine"}})
    rng = random.Random(34)
    collection.add(ids=ids, embeddings=[[rng.uniform(-1, 1) for _ in range(384)] for _ in ids])
    client.close()
    return base


@pytest.mark.parametrize("identity", [None, ANOTHER_MODEL], ids=["unrecorded-384", "another-model"])
def test_library_reports_a_store_of_another_shape_degraded(indexed, tmp_path, identity):
    library = Library(with_foreign_store(indexed, tmp_path, identity))
    try:
        # the first call of all: no vector query has run yet
        listed = library.list_knowledge_bases()
        assert [(k["id"], k["status"]) for k in listed] == [(KB, "degraded")], listed
        assert FIX in listed[0]["error"]
        info = library.get_index_info(KB)
        assert info["vector_store"] == "degraded"
        assert any(FIX in w for w in info["warnings"]), info
        found = library.search(SearchRequest.checked("crane cables", 5, "auto", KB))
        assert found["hits"] and "harbour.txt" in found["hits"][0]["source"]
        assert FIX in found["degraded"] and "dimension of 384" not in found["degraded"]
        with pytest.raises(UserError) as caught:
            library.search(SearchRequest.checked("crane cables", 5, "vector", KB))
        assert FIX in str(caught.value)
        assert library.search(SearchRequest.checked("크레인", 5, "bm25", KB))["hits"]
    finally:
        library.close()
    if identity is None:
        assert "384-dim vectors" in listed[0]["error"]
    else:
        assert "openai model 'e5-small'" in listed[0]["error"]


def test_the_kbs_own_store_stays_ready(indexed):
    library = Library(indexed)
    try:
        assert library.list_knowledge_bases()[0]["status"] == "ready"
        info = library.get_index_info(KB)
        assert "vector_store" not in info and "warnings" not in info, info
        found = library.search(SearchRequest.checked("crane cables", 5, "vector", KB))
        assert found["hits"] and "degraded" not in found
    finally:
        library.close()


@pytest.mark.asyncio
async def test_stdio_server_reports_a_384_dim_store_degraded(indexed, tmp_path):
    base = with_foreign_store(indexed, tmp_path, None)
    log = tmp_path / "server.log"
    transport = StdioTransport(PY, [str(REPO / "server.py"), "--base-path", str(base)],
                               env=clean_env(), cwd=str(REPO), keep_alive=False, log_file=log)
    async with Client(transport, timeout=120) as client:
        listed = (await call(client, "list_knowledge_bases"))["knowledge_bases"]
        assert listed[0]["status"] == "degraded" and FIX in listed[0]["error"], listed
        info = await call(client, "get_index_info", kb_id=KB)
        assert info["vector_store"] == "degraded" and any(FIX in w for w in info["warnings"])
        found = await call(client, "search", query="crane cables", kb_id=KB)
        assert found["hits"] and FIX in found["degraded"]
        text = await tool_error(client, "search", query="crane cables", kb_id=KB,
                                search_mode="vector")
        assert FIX in text and "dimension of 384" not in text
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


def test_a_dimension_learnt_at_the_first_query_is_reported_then(tmp_path, monkeypatch):
    """An HTTP embedder without `embedding.dimension` knows its length only once it embeds:
    the store opens `ready`, the first query finds the other length, and from then on the
    listing and get_index_info say `degraded` too (before, only that search said so)."""
    from test_embedders import Provider, config_for, make_kb, write_docs

    import ingest

    server = Provider("openai", dim=256)
    monkeypatch.setenv("OPENAI_API_KEY", server.key)
    try:
        kb = make_kb(tmp_path, config_for(server))
        summary = ingest.ingest(kb, [write_docs(tmp_path / "docs", {"harbour.txt": TEXT})])
        assert (summary.indexed, summary.embedded) == (1, summary.chunks)
        server.dim = 384  # the same model name, now served at another length
        library = Library(tmp_path / "base")
        try:
            assert library.list_knowledge_bases()[0]["status"] == "ready"  # nothing to go by
            found = library.search(SearchRequest.checked("crane cables", 5, "auto", kb.id))
            fix = f"start_reindex(kb_id={kb.id!r}, scope=\"embedding\")"
            assert found["hits"] and fix in found["degraded"]
            listed = library.list_knowledge_bases()[0]
            assert listed["status"] == "degraded" and fix in listed["error"], listed
            assert library.get_index_info(kb.id)["vector_store"] == "degraded"
        finally:
            library.close()
    finally:
        server.close()
