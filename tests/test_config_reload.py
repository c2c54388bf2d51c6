"""config.json while linecite runs: a running server takes up a changed file (issue 25), and
every rewrite is atomic, so a reader never finds half a file.

The server tests spawn the real `server.py` over stdio with fastmcp's Client; the KB is
indexed and re-embedded with the real `ingest.py` CLI, against a small Ollama-speaking server
on 127.0.0.1 (tests/test_embedders.py) or the real built-in model.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from conftest import call, clean_env, tool_error
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from test_embedders import MODELS, Provider
from test_server import PY, REPO, SERVER, ingest_cli

import kb as kbmod
from common import limits

RELOAD_LIMIT = 2.0  # seconds a running server may take to see a changed config.json
MODEL_LOAD = 30.0  # and to load the built-in model on its first vector search (2 busy cores)
DOCS = {
    "harbour.txt": "The harbour crane lifted cargo containers from the ship at dawn.",
    "tide.txt": "Tide tables for March list the high water times at the pier.",
}


def config_path(base: Path) -> Path:
    return base / "docs" / "config.json"


def edit_config(base: Path, **fields) -> None:
    """Change config.json as a user's editor does: the file rewritten in place."""
    data = json.loads(config_path(base).read_text(encoding="utf-8"))
    config_path(base).write_text(json.dumps({**data, **fields}, indent=2), encoding="utf-8")


@pytest.fixture
def bm25_kb(tmp_path: Path) -> Path:
    """The base folder of KB `docs`, indexed by the CLI with embedding provider none."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    base = tmp_path / "base"
    kbmod.open_or_create(base, "docs")
    edit_config(base, embedding={"provider": "none"})
    ingest_cli(str(docs), "--kb", "docs", base=base)
    return base


@asynccontextmanager
async def served(base: Path):
    log = base.parent / "server.log"
    transport = StdioTransport(PY, [SERVER, "--base-path", str(base)], env=clean_env(),
                               cwd=str(REPO), keep_alive=False, log_file=log)
    async with Client(transport, timeout=120) as client:
        yield client
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


async def until(check, limit: float = RELOAD_LIMIT):
    """check()'s first truthy answer within `limit` seconds, else its last answer."""
    deadline = time.monotonic() + limit
    while not (got := await check()) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return got


async def switch_embedder_and_search(base: Path, embedding: dict, limit: float) -> None:
    """The server answers keywords only; the user switches the embedder and re-embeds with
    the CLI; the same server then answers vector searches within `limit` seconds."""
    async with served(base) as client:
        found = await call(client, "search", query="cargo crane", search_mode="auto")
        assert found["hits"][0]["source"].endswith("harbour.txt")
        assert "no embedder" in await tool_error(client, "search", query="cargo crane",
                                                 search_mode="vector")
        edit_config(base, embedding=embedding)
        summary = ingest_cli("--kb", "docs", base=base)  # re-embeds for the new embedder
        assert summary["fulltext"]["embedded"] == len(DOCS)
        started = time.monotonic()

        async def vector_hits():
            result = await client.call_tool("search", {"query": "cargo containers crane",
                                                       "search_mode": "vector"},
                                            raise_on_error=False)
            return None if result.is_error else result.structured_content["hits"]

        hits = await until(vector_hits, limit)
        assert hits, "the running server still has no embedder for the KB"
        assert time.monotonic() - started < limit
        assert hits[0]["source"].endswith("harbour.txt") and hits[0]["ranks"]["vector"] == 1
        auto = await call(client, "search", query="cargo crane", search_mode="auto")
        assert "degraded" not in auto and auto["hits"][0]["ranks"]["vector"] is not None


async def test_a_running_server_takes_up_a_new_hosted_embedder(bm25_kb):
    # regression (issue 25): Library kept the config.json read at first use, so after a
    # switch from provider none and a re-embed, vector search still said "no embedder"
    server = Provider("ollama")
    try:
        await switch_embedder_and_search(bm25_kb, {"provider": "ollama", "baseUrl": server.url,
                                                   "model": MODELS["ollama"]}, RELOAD_LIMIT)
        assert any(r["path"] == "/api/embed" for r in server.requests)
    finally:
        server.close()


