"""Consistency under crashes and concurrency (issue 14): atomic migrations, status from the
live lock holder, one unreadable file failing only itself, unique source names, Windows
console and UNC paths, one PDF extraction at a time per process."""

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
from conftest import clean_env, text_pdf

import extract
import fulltext
import ingest
import kb as kbmod
import queue_runner
from common import commands, run_status, safeopen
from common.pidlock import LockBusy, PidLock
from formats import pdf as pdf_reader
from index import exact, fulltext_schema
from pipeline.indexer import PAUSE_ENV
from sources import folders

REPO = Path(__file__).resolve().parent.parent


def make_kb(base: Path, kb_id: str, folders: list[Path]) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(base, kb_id)
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config["sourcePaths"] = [str(f) for f in folders]
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, kb_id)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def cli(base: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "ingest.py"), *args, "--base-path",
                             str(base), "--quiet"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=clean_env(**env))


# ---------------------------------------------------------------------------
# 1. migrations

class FailsAfter:
    """A connection whose execute raises after `ok` statements: a crash inside a migration."""

    def __init__(self, conn: sqlite3.Connection, ok: int):
        self.conn, self.ok = conn, ok

    def execute(self, *args):
        if self.ok == 0:
            raise sqlite3.OperationalError("simulated crash mid-migration")
        self.ok -= 1
        return self.conn.execute(*args)


