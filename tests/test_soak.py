"""The soak of issue 25: a folder of real corpus files is edited, renamed, deleted and
restored, config.json changes twice, the embedder server stops and starts, and one indexer is
killed (kill -9), while a stdio server answers searches. At the end the index equals a clean
rebuild of the final folder, with no tool error and no answer slower than 3 s.

Real parts: the real `server.py` over stdio (fastmcp Client), real `ingest.py` runs, real
SQLite and embedded Chroma, an OpenAI-speaking embedder on 127.0.0.1 (tests/test_embedders.py).
LINECITE_SOAK_SECONDS sets how long the schedule runs (default 45, CI's budget);
LINECITE_SOAK_SEED replays one schedule (the seed is printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import sqlite3
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import call, shared_path
from test_bm25_index import assert_same_as_fts5
from test_config_reload import edit_config, served
from test_consistency import cli, make_kb
from test_embedders import KEYS, MODELS, Provider
from test_server import ingest_cli

import chroma_store
import fulltext
import kb as kbmod
from index import states
from pipeline.indexer import PAUSE_ENV
from providers import embedders

SECONDS = float(os.environ.get("LINECITE_SOAK_SECONDS", "45"))
SEED = int(os.environ.get("LINECITE_SOAK_SEED", "2025"))
SLOWEST = 3.0  # seconds: no search answer may take longer
FILES = ["md/en/docugami_KG-RAG_README.md", "md/zh/cmrc2018_README_CN.md",
         "legacy/textract/expected_doc_raw_text.txt", "docx/docx2python/zen_of_python.docx",
         "docx/unstructured/eng_spa_mult.docx", "docx/zh/ChocolateFactory.docx"]
TEXTS = (".md", ".txt")  # the files an edit appends a line to
QUERIES = ["knowledge graph", "阅读理解", "python beautiful", "chocolate", "the"]
DIMENSION = 128  # the second config change also asks the embedder for shorter vectors


class Embedder:
    """The OpenAI-speaking fake, stoppable and restartable on the same port (so the URL in
    config.json stays right)."""

    def __init__(self) -> None:
        self.api = Provider("openai")
        self.port = self.api.server.server_address[1]
        self.up = True

    def stop(self) -> None:
        self.api.close()
        self.up = False

    def start(self) -> None:
        self.api.server = ThreadingHTTPServer(("127.0.0.1", self.port), self.api._handler())
        threading.Thread(target=self.api.server.serve_forever, daemon=True).start()
        self.up = True


class Folder:
    """The watched folder: real corpus files, changed the way a user changes them."""

    def __init__(self, docs: Path, rng: random.Random) -> None:
        self.docs, self.rng = docs, rng
        self.originals = {Path(f).name: shared_path("corpus", f) for f in FILES}
        self.edits = 0
        docs.mkdir()
        for name, source in self.originals.items():
            shutil.copyfile(source, docs / name)

    def change(self) -> str:
        """One random edit, rename, delete or restore; says which, for the log."""
        present = sorted(p.name for p in self.docs.iterdir())
        missing = sorted(set(self.originals) - {p.split("~")[0] for p in present})
        actions = (["edit", "rename", "delete"] if present else []) + (["restore"] if missing
                                                                        else [])
        action = self.rng.choice(actions)
        if action == "restore":
            name = self.rng.choice(missing)
            shutil.copyfile(self.originals[name], self.docs / name)
            return f"restore {name}"
        name = self.rng.choice(present)
        path = self.docs / name
        if action == "edit" and path.suffix in TEXTS:
            self.edits += 1
            with path.open("a", encoding="utf-8") as out:
                out.write(f"\nSoak edit {self.edits}: the harbour crane logbook.\n")
            return f"edit {name}"
        if action in ("edit", "rename"):  # a binary file is 'edited' by renaming it
            stem = name.split("~")[0]
            renamed = self.docs / (f"{stem}~{self.rng.randrange(100)}{path.suffix}"
                                   if "~" not in name else stem)
            path.rename(renamed)
            return f"rename {name} -> {renamed.name}"
        path.unlink()
        return f"delete {name}"


async def keep_searching(client, stop: asyncio.Event, tally: dict) -> None:
    """Auto searches until told to stop; every tool error and every latency recorded."""
    n = 0
    while not stop.is_set():
        query = QUERIES[n % len(QUERIES)]
        n += 1
        started = time.monotonic()
        try:
            found = await call(client, "search", query=query, search_mode="auto")
            if "degraded" in found:  # the vector leg is down: said, and answered from BM25
                tally["degraded"][found["degraded"][:200]] = \
                    tally["degraded"].get(found["degraded"][:200], 0) + 1
        except Exception as err:  # every failure is counted and shown, none is hidden
            tally["errors"].append(f"{query}: {type(err).__name__}: {err}"[:300])
        tally["latencies"].append(time.monotonic() - started)
        await asyncio.sleep(0.1)


async def still_degraded(client, limit: float) -> str | None:
    """None once auto search uses vectors again (within `limit` s), else why it does not."""
    deadline = time.monotonic() + limit
    while (why := (await call(client, "search", query=QUERIES[0],
                              search_mode="auto")).get("degraded")) \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
    return why


async def reembed(client, limit: float = 120.0) -> str:
    """Re-embed every chunk through the server (start_reindex scope embedding) after the
    embedder's dimension changed; the status once the run is over."""
    await call(client, "start_reindex", kb_id="docs", scope="embedding")
    deadline = time.monotonic() + limit
    while (info := await call(client, "get_index_info", kb_id="docs"))["status"] != "idle" \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    return info["status"]


