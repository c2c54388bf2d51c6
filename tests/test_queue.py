"""The reindex queue and its orchestrator: real processes, real files, real stores."""

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import call, clean_env
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from test_embedders import Provider

import chroma_store
import fulltext
import ingest
import kb as kbmod
import library
import queue_runner
from common import limits, run_status
from common.pidlock import PidLock
from index import exact, fulltext_schema, states
from pipeline.indexer import PAUSE_ENV, Indexer

REPO = Path(__file__).resolve().parent.parent


BM25_ONLY = {"provider": "none"}  # no embedder: a queued run takes a fraction of a second


def make_kb(base: Path, kb_id: str, docs: Path,
            embedding: dict | None = None) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(base, kb_id)
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config["sourcePaths"] = [str(docs)]
    if embedding is not None:
        config["embedding"] = embedding
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, kb_id)


def write_docs(docs: Path, n: int, word: str = "harbour") -> None:
    docs.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (docs / f"note{i}.txt").write_text(f"Note {i} about the {word} crane and its permit.",
                                           encoding="utf-8")


def test_requests_for_one_kb_merge_into_the_widest_scope(tmp_path):
    first = queue_runner.enqueue(tmp_path, "a", "embedding", False, True)
    second = queue_runner.enqueue(tmp_path, "a", "full", False, True)
    third = queue_runner.enqueue(tmp_path, "a", "contextualization", True, False)
    other = queue_runner.enqueue(tmp_path, "b", "full", False, False)
    assert (first["merged"], second["merged"], third["merged"]) == (False, True, True)
    assert [(e["kb_id"], e["scope"], e["force"], e["deferred"])
            for e in queue_runner.entries(tmp_path)] == [("a", "full", True, False),
                                                         ("b", "full", False, False)]
    assert (second["scopes"], third["scopes"]) == (["embedding", "full"], [
        "embedding", "contextualization", "full"])  # every scope asked, each done
    assert (third["position"], other["position"]) == (1, 2)
    with pytest.raises(ValueError, match="scope must be one of"):
        queue_runner.enqueue(tmp_path, "a", "everything", False, False)
    assert queue_runner.request_cancel(tmp_path, "a")["dropped_waiting_entry"] is True
    assert [e["kb_id"] for e in queue_runner.entries(tmp_path)] == ["b"]


def test_two_writers_at_once_never_tear_the_queue_file(tmp_path):
    code = ("import sys; from pathlib import Path; import queue_runner\n"
            "for i in range(25): queue_runner.enqueue(Path(sys.argv[1]), f'{sys.argv[2]}{i}',"
            " 'full', False, True)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), prefix], cwd=REPO)
             for prefix in ("x", "y")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ids = [e["kb_id"] for e in json.loads((tmp_path / queue_runner.QUEUE_FILE)
                                          .read_text(encoding="utf-8"))["entries"]]
    assert sorted(ids) == sorted([f"x{i}" for i in range(25)] + [f"y{i}" for i in range(25)])


def run_orchestrator(base: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "queue_runner.py"), "--base-path",
                             str(base), *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, encoding="utf-8",
                            env=clean_env(**env))


def wait_for(line: str, proc: subprocess.Popen) -> None:
    for got in proc.stderr:
        if line in got:
            return
    pytest.fail(f"never saw {line!r}; exit {proc.wait()}")


@pytest.mark.slow
def test_one_orchestrator_at_a_time_and_a_killed_one_is_resumed(tmp_path):
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 3)
    kb = make_kb(base, "notes", docs)
    queue_runner.enqueue(base, "notes", "full", False, False)
    first = run_orchestrator(base, **{PAUSE_ENV: "after-commit"})
    try:
        wait_for("paused at after-commit", first)
        second = run_orchestrator(base)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 3 and "not starting" in err and "orchestrator" in err
        info = run_status.read_status(kb.folder)
        assert info["status"] == "running"
    finally:
        first.kill()  # kill -9 mid-run: its lock stays behind
        first.wait(timeout=30)
    assert (base / "orchestrator.lock").exists()
    third = run_orchestrator(base)
    assert third.wait(timeout=300) == 0, third.stderr.read()
    status = run_status.read_status(kb.folder)
    assert status["status"] == "idle" and status["last_run"]["ok"] is True
    assert queue_runner.entries(base) == []
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    assert {s["name"] for s in fulltext.list_sources(conn)} == {f"docs/note{i}.txt"
                                                                 for i in range(3)}
    assert fulltext.counts(conn)["pending"] == 0
    conn.close()