@pytest.mark.parametrize("number", [0, 1])  # the first migration, and one on an existing index
def test_a_migration_that_fails_halfway_leaves_nothing_and_the_next_connect_completes(
        tmp_path, monkeypatch, number):
    # issue 14: `with conn:` opened no transaction before DDL, so a failure mid-migration
    # left tables at user_version 0 and the next connect failed: "table sources already exists"
    path = tmp_path / fulltext.FILENAME
    if number:
        conn = sqlite3.connect(path)
        conn.execute("BEGIN")
        fulltext_schema.MIGRATIONS[0](conn)
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
        conn.close()
    real = fulltext_schema.MIGRATIONS[number]
    broken = list(fulltext_schema.MIGRATIONS)
    broken[number] = lambda conn: real(FailsAfter(conn, 1))
    monkeypatch.setattr(fulltext_schema, "MIGRATIONS", broken)
    with pytest.raises(sqlite3.OperationalError, match="simulated crash"):
        fulltext.connect(path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == number
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert ("sources" in tables) == (number == 1)  # the half-made migration left nothing
    raw.close()
    monkeypatch.undo()
    conn = fulltext.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == fulltext.SCHEMA_VERSION
    assert fulltext.counts(conn)["sources"] == 0
    conn.close()


# ---------------------------------------------------------------------------
# 3. status from the live lock holder

def wait_for_line(proc: subprocess.Popen, text: str) -> None:
    for line in proc.stderr:
        if text in line.decode("utf-8", "replace"):
            return
    pytest.fail(f"never saw {text!r}; exit {proc.wait()}")


def test_status_shows_a_running_cli_ingest_then_interrupted_after_kill_then_its_last_run(
        tmp_path):
    # issue 14: get_index_info said `idle` while `python ingest.py` held the KB's writer lock,
    # and after it was killed; last_run was recorded only by queued runs
    base, docs = tmp_path / "base", tmp_path / "docs"
    for i in range(3):
        write(docs / f"n{i}.txt", f"Note {i} on the lighthouse keeper's logbook.")
    assert queue_runner.live_status(base, "notes")["status"] == "idle"
    proc = cli(base, str(docs), "--kb", "notes", **{PAUSE_ENV: "after-commit"})
    try:
        wait_for_line(proc, "paused at after-commit")
        live = queue_runner.live_status(base, "notes")
        assert (live["status"], live["pid"], live["started_by"]) == ("running", proc.pid, "cli")
        assert live["progress"]["file"] == "indexing docs/n0.txt"
        assert live["last_run"] is None
    finally:
        proc.kill()  # kill -9 while it holds the writer lock
        proc.wait(timeout=30)
    gone = queue_runner.live_status(base, "notes")
    assert gone["status"] == "interrupted" and gone["pid"] == proc.pid
    assert commands.command("ingest", "--kb", "notes") in gone["detail"]
    again = cli(base, str(docs), "--kb", "notes")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err.decode("utf-8", "replace")
    done = queue_runner.live_status(base, "notes")
    assert done["status"] == "idle" and done["pid"] is None
    last = done["last_run"]
    assert (last["ok"], last["started_by"], last["pid"]) == (True, "cli", again.pid)
    assert last["counts"]["indexed"] == 2 and last["counts"]["unchanged"] == 1
    assert last["finished_at"] >= last["started_at"]


def test_a_run_refused_by_a_live_holder_leaves_its_status_alone(tmp_path):
    base, docs = tmp_path / "base", tmp_path / "docs"
    write(docs / "a.txt", "Alpha.")
    kb = make_kb(base, "notes", [docs])
    with PidLock(kb.folder / run_status.WRITER_LOCK, "indexing of KB 'notes'"):
        run_status.update_status(kb.folder, status="running", pid=99, progress={"current": 1})
        with pytest.raises(LockBusy):
            ingest.sync(kb, run=run_status.RunStatus(kb.folder, "ingest_file"))
        recorded = run_status.read_status(kb.folder)
        assert recorded["status"] == "running" and recorded["progress"] == {"current": 1}
        assert recorded["last_run"]["ok"] is False and "is running" in \
            recorded["last_run"]["error"]
        assert queue_runner.live_status(base, "notes")["status"] == "running"


# ---------------------------------------------------------------------------
# 4. a file that cannot be hashed fails only itself

def test_a_file_deleted_or_locked_while_hashing_fails_only_that_source(tmp_path, monkeypatch):
    # issue 14: sha256_file raising aborted the whole run
    base, docs = tmp_path / "base", tmp_path / "docs"
    for name in ("a", "gone", "locked", "z"):
        write(docs / f"{name}.txt", f"The {name} file mentions the quay.")
    kb = make_kb(base, "notes", [docs])

    def flaky(path):  # between discovery and the one open that hashes and reads the file
        if path.name == "gone.txt":
            path.unlink()
        if path.name == "locked.txt":
            raise PermissionError(13, "The process cannot access the file", str(path))

    monkeypatch.setattr(safeopen, "before_open", flaky)
    summary = ingest.sync(kb)
    assert summary.indexed == 2
    assert {(f["source"], f["reason"]) for f in summary.failed} == {
        ("docs/gone.txt", "not-found"), ("docs/locked.txt", "unreadable")}
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    states = {s["name"]: s["state"] for s in fulltext.list_sources(conn)}
    assert states["docs/a.txt"] == states["docs/z.txt"] == "ready"
    assert len(exact.exact_search(conn, "quay", 10)) == 2
    conn.close()
    monkeypatch.undo()
    again = ingest.sync(kb)  # the locked file is readable now: retried and indexed
    assert again.indexed == 1 and again.deleted == 1 and not again.failed


# ---------------------------------------------------------------------------
# 5. unique source names

def test_two_source_folders_with_one_name_give_unique_stable_source_names(tmp_path):
    # issue 14: x/docs and y/docs both named their files docs/...: one file was never
    # searchable and every sync re-indexed the other
    base = tmp_path / "base"
    write(tmp_path / "x" / "docs" / "a.txt", "The first folder speaks of herons.")
    write(tmp_path / "y" / "docs" / "a.txt", "The second folder speaks of otters.")
    kb = make_kb(base, "notes", [tmp_path / "y" / "docs", tmp_path / "x" / "docs"])
    first = ingest.sync(kb)
    assert first.indexed == 2
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    names = {s["name"]: s["path"] for s in fulltext.list_sources(conn)}
    assert names == {"docs/a.txt": str((tmp_path / "y" / "docs" / "a.txt").resolve()),
                     "x/docs/a.txt": str((tmp_path / "x" / "docs" / "a.txt").resolve())}
    assert [h["source"] for h in exact.exact_search(conn, "herons", 5)] == ["x/docs/a.txt"]
    assert [h["source"] for h in exact.exact_search(conn, "otters", 5)] == ["docs/a.txt"]
    conn.close()
    second = ingest.sync(kb)
    assert (second.indexed, second.unchanged, second.deleted) == (0, 2, 0)


def test_folder_prefixes_take_parents_only_where_names_clash():
    roots = [Path("/a/docs"), Path("/b/docs"), Path("/c/b/docs"), Path("/a/notes"),
             Path("/d/docs/docs")]
    assert folders.folder_prefixes(roots) == {
        Path("/a/docs"): "docs", Path("/b/docs"): "b/docs", Path("/c/b/docs"): "c/b/docs",
        Path("/a/notes"): "notes", Path("/d/docs/docs"): "d/docs/docs"}
    # a folder added later never renames an earlier one's files
    assert folders.folder_prefixes(roots[:2])[Path("/a/docs")] == "docs"


# ---------------------------------------------------------------------------
# 6. Windows: console encoding, UNC paths, pdfium in threads

def test_cli_summary_survives_a_cp1252_console(tmp_path):
    # issue 14: json.dumps(ensure_ascii=False) printed to cp1252 raised UnicodeEncodeError
    # after the run had succeeded, so the CLI exited 1 with a traceback
    doc = write(tmp_path / "회의록.txt", "회의는 월요일에 열린다.")
    base = tmp_path / "지식"  # the summary names the index's path
    proc = cli(base, str(doc), PYTHONIOENCODING="cp1252")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode("utf-8", "replace")
    summary = json.loads(out.decode("cp1252"))
    assert summary["indexed"] == 1 and "\\uc9c0\\uc2dd" in out.decode("cp1252")  # escaped
    assert summary["fulltext"]["path"] == str(base.resolve() / "default" / fulltext.FILENAME)
    utf8 = cli(base, str(doc), "--force", PYTHONIOENCODING="utf-8")
    out, err = utf8.communicate(timeout=300)
    assert utf8.returncode == 0 and "지식" in out.decode("utf-8")  # plain where it can be


def test_sqlite_uri_for_drive_unc_and_posix_paths(tmp_path):
    # issue 14: as_uri() gives file://server/share/..., an authority SQLite refuses
    unc = PureWindowsPath(r"\\fileserver\team share\linecite\kb\fulltext.sqlite3")
    assert unc.as_uri().startswith("file://fileserver/")
    assert fulltext_schema.sqlite_uri(unc) == \
        "file:////fileserver/team%20share/linecite/kb/fulltext.sqlite3"
    assert fulltext_schema.sqlite_uri(PureWindowsPath(r"C:\Users\정\kb\fulltext.sqlite3")) == \
        "file:///C:/Users/%EC%A0%95/kb/fulltext.sqlite3"
    assert fulltext_schema.sqlite_uri(PurePosixPath("/srv/a b/fulltext.sqlite3")) == \
        "file:///srv/a%20b/fulltext.sqlite3"
    path = tmp_path / "정 #1?" / fulltext.FILENAME  # characters a URI must escape
    fulltext.connect(path).close()
    conn = fulltext.connect(path, readonly=True)
    assert fulltext.counts(conn)["sources"] == 0
    conn.close()


def test_two_threads_extract_pdfs_one_at_a_time_with_the_same_pages(tmp_path, monkeypatch):
    # issue 14: pdfium is not thread-safe, yet two ingest_file calls extract in server threads
    pdfs = []
    for n in range(2):
        pdf = text_pdf([[f"Document {n} page {p} line {i}" for i in range(20)]
                        for p in range(3)])
        pdf.output(str(tmp_path / f"d{n}.pdf"))
        pdfs.append(tmp_path / f"d{n}.pdf")
    alone = [extract.extract(p).pages for p in pdfs]
    inside, most = 0, 0
    count = threading.Lock()
    real = pdf_reader.pdfium.PdfDocument

    def watched(*args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.3)  # long enough for the other thread to get here if nothing stops it
        with count:
            inside -= 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pdf_reader.pdfium, "PdfDocument", watched)
    results: dict[int, list] = {}
    threads = [threading.Thread(target=lambda n=n: results.__setitem__(
        n, extract.extract(pdfs[n]).pages)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert most == 1
    assert [results[0], results[1]] == alone