async def index(base: Path) -> int:
    """One indexer run to its end; its exit code (a run may fail while the embedder is down)."""
    proc = cli(base, "--kb", "docs")
    await asyncio.to_thread(proc.communicate, timeout=300)
    return proc.returncode


async def index_and_kill(base: Path) -> bool:
    """An indexer killed (kill -9) right after its first commit; False if it never paused."""
    proc = cli(base, "--kb", "docs", **{PAUSE_ENV: "after-commit"})

    def wait_for_pause() -> None:
        for line in proc.stderr:
            if b"paused at" in line:
                return

    try:
        await asyncio.wait_for(asyncio.to_thread(wait_for_pause), timeout=120)
        return proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=30)


def schedule(rng: random.Random, steps: int) -> dict[int, str]:
    """At which steps the one-off events happen: two config changes, the embedder down then
    up again, one killed indexer; the other steps only change files."""
    events = ["config", "config", "embedder-down", "kill"]
    at = sorted(rng.sample(range(steps - 1), len(events)))
    plan = dict(zip(at, events, strict=True))
    down = at[events.index("embedder-down")]
    free = [s for s in range(down + 1, min(steps, down + 4)) if s not in plan]
    if free:  # else it comes up after the last step
        plan[rng.choice(free)] = "embedder-up"
    return plan


def chunk_rows(kb: kbmod.KnowledgeBase) -> tuple[dict, list]:
    """The index's sources (name -> state) and every chunk (source, page, lines, text)."""
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        sources = dict(conn.execute("SELECT name, state FROM sources").fetchall())
        chunks = conn.execute("SELECT s.name, c.page, c.line_start, c.line_end, c.text"
                              " FROM chunks c JOIN sources s ON s.id = c.source_id"
                              " ORDER BY s.name, c.page, c.line_start, c.line_end").fetchall()
        return sources, [tuple(r) for r in chunks]
    finally:
        conn.close()


def assert_store_matches_sqlite(kb: kbmod.KnowledgeBase) -> None:
    """Every chunk embedded once: Chroma's ids are SQLite's chunk ids, none twice, none left."""
    store = chroma_store.ChromaStore(kb.folder, kb.id, chroma_store.embedder_for(kb.embedding),
                                     readonly=True)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    conn.row_factory = sqlite3.Row
    try:
        ids = store.all_ids()
        assert store.count() == len(ids)
        assert ids == states.indexed_chunk_ids(conn) == states.all_chunk_ids(conn)
        assert fulltext.counts(conn)["pending"] == 0 and not states.tombstones(conn)
        assert_same_as_fts5(conn, QUERIES)
    finally:
        conn.close()
        store.close()