def test_cancel_file_stops_the_running_job_at_a_file_boundary(tmp_path, monkeypatch):
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 4)
    kb = make_kb(base, "notes", docs)
    real_index_file = Indexer.index_file

    def index_then_cancel(self, *args, **kwargs):
        real_index_file(self, *args, **kwargs)
        (kb.folder / queue_runner.CANCEL_FILE).touch()  # what cancel_reindex does

    monkeypatch.setattr(Indexer, "index_file", index_then_cancel)
    queue_runner.run_entry(base, {"kb_id": "notes", "scope": "full", "force": False})
    last = run_status.read_status(kb.folder)["last_run"]
    assert last["ok"] and last["cancelled"] and last["counts"]["indexed"] == 1
    assert not (kb.folder / queue_runner.CANCEL_FILE).exists()


def assert_cancelled_before_it_ran(base: Path, kb: kbmod.KnowledgeBase) -> None:
    """The job's recorded outcome is `cancelled`, and it never started."""
    last = run_status.read_status(kb.folder)["last_run"]
    assert (last["started_by"], last["ok"], last["cancelled"]) == ("queue", True, True)
    assert last["counts"]["indexed"] == 0
    assert queue_runner.live_status(base, "notes")["status"] == "idle"
    assert not kb.fulltext_path.exists()  # the job never opened the KB's index
    assert queue_runner.entries(base) == []
    assert not (kb.folder / queue_runner.CANCEL_FILE).exists()


def test_a_cancel_between_taking_a_job_and_starting_it_is_honoured(tmp_path, monkeypatch):
    # issue 45 item 6a: run_entry cleared the cancel file as it started, so a cancel_reindex
    # made after _take_next had marked the job running was lost while it answered
    # stopping_running_job: true, and the job ran to the end
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 2)
    kb = make_kb(base, "notes", docs, BM25_ONLY)
    queue_runner.enqueue(base, "notes", "full", False, False)
    real_take_next, answers = queue_runner._take_next, []
    lib = library.Library(base)

    def take_then_cancel(at: Path, sweep_all: bool) -> dict | None:
        entry = real_take_next(at, sweep_all)
        if entry is not None:  # taken (running in the queue file), not started yet
            answers.append(lib.cancel_reindex("notes"))
        return entry

    monkeypatch.setattr(queue_runner, "_take_next", take_then_cancel)
    try:
        assert queue_runner.drain(base) == 0
    finally:
        lib.close()
    assert answers == [{"kb_id": "notes", "dropped_waiting_entry": False,
                        "stopping_running_job": True}]
    assert_cancelled_before_it_ran(base, kb)


def queued_behind_a_writer(tmp_path: Path, monkeypatch) -> tuple[Path, object, PidLock]:
    """KB `notes` queued for a full sync while a writer (as `python ingest.py`) holds its real
    writer lock; the queue retries a busy KB at once."""
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 2)
    kb = make_kb(base, "notes", docs, BM25_ONLY)
    cli = PidLock(kb.folder / run_status.WRITER_LOCK, "indexing of KB 'notes'")
    cli.acquire()
    queue_runner.enqueue(base, "notes", "full", False, False)
    monkeypatch.setattr(queue_runner, "BUSY_RETRY_FIRST", 0.01)
    return base, kb, cli


def test_a_cancel_while_a_taken_job_finds_its_kb_busy_is_honoured(tmp_path, monkeypatch):
    # issue 45 item 6a, the same race when the taken job found its KB busy: run_entry cleared
    # the cancel, the job went back to waiting, and it ran once the KB was free
    base, kb, cli = queued_behind_a_writer(tmp_path, monkeypatch)
    real_requeue, answers = queue_runner._requeue_busy, []

    def cancel_then_requeue(at: Path, entry: dict, holder: dict | None) -> None:
        answers.append(queue_runner.request_cancel(at, entry["kb_id"]))
        cli.release()  # the CLI run ends: a job put back to wait would run now
        real_requeue(at, entry, holder)

    monkeypatch.setattr(queue_runner, "_requeue_busy", cancel_then_requeue)
    try:
        assert queue_runner.drain(base) == 0
    finally:
        cli.release()
    assert [a["stopping_running_job"] for a in answers] == [True]
    assert_cancelled_before_it_ran(base, kb)


