"""`python -m bench scale N` end to end: a real build through the write path, real measurement
children, a real `server.py` cold start; and the guards that keep it from harming a folder.

    pytest tests/test_benchmark_scale.py -m "not slow"   # the guards only, a few seconds
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, free_port, shared_path, stop_process, wait_for_heartbeat

from bench import scale_bench

REPO = Path(__file__).resolve().parent.parent
N = 600  # chunks: every language is in (ko, zh, en alternate), the build takes seconds
KEYS = ("auto_p50_ms", "auto_p95_ms", "exact_p95_ms", "baseline_auto_p50_ms",
        "first_answer_s", "server_rss_mb", "bm25_p50_ms", "bm25_p95_ms", "vector_p50_ms",
        "vector_p95_ms", "sqlite_bytes", "chroma_bytes", "sqlite_chunks_per_s",
        "chroma_chunks_per_s", "build_s")


def scale(base: Path, *args: str) -> dict:
    """Run the subcommand as a user would; its last stdout line, the JSON object."""
    done = subprocess.run([sys.executable, "-m", "bench", "scale", str(N),
                           "--base", str(base), "--json", *args], cwd=str(REPO),
                          capture_output=True, text=True, encoding="utf-8", env=clean_env(),
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| auto p50 / p95 ms" in done.stdout  # the table comes before the JSON
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_scale_builds_measures_and_reuses_its_kb(tmp_path):
    shared_path("eval")
    first = scale(tmp_path, "--queries", "10", "--cold", "exact")
    for key in KEYS:
        assert first[key] > 0, key
    assert first["chunks"] == N and not first["build_reused"]
    assert first["bm25_topk_as_unpruned"] == "10/10" and 0 < first["bm25_scored_share"] <= 1
    assert set(first["first_answer_by_mode_lang_s"]) == {"exact ko", "exact zh", "exact en"}

    # the KB holds N chunks in both stores, all embedded, as the server will count them
    import chroma_store
    import fulltext

    folder = tmp_path / scale_bench.KB_ID
    conn = fulltext.connect(folder / fulltext.FILENAME, readonly=True)
    try:
        counts = fulltext.counts(conn)
    finally:
        conn.close()
    assert (counts["chunks"], counts["embedded"]) == (N, N)
    store = chroma_store.open_store(folder, scale_bench.KB_ID, None, readonly=True)
    try:
        assert store.count() == N
    finally:
        store.close()

    second = scale(tmp_path, "--queries", "3", "--cold", "")
    assert second["build_reused"] and second["build_s"] == 0.0
    assert second["sqlite_chunks_per_s"] == first["sqlite_chunks_per_s"]  # the first build's
    assert second["first_answer_s"] is None  # no cold start asked for


@pytest.mark.slow
def test_an_interrupted_build_resumes_where_it_stopped(tmp_path):
    """A million chunks take hours: a build stopped halfway keeps what it wrote and the next
    run adds only the rest (no document twice), then embeds every chunk."""
    import fulltext
    import kb as kbmod
    from pipeline.indexer import Indexer

    shared_path("eval")
    folder = tmp_path / scale_bench.KB_ID
    folder.mkdir()
    (folder / scale_bench.MARKER).write_text(json.dumps(
        {"state": "building", "n": N, "fingerprint": scale_bench.fingerprint()}),
        encoding="utf-8")
    indexer = Indexer(kbmod.open_or_create(tmp_path, scale_bench.KB_ID))
    try:
        assert scale_bench.write_sqlite(indexer.conn, N // 3)[0] == N // 3
        names = {r[0] for r in indexer.conn.execute("SELECT name FROM sources")}
    finally:
        indexer.close()

    out = scale(tmp_path, "--queries", "3", "--cold", "")
    assert not out["build_reused"] and out["resumed_at"] == N // 3
    assert out["sqlite_chunks_per_s"] > 0  # the rate of the part this run wrote
    conn = fulltext.connect(folder / fulltext.FILENAME, readonly=True)
    try:
        counts = fulltext.counts(conn)
        after = [r[0] for r in conn.execute("SELECT name FROM sources")]
    finally:
        conn.close()
    assert (counts["chunks"], counts["embedded"]) == (N, N)
    assert names < set(after) and len(after) == len(set(after))


@pytest.mark.slow
def test_a_build_stopped_while_embedding_keeps_its_sqlite_rates(tmp_path, monkeypatch):
    """Stopped after every chunk is in SQLite, the resumed run writes none there: the record
    keeps the rates the stopped run measured instead of 0."""
    from pipeline.indexer import Indexer

    shared_path("eval")

    def stopped(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Indexer, "embed_pending", stopped)
    with pytest.raises(KeyboardInterrupt):
        scale_bench.build(tmp_path, N)
    building = json.loads((tmp_path / scale_bench.KB_ID / scale_bench.MARKER).read_text(
        encoding="utf-8"))
    assert building["state"] == "building" and building["sqlite_chunks_per_s"] > 0
    out = scale(tmp_path, "--queries", "3", "--cold", "")
    assert not out["build_reused"] and out["resumed_at"] == 0
    assert out["sqlite_chunks_per_s"] == building["sqlite_chunks_per_s"]
    assert out["chroma_chunks_per_s"] > 0


@pytest.mark.slow
def test_with_a_chroma_url_the_vectors_come_from_that_server(tmp_path):
    """At a million chunks the vectors outgrow the server's memory: `--chroma-url` measures a
    KB whose vectors a real `chroma run` serves (here the built KB's own folder); a server
    that is gone fails the run instead of quietly measuring the embedded store."""
    shared_path("eval")
    scale(tmp_path, "--queries", "3", "--cold", "")
    cli = Path(sys.executable).parent / ("chroma.exe" if sys.platform == "win32" else "chroma")
    port, log = free_port(), tmp_path / "chroma.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([str(cli), "run", "--path",
                                 str(tmp_path / scale_bench.KB_ID / "chroma"), "--host",
                                 "127.0.0.1", "--port", str(port)], stdout=sink,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_heartbeat(url, proc, log, limit=30)
        out = scale(tmp_path, "--queries", "3", "--cold", "vector", "--chroma-url", url)
    finally:
        stop_process(proc)
    assert out["vectors"] == url and out["build_reused"]
    assert out["vector_p50_ms"] > 0 and out["first_answer_by_mode_lang_s"]["vector en"] > 0
    done = subprocess.run([sys.executable, "-m", "bench", "scale", str(N),
                           "--base", str(tmp_path), "--queries", "3", "--cold", "",
                           "--chroma-url", url], cwd=str(REPO), capture_output=True,
                          text=True, encoding="utf-8", env=clean_env(), timeout=900,
                          check=False)
    assert done.returncode != 0 and "auto p50" not in done.stdout


def test_a_folder_it_did_not_build_is_refused_not_deleted(tmp_path, capsys):
    """--base pointed at a real base folder whose KB happens to be called `scale`: the
    benchmark must not rebuild (delete) it."""
    shared_path("eval")
    theirs = tmp_path / scale_bench.KB_ID / "config.json"
    theirs.parent.mkdir()
    theirs.write_text("{}", encoding="utf-8")
    assert scale_bench.run(N, tmp_path, 3, False, True, []) == 2
    assert "is not a scale benchmark KB" in capsys.readouterr().err
    assert theirs.read_text(encoding="utf-8") == "{}"


def test_a_kb_another_run_is_building_is_left_alone(tmp_path, capsys):
    """Two runs on one --base: the second must not delete the first one's half-built KB
    (a stale or other-N KB is deleted and rebuilt, so this needs its own check)."""
    from common.pidlock import PidLock

    shared_path("eval")
    folder = tmp_path / scale_bench.KB_ID
    folder.mkdir()
    (folder / scale_bench.MARKER).write_text('{"state": "building"}', encoding="utf-8")
    with PidLock(folder / ".writer.lock", "indexing"):
        assert scale_bench.run(N, tmp_path, 3, False, True, []) == 2
    assert "is being written by process" in capsys.readouterr().err
    assert (folder / scale_bench.MARKER).exists()


@pytest.mark.parametrize("n, queries, cold, says", [
    (5, 10, [], "N must be"), (N, 0, [], "--queries must be"),
    (N, 10, ["hybrid"], "--cold takes modes")])
def test_bad_arguments_are_refused_before_any_work(tmp_path, capsys, n, queries, cold, says):
    assert scale_bench.run(n, tmp_path / "base", queries, False, False, cold) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "base").exists()


def test_exact_needles_are_short_and_long():
    """exact_p95_ms must cover 1-2 character needles (no trigram index can serve them)."""
    short = [scale_bench.needles(q, i)[0] for i, q in enumerate(["배포 절차는?", "人工智能"])]
    assert short == ["절", "人工"]  # 1 and 2 characters in turn
    assert scale_bench.needles("What is the Hedgehog pathway?", 0) == ("H", "Hedgehog")