@pytest.mark.slow
async def test_a_running_server_takes_up_the_builtin_embedder(bm25_kb):
    # regression (issue 25), with the real built-in model (USE) loaded by CLI and server
    await switch_embedder_and_search(bm25_kb, {"provider": "builtin"}, RELOAD_LIMIT + MODEL_LOAD)


async def test_a_broken_config_keeps_the_last_good_one_serving_and_says_so(bm25_kb):
    # regression (issue 25): a config.json that stops parsing (an editor mid-save, a typo)
    # must neither stop search nor pass silently
    async with served(bm25_kb) as client:
        assert "warning" not in await call(client, "search", query="tide tables")
        good = config_path(bm25_kb).read_text(encoding="utf-8")
        config_path(bm25_kb).write_text(good[:len(good) // 2], encoding="utf-8")

        async def warned():
            found = await call(client, "search", query="tide tables", search_mode="bm25")
            return found if "warning" in found else None

        found = await until(warned)
        assert found, "a broken config.json passed without a word"
        assert found["hits"][0]["source"].endswith("tide.txt")
        assert "config.json changed but cannot be used" in found["warning"]
        info = await call(client, "get_index_info", kb_id="docs")
        assert any("config.json" in w for w in info["warnings"])

        config_path(bm25_kb).write_text(good, encoding="utf-8")

        async def mended():
            found = await call(client, "search", query="tide tables", search_mode="bm25")
            return "warning" not in found

        assert await until(mended)


# ---------------------------------------------------------------------------
# atomic rewrites

def make_kb(tmp_path: Path) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(tmp_path / "base", "docs")
    kbmod.follow(kb, tmp_path / "first")
    return kb


def test_a_path_that_cannot_be_written_leaves_the_config_whole(tmp_path):
    # regression (issue 25): follow() rewrote config.json in place; a folder name that is not
    # valid UTF-8 (Linux hands it over with surrogates) failed mid-write, leaving an empty
    # file: the KB went `error` and lost its sourcePaths. Now refused up front, clearly.
    kb = make_kb(tmp_path)
    with pytest.raises(limits.UserError, match=r"caf\\xe9.*not UTF-8.*rename"):
        kbmod.follow(kb, tmp_path / "caf\udce9")
    assert kbmod.load(tmp_path / "base", "docs").source_paths == [str(tmp_path / "first")]
    assert not list(kb.folder.glob("*.tmp"))


def test_a_disk_that_fills_mid_write_leaves_the_old_config_and_no_temp_file(tmp_path,
                                                                             monkeypatch):
    kb = make_kb(tmp_path)
    before = config_path(tmp_path / "base").read_bytes()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        kbmod.follow(kb, tmp_path / "second")
    assert config_path(tmp_path / "base").read_bytes() == before
    assert not list(kb.folder.glob("*.tmp"))


def test_a_reader_never_sees_half_a_config_while_it_is_rewritten(tmp_path):
    # regression (issue 25): a reader that caught an in-place rewrite read half a file
    kb = make_kb(tmp_path)
    edit_config(tmp_path / "base", name="x" * 200_000)  # many write calls per rewrite
    kb = kbmod.load(tmp_path / "base", "docs")
    done, torn, seen = threading.Event(), [], []

    def read_loop() -> None:
        while not done.is_set():
            try:
                seen.append(len(kbmod.load(tmp_path / "base", "docs").source_paths))
            except kbmod.ConfigError as err:
                torn.append(str(err))

    reader = threading.Thread(target=read_loop)
    reader.start()
    try:
        for i in range(60):
            kbmod.follow(kb, tmp_path / f"folder{i}")
    finally:
        done.set()
        reader.join()
    assert torn == []
    assert seen and seen == sorted(seen) and seen[-1] <= 61