def test_prune_orphans_spares_protected_and_foreign_folders(tmp_path):
    for name in ("live", "orphan", ".hidden", "_private", "old-backup-2024", "logs"):
        (tmp_path / name).mkdir()
    kbmod.open_or_create(tmp_path, "live")
    for name in ("orphan", ".hidden", "_private", "old-backup-2024"):
        sqlite3.connect(tmp_path / name / fulltext.FILENAME).close()
    out = subprocess.run([sys.executable, str(REPO / "queue_runner.py"), "prune-orphans",
                          "--base-path", str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, encoding="utf-8", timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout) == {"removed": ["orphan"], "failed": {}}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "_private", "live", "logs",
                                                          "old-backup-2024"]


def test_server_serves_an_old_schema_read_only_and_the_indexer_migrates_it(tmp_path):
    docs = tmp_path / "docs"
    write_docs(docs, 1)
    kb = make_kb(tmp_path, "old", docs)
    conn = sqlite3.connect(kb.fulltext_path)
    with conn:
        fulltext_schema.MIGRATIONS[0](conn)
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT INTO sources (name, state, pages) VALUES ('legacy.txt', 'ready', 1)")
        conn.execute("INSERT INTO lines (source_id, page, line, text) VALUES (1, 1, 1, "
                     "'an old line about the lighthouse')")
    conn.close()
    import library

    lib = library.Library(tmp_path)
    assert lib.read_range("legacy.txt", 1, 1, -1, 0, "old")["lines"] == [
        {"line": 1, "text": "an old line about the lighthouse"}]
    assert [s["name"] for s in lib.list_sources("old")["sources"]] == ["legacy.txt"]
    lib.close()
    raw = sqlite3.connect(kb.fulltext_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1  # the server never migrates
    raw.close()
    ingest.sync(kb)
    raw = sqlite3.connect(kb.fulltext_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == fulltext.SCHEMA_VERSION
    raw.close()


@pytest.mark.slow
async def test_agent_round_trip_reindex_poll_and_search(tmp_path):
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 2)
    kb = make_kb(base, "notes", docs)
    ingest.sync(kb)
    (docs / "note0.txt").unlink()
    (docs / "fresh.txt").write_text("The quarantine of the zeppelin hangar ends in May.",
                                    encoding="utf-8")
    transport = StdioTransport(command=sys.executable,
                               args=[str(REPO / "server.py"), "--base-path", str(base)],
                               env=clean_env(), cwd=str(REPO))
    async with Client(transport) as client:
        changes = await call(client, "check_changes", kb_id="notes")
        assert (changes["added"], changes["modified"], changes["deleted"]) == (
            ["docs/fresh.txt"], [], ["docs/note0.txt"])
        started = await call(client, "start_reindex", kb_id="notes", scope="full")
        assert started["queued"]["position"] in (0, 1) and started["orchestrator"]["started"]
        answered = 0
        for _ in range(600):
            hits = await call(client, "search", query="harbour crane", search_mode="bm25")
            answered += bool(hits["hits"])  # search keeps answering during the reindex
            info = await call(client, "get_index_info", kb_id="notes")
            if info["status"] == "idle" and info.get("last_run"):
                break
            await asyncio.sleep(0.2)
        assert info["last_run"]["ok"] and info["last_run"]["counts"]["deleted"] == 1
        assert info["queue_position"] is None and answered > 0
        assert info["sources_by_state"]["ready"] == 2
        hits = (await call(client, "search", query="zeppelin hangar"))["hits"]
        assert hits and hits[0]["source"] == "docs/fresh.txt"
    store = chroma_store.ChromaStore(kb.folder, kb.id, chroma_store.embedder_for(None))
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        assert store.all_ids() == states.all_chunk_ids(conn)  # deleted file gone from both
        assert exact.exact_search(conn, "Note 0 ", 5) == []
    finally:
        conn.close()
        store.close()
    deadline = time.monotonic() + 30
    while queue_runner.orchestrator(base) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)  # the orchestrator exits once the queue is empty
    assert queue_runner.orchestrator(base) is None