def rebuild(base: Path, tmp_path: Path) -> kbmod.KnowledgeBase:
    """A fresh KB following the same folder with the same config.json, built by the CLI."""
    fresh = tmp_path / "fresh"
    kbmod.open_or_create(fresh, "docs")
    shutil.copyfile(base / "docs" / "config.json", fresh / "docs" / "config.json")
    ingest_cli("--kb", "docs", base=fresh)
    return kbmod.load(fresh, "docs")


@pytest.mark.slow
async def test_the_index_after_a_soak_equals_a_clean_rebuild(tmp_path, monkeypatch):
    rng = random.Random(SEED)
    print(f"\nsoak: LINECITE_SOAK_SEED={SEED} LINECITE_SOAK_SECONDS={SECONDS:g}")
    env, key = KEYS["openai"]
    monkeypatch.setenv(env, key)
    monkeypatch.setenv(embedders.BREAKER_PAUSE_ENV, "1")  # a restarted embedder is asked again soon
    base, docs = tmp_path / "base", tmp_path / "docs"
    folder = Folder(docs, rng)
    embedder = Embedder()
    make_kb(base, "docs", [docs])
    embedding = {"provider": "openai", "baseUrl": embedder.api.url,
                 "model": MODELS["openai"], "apiKeyPreset": "OpenAI"}
    edit_config(base, embedding=embedding)
    changes = [{"search": {"vectorWeight": 0.3}},
               {"search": {"fusion": "rrf"}, "embedding": {**embedding, "dimension": DIMENSION}}]
    ingest_cli("--kb", "docs", base=base)
    steps = max(6, int(SECONDS / 6))  # one step ~ a change and an indexer run
    plan = schedule(rng, steps)
    log: list[str] = []
    tally = {"errors": [], "latencies": [], "degraded": {}}
    stop = asyncio.Event()
    started = time.monotonic()
    try:
        async with served(base) as client:
            worker = asyncio.create_task(keep_searching(client, stop, tally))
            step, kill_due = 0, False
            while step < steps or time.monotonic() - started < SECONDS:
                for _ in range(rng.randint(1, 2)):
                    log.append(folder.change())
                event = plan.get(step)
                if event:
                    log.append(event)
                if event == "config":
                    change = changes.pop(0)
                    edit_config(base, **change)
                    if "embedding" in change:
                        log.append(f"re-embedded: {await reembed(client)}")
                elif event == "embedder-down":
                    embedder.stop()
                elif event == "embedder-up":
                    embedder.start()
                kill_due = kill_due or event == "kill"
                if kill_due:  # a run that fails before its first commit (embedder down) is
                    kill_due = not await index_and_kill(base)  # not killed: the next one is
                    log.append(f"killed: {not kill_due}")
                else:
                    log.append(f"indexer exit {await index(base)}")
                step += 1
            if not embedder.up:
                embedder.start()
                log.append("embedder-up")
            if kill_due:
                log.append(folder.change())
                log.append(f"killed: {await index_and_kill(base)}")
            assert await index(base) == 0
            stop.set()
            await worker
            # the breaker's pause doubles while the embedder stays down: at most about as long
            # as it was down, which is less than the whole soak
            degraded = await still_degraded(client, SECONDS + 15)
            info = await call(client, "get_index_info", kb_id="docs")
        fresh = rebuild(base, tmp_path)
    finally:
        stop.set()
        if embedder.up:
            embedder.api.close()
    print(json.dumps({"seed": SEED, "steps": step, "seconds": round(time.monotonic() - started),
                      "searches": len(tally["latencies"]), "degraded": tally["degraded"],
                      "slowest": round(max(tally["latencies"]), 2), "schedule": log},
                     ensure_ascii=False, indent=1))
    assert not changes and "killed: True" in log
    assert any(r["body"].get("dimensions") == DIMENSION for r in embedder.api.requests)
    soaked = kbmod.load(base, "docs")
    assert info["status"] == "idle", info
    assert degraded is None, f"seed {SEED}: embedder up, all embedded, still {degraded}"
    assert chunk_rows(soaked) == chunk_rows(fresh)
    assert_store_matches_sqlite(soaked)
    assert tally["errors"] == [], f"seed {SEED}: {tally['errors']}"
    assert max(tally["latencies"]) < SLOWEST, f"seed {SEED}: slowest {max(tally['latencies'])}"