def test_a_job_that_raises_is_recorded_failed_and_the_drain_runs_the_next_kb(tmp_path):
    # issue 14: run_entry caught five exception types; a SchemaError killed the drain, the
    # status stayed `running` for good and the next queued KB never ran
    base = tmp_path / "base"
    write_docs(tmp_path / "a" / "docs", 1)
    write_docs(tmp_path / "b" / "docs", 2)
    broken = make_kb(base, "broken", tmp_path / "a" / "docs")
    fine = make_kb(base, "fine", tmp_path / "b" / "docs")
    raw = sqlite3.connect(broken.fulltext_path)
    raw.execute("PRAGMA user_version = 99")  # written by a "newer linecite": SchemaError
    raw.close()
    queue_runner.enqueue(base, "broken", "full", False, False)
    queue_runner.enqueue(base, "fine", "full", False, False)
    proc = run_orchestrator(base)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    failed = run_status.read_status(broken.folder)
    assert failed["status"] == "failed" and failed["last_run"]["ok"] is False
    assert "SchemaError" in failed["last_run"]["error"] and "update linecite" in \
        failed["last_run"]["error"]
    assert failed["last_run"]["started_by"] == "queue"
    done = run_status.read_status(fine.folder)
    assert done["status"] == "idle" and done["last_run"]["ok"] is True
    assert done["last_run"]["counts"]["indexed"] == 2
    assert queue_runner.entries(base) == []
    assert queue_runner.live_status(base, "broken")["status"] == "failed"


def test_an_unexpected_error_in_run_entry_is_recorded_not_raised(tmp_path, monkeypatch):
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 1)
    kb = make_kb(base, "notes", docs)

    def explode(*args, **kwargs):
        raise RuntimeError("disk gremlin")

    monkeypatch.setattr(Indexer, "reconcile", explode)
    queue_runner.run_entry(base, {"kb_id": "notes", "scope": "full", "force": False})
    status = run_status.read_status(kb.folder)
    assert status["status"] == "failed" and status["progress"] is None
    assert status["last_run"]["error"] == "RuntimeError: disk gremlin"
    assert not (kb.folder / run_status.WRITER_LOCK).exists()  # the lock was given back


def test_a_job_whose_kb_is_busy_waits_for_the_writer_then_runs(tmp_path, monkeypatch):
    # issue 25 item 3: while a CLI ingest held the KB the queued job failed with LockBusy and
    # was deleted (`last_run` said LockBusy, the queue was empty)
    base, kb, cli = queued_behind_a_writer(tmp_path, monkeypatch)
    real_sleep, seen = queue_runner._sleep_until, []

    def look_then_the_cli_run_ends(when: float) -> None:  # the drain waits for the KB
        seen.append((queue_runner.entries(base), queue_runner.live_status(base, "notes")))
        cli.release()
        real_sleep(when)

    monkeypatch.setattr(queue_runner, "_sleep_until", look_then_the_cli_run_ends)
    try:
        assert queue_runner.drain(base) == 0
    finally:
        cli.release()
    [(waiting, live)] = seen
    told = f"KB is being written by PID {os.getpid()} (indexing of KB 'notes')"
    assert [(e["kb_id"], e["running"], e["waiting"]) for e in waiting] == [
        ("notes", False, told)]
    assert (live["status"], live["queue_position"], live["waiting"]) == ("running", 1, told)
    assert live["last_run"] is None  # no LockBusy failure recorded
    last = run_status.read_status(kb.folder)["last_run"]
    assert last["ok"] and last["started_by"] == "queue" and last["counts"]["indexed"] == 2
    assert queue_runner.entries(base) == []


def test_a_job_whose_kb_stays_busy_too_long_is_failed_saying_why(tmp_path, monkeypatch):
    # the wait for a busy KB is bounded (BUSY_WAIT_MAX): the drain does not sleep forever
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 1)
    kb = make_kb(base, "notes", docs, BM25_ONLY)
    monkeypatch.setattr(queue_runner, "BUSY_RETRY_FIRST", 0.01)
    monkeypatch.setattr(queue_runner, "BUSY_WAIT_MAX", 0.0)
    queue_runner.enqueue(base, "notes", "full", False, False)
    with PidLock(kb.folder / run_status.WRITER_LOCK, "indexing of KB 'notes'"):
        assert queue_runner.drain(base) == 0
    last = run_status.read_status(kb.folder)["last_run"]
    assert last["ok"] is False and "stayed busy" in last["error"]
    assert f"PID {os.getpid()}" in last["error"] and "start_reindex again" in last["error"]
    assert queue_runner.entries(base) == []


def test_a_request_queued_while_the_drain_exits_is_run(tmp_path, monkeypatch):
    # issue 25 item 3: the drain found the queue empty, a server queued a job, saw a live
    # orchestrator and started none, the drain let its lock go: the job stayed queued for good
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 2)
    kb = make_kb(base, "notes", docs, BM25_ONLY)
    real_take_next, answers = queue_runner._take_next, []
    lib = library.Library(base)

    def found_empty_then_a_request_comes(at: Path, sweep_all: bool) -> dict | None:
        entry = real_take_next(at, sweep_all)
        if entry is None and not answers:  # the drain still holds its lock here
            answers.append(lib.start_reindex("notes", "full", False, False))
        return entry

    monkeypatch.setattr(queue_runner, "_take_next", found_empty_then_a_request_comes)
    try:
        assert queue_runner.drain(base) == 0
    finally:
        lib.close()
    assert answers[0]["orchestrator"]["started"] is False  # it relied on the live drain
    assert queue_runner.entries(base) == []
    last = run_status.read_status(kb.folder)["last_run"]
    assert last["ok"] and last["counts"]["indexed"] == 2


def test_a_merged_embedding_and_full_request_re_embeds_every_chunk_and_syncs(tmp_path):
    # issue 34 item 5: `embedding` then `full` merged into `full`, which embeds only what
    # changed: 0 of 6,154 chunks re-embedded, and the embedder switch never happened
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 3)
    server = Provider("ollama")
    try:
        old = {"provider": "ollama", "model": "bge-m3", "baseUrl": server.url}
        ingest.sync(make_kb(base, "notes", docs, old))
        kb = make_kb(base, "notes", docs, {**old, "model": "nomic-embed-text"})  # the switch
        (docs / "fresh.txt").write_text("The zeppelin hangar reopens in May.", encoding="utf-8")
        server.requests.clear()
        queue_runner.enqueue(base, "notes", "embedding", False, False)
        merged = queue_runner.enqueue(base, "notes", "full", False, False)
        assert (merged["merged"], merged["scope"], merged["scopes"]) == (
            True, "full", ["embedding", "full"])
        assert queue_runner.drain(base) == 0
        conn = fulltext.connect(kb.fulltext_path, readonly=True)
        try:
            chunk_ids = states.all_chunk_ids(conn)
            assert fulltext.counts(conn)["pending"] == 0
        finally:
            conn.close()
        embedded = [t for r in server.requests for t in r["body"]["input"]]
        assert {r["body"]["model"] for r in server.requests} == {"nomic-embed-text"}
        assert len(embedded) == len(chunk_ids) == 4  # every chunk, each once
        last = run_status.read_status(kb.folder)["last_run"]
        assert last["ok"] and last["scope"] == "embedding+full", last
        assert (last["counts"]["indexed"], last["counts"]["embedded"]) == (1, 4)  # synced too
        store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
        try:
            assert store.all_ids() == chunk_ids  # the new model's collection holds them all
        finally:
            store.close()
    finally:
        server.close()


def test_last_run_errors_are_bounded_with_the_total_beside(tmp_path):
    # issue 25 item 8: last_run.errors held every failure of the run, unbounded
    base, docs = tmp_path / "base", tmp_path / "docs"
    write_docs(docs, 1)
    many = limits.MAX_LIST_ROWS + 5
    for i in range(many):
        (docs / f"bad{i:03}.pdf").write_bytes(b"no PDF at all")  # each fails as `corrupt`
    make_kb(base, "notes", docs, BM25_ONLY)
    queue_runner.run_entry(base, {"kb_id": "notes", "scope": "full", "force": False})
    lib = library.Library(base)
    try:
        last = lib.get_index_info("notes")["last_run"]
    finally:
        lib.close()
    assert (len(last["errors"]), last["errors_total"]) == (limits.MAX_LIST_ROWS, many)
    assert {e["reason"] for e in last["errors"]} == {"corrupt"} and last["counts"]["indexed"] == 1
