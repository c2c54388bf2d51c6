"""Hostile and unlucky input to the indexer (issue 13): huge lines, size limits, template
PDFs, scans with no OCR engine, symlinks out of a synced folder, source names that collide,
and a damaged index. Real files, real SQLite, real processes."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
from conftest import shared_path, text_pdf

import chunking
import extract
import formats.base
import fulltext
import ingest
import kb as kbmod
from common import commands
from common.limits import UserError
from index import exact, segment, store_errors
from library import Library
from pipeline.indexer import MAX_FILE_ENV, PAUSE_ENV
from sources import folders

REPO = Path(__file__).resolve().parent.parent


def bm25_kb(base: Path, kb_id: str = "hostile",
            source_paths: tuple[Path, ...] = ()) -> kbmod.KnowledgeBase:
    """A KB with no embedder: these tests are about extraction, chunking and the record."""
    folder = base / kb_id
    folder.mkdir(parents=True, exist_ok=True)
    config = {"id": kb_id, "embedding": {"provider": "none"},
              "sourcePaths": [str(p) for p in source_paths]}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, kb_id)


def source(kb: kbmod.KnowledgeBase, name: str) -> dict:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return next(s for s in fulltext.list_sources(conn) if s["name"] == name)
    finally:
        conn.close()


def long_line(chars: int) -> str:
    """One line of distinct letter-only words (no newline), about `chars` characters."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words, size, i = [], 0, 0
    while size < chars:
        word, n = "", i + 26**3
        while n:
            n, r = divmod(n, 26)
            word += letters[r]
        words.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(words)


# ----------------------------------------------------------------------------- 1. linear


def test_split_long_line_pieces_are_the_line_in_order_and_within_max():
    text = long_line(50_000) + "x" * 5_000  # words, then a run with no space to cut at
    pieces = chunking._split_long_line(text)
    assert "".join(pieces) == text
    assert all(len(p) <= chunking.MAX_CHARS for p in pieces)
    assert all(p.endswith(" ") for p in pieces[:-6])  # cut at whitespace where there is some


def growth(work, small, large) -> float:
    """How much more CPU `work(large)` takes than `work(small)`, best of three each: about
    large/small for linear code, its square for quadratic code. CPU time of this process, not
    wall time: other processes on a busy machine do not count."""
    def best(arg) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            work(arg)
            times.append(time.process_time() - start)
        return min(times)
    return best(large) / best(small)


def test_long_lines_and_many_lines_chunk_in_linear_time():
    # Regression (issue 13): _split_long_line re-sliced the remainder per piece, so a 50 MB
    # one-line file took 7 minutes (quadratic: 8x the text took 64x the time; linear 8x)
    lines = {n: "lorem ipsum " * (n // 12) for n in (2 * 2**20, 16 * 2**20)}
    assert growth(chunking._split_long_line, lines[2 * 2**20], lines[16 * 2**20]) < 24
    rows = {n: [f"row {i}" for i in range(n)] for n in (50_000, 400_000)}
    assert growth(lambda r: chunking.chunk_page("rows.txt", 1, r, set(), str.split),
                  rows[50_000], rows[400_000]) < 24


@pytest.mark.slow
def test_50mb_single_line_text_ingests_whole(tmp_path):
    # Regression (issue 13): 7 minutes before (about 1 minute now on two busy cores); the
    # bound only catches a return of quadratic time, linearity is tested above
    doc = tmp_path / "one-line.txt"
    doc.write_text(long_line(50 * 2**20), encoding="utf-8")
    kb = bm25_kb(tmp_path / "base")
    start = time.monotonic()
    summary = ingest.ingest(kb, [doc])
    assert time.monotonic() - start < 600
    assert (summary.indexed, summary.lines, summary.failed) == (1, 1, [])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        longest = conn.execute("SELECT max(length(text)), count(*) FROM chunks").fetchone()
    finally:
        conn.close()
    assert longest[0] <= chunking.MAX_CHARS and longest[1] == summary.chunks > 40_000


# ----------------------------------------------------------------------------- 3. noise


def test_template_pdf_whose_pages_share_every_line_keeps_them_as_content(tmp_path):
    # Regression (issue 13): noise_lines took every line of a template PDF for a running
    # header, leaving its lines with 0 chunks in state ready.
    template = ["ACME Corp. Inspection form", "Inspector: ________", "Site: ________",
                "Signature: ________"]
    path = tmp_path / "forms.pdf"
    text_pdf([template] * 12).output(str(path))
    doc = extract.extract(path)
    assert all(page == template for page in doc.pages)
    assert chunking.noise_lines(doc.pages) == [set()] * 12
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [path])
    assert summary.chunks == 12 and summary.warnings == []
    assert source(kb, "forms.pdf")["state"] == "ready"


def test_running_headers_of_pages_with_a_body_are_still_noise():
    topics = "harbour crane tide ledger invoice audit pump valve rotor cable relay gauge".split()
    body = [[f"The {topics[(p + i) % 12]} of {topics[(p * 5 + i) % 12]} was checked {w}."
             for i, w in enumerate(("twice", "daily", "again", "today", "early"))]
            for p in range(6)]
    pages = [["ACME annual report", *lines, str(p + 1)] for p, lines in enumerate(body)]
    pages.append(["ACME annual report", "7"])  # a header-only page among bodied ones
    noise = chunking.noise_lines(pages)
    assert noise[:6] == [{1, 7}] * 6 and noise[6] == {1, 2}


# ----------------------------------------------------------------------------- 2. size limits


def test_file_over_the_size_limit_needs_action_and_is_not_read(tmp_path, monkeypatch):
    # Regression (issue 13): no file size limit; any file was hashed and read whole.
    monkeypatch.setenv(MAX_FILE_ENV, "0.004")  # 4 KB, so the files stay small
    big, small = tmp_path / "big.txt", tmp_path / "small.txt"
    big.write_text("A line about the harbour crane.\n" * 200, encoding="utf-8")  # 6.4 KB
    small.write_text("A short note about the tide tables.\n", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [big])
    assert [(f["source"], f["reason"], f["state"]) for f in summary.needs_action] == [
        ("big.txt", "too-large", "needs_action")]
    assert MAX_FILE_ENV in summary.needs_action[0]["detail"]
    row = source(kb, "big.txt")
    assert (row["state"], row["sha256"], row["pages"]) == ("needs_action", "", 0)  # not hashed
    assert ingest.ingest(kb, [small]).indexed == 1


def test_text_over_the_character_limit_is_too_large_even_from_a_small_file(tmp_path,
                                                                         monkeypatch):
    # Regression (issue 13): nothing bounded what extraction may produce from a small file.
    monkeypatch.setenv(formats.base.MAX_TEXT_ENV, "5000")
    pdf = tmp_path / "dense.pdf"  # compressed streams: 6,000+ characters in a few KB
    text_pdf([[f"Row {p}-{i}: the quarterly ledger balances again." for i in range(40)]
              for p in range(4)]).output(str(pdf))
    txt = tmp_path / "long.txt"
    txt.write_text("The tide tables for March, checked again.\n" * 200, encoding="utf-8")
    for path in (pdf, txt):
        with pytest.raises(extract.ExtractError) as caught:
            extract.extract(path)
        assert caught.value.reason == "too-large"
        assert formats.base.MAX_TEXT_ENV in caught.value.detail
    summary = ingest.ingest(bm25_kb(tmp_path / "base"), [pdf])
    assert [(f["reason"], f["state"]) for f in summary.needs_action] == [
        ("too-large", "needs_action")]
    monkeypatch.setenv(formats.base.MAX_TEXT_ENV, "100000")
    assert len(extract.extract(pdf).pages) == 4


def test_a_zip_bomb_fails_as_the_readme_says(tmp_path):
    # Regression (issue 34 item 10): a zip bomb ended needs_action/too-large, as if a setting
    # could let it in; no setting raises the zip limits, and the README's table says failed.
    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * (20 * 2**20))  # ratio ~1000
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [bomb])
    assert [(f["reason"], f["state"]) for f in summary.failed] == [("zip-bomb", "failed")]
    row = source(kb, "bomb.docx")
    assert row["state"] == "failed" and row["error"].startswith("zip-bomb: ")


def test_a_limit_that_is_no_number_stops_the_run_before_any_file(tmp_path, monkeypatch):
    monkeypatch.setenv(MAX_FILE_ENV, "lots")
    doc = tmp_path / "a.txt"
    doc.write_text("Alpha.", encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match=MAX_FILE_ENV):
        ingest.ingest(bm25_kb(tmp_path / "base"), [doc])


# ----------------------------------------------------------------------------- 4. states


def test_scan_without_tesseract_needs_action_naming_how_to_install(tmp_path, monkeypatch):
    # Regression (issue 13): a scanned PDF with no Tesseract ended `ready` with 0 chunks.
    import pytesseract

    scan = shared_path("corpus", "pdf", "scanned", "chinese_scan.pdf")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "no-tesseract"))
    monkeypatch.setenv("LINECITE_OCR_CACHE", str(tmp_path / "ocr"))  # no cached answer either
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [scan])
    assert summary.indexed == 0
    failure = summary.needs_action[0]
    assert (failure["reason"], failure["state"]) == ("ocr-unavailable", "needs_action")
    assert "install Tesseract" in failure["detail"]
    row = source(kb, "chinese_scan.pdf")
    assert row["state"] == "needs_action" and row["error"].startswith("ocr-unavailable")


def test_pdf_with_blank_pages_only_is_empty_not_ready(tmp_path):
    path = tmp_path / "blank.pdf"
    text_pdf([[], []]).output(str(path))
    kb = bm25_kb(tmp_path / "base")
    summary = ingest.ingest(kb, [path])
    # issue 49: no text is the honest state `empty`, not a failure; a PDF's pages may be
    # scans, so its detail (only a PDF's or an image's) says how to check OCR
    assert summary.failed == [] and summary.exit_code() == 0
    assert [(f["reason"], f["state"]) for f in summary.empty] == [("empty", "empty")]
    assert "2 page(s) but no text" in summary.empty[0]["detail"]
    assert "smoke-ocr" in summary.empty[0]["detail"]
    assert source(kb, "blank.pdf")["state"] == "empty"


# ----------------------------------------------------------------------------- 5. symlinks


def symlink(link: Path, target: Path) -> None:
    try:
        link.symlink_to(target, target_is_directory=target.is_dir())
    except (OSError, NotImplementedError) as err:  # Windows without developer mode
        pytest.skip(f"this platform cannot create symlinks here: {err}")


def test_sync_does_not_follow_links_out_of_its_folder(tmp_path):
    # Regression (issue 13): folder sync followed a symlink inside sourcePaths to /etc/passwd
    # and served it through read_range; ingest_file checked the path, sync did not.
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "passwd.txt").write_text("root:x:0:0:root:/root:/bin/bash", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Alpha report on the harbour crane.", encoding="utf-8")
    symlink(docs / "leak.txt", secret / "passwd.txt")
    symlink(docs / "outside", secret)
    symlink(docs / "alias.txt", docs / "a.txt")  # leads inside: allowed, as in ingest_file
    kb = bm25_kb(tmp_path / "base", source_paths=(docs,))

    conn = fulltext.connect(kb.fulltext_path)
    try:
        plan = folders.plan_sync(conn, kb).to_json()
    finally:
        conn.close()
    assert sorted(plan["added"]) == ["docs/a.txt", "docs/alias.txt"]
    assert sorted((s["name"], s["reason"]) for s in plan["skipped"]) == [
        ("docs/leak.txt", "outside-folder"), ("docs/outside/", "outside-folder")]

    summary = ingest.sync(kb)
    assert sorted(s["name"] for s in summary.skipped) == ["docs/leak.txt", "docs/outside/"]
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        assert {s["name"] for s in fulltext.list_sources(conn)} == {"docs/a.txt",
                                                                    "docs/alias.txt"}
        assert exact.exact_search(conn, "root:x:0", 10) == []
    finally:
        conn.close()


def test_sync_drops_a_source_indexed_earlier_through_a_link_out(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("The vault code is 4711.", encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    symlink(docs / "leak.txt", secret)
    kb = bm25_kb(tmp_path / "base", source_paths=(docs,))
    ingest.ingest(kb, [docs / "leak.txt"], "docs/leak.txt")  # as an older sync would have
    summary = ingest.sync(kb)
    assert summary.deleted == 1 and [s["name"] for s in summary.skipped] == ["docs/leak.txt"]
    assert folders.plan_sync(fulltext.connect(kb.fulltext_path, readonly=True),
                            kb).to_json()["deleted"] == []


# ----------------------------------------------------------------------------- 6. names


def chunk_ids(kb: kbmod.KnowledgeBase, name: str) -> set[str]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return {r[0] for r in conn.execute("SELECT chunk_id FROM chunks WHERE source_id = "
                                           "(SELECT id FROM sources WHERE name = ?)", (name,))}
    finally:
        conn.close()


def test_a_source_name_of_another_file_is_refused_and_nothing_changes(tmp_path):
    # Regression (issue 13): ingest_file(source_name="notes.txt") silently replaced the
    # source of another file.
    notes = tmp_path / "a" / "notes.txt"
    other = tmp_path / "b" / "notes.txt"
    for path, text in ((notes, "The user's own notes on the harbour crane."),
                       (other, "An agent's text about something else entirely.")):
        path.parent.mkdir()
        path.write_text(text, encoding="utf-8")
    kb = bm25_kb(tmp_path / "base")
    ingest.ingest(kb, [notes])
    before = (source(kb, "notes.txt"), chunk_ids(kb, "notes.txt"))
    for name in ("notes.txt", None):  # named explicitly, or by its file name
        with pytest.raises(ingest.SourceNameTaken, match="another source name"):
            ingest.ingest(kb, [other], name)
    assert (source(kb, "notes.txt"), chunk_ids(kb, "notes.txt")) == before
    assert ingest.ingest(kb, [notes], "notes.txt").unchanged == 1  # the same file: fine
    notes.unlink()  # a name whose file is gone may be reused
    assert ingest.ingest(kb, [other]).indexed == 1


def run_cli(*args: str, base: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (PAUSE_ENV, "LINECITE_HOME")}
    return subprocess.run([sys.executable, str(REPO / "ingest.py"), *args, "--base-path",
                           str(base), "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=env, timeout=600)


def assert_one_clear_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("linecite: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and all(w in proc.stderr for w in words), proc.stderr


def test_cli_refuses_a_taken_source_name_with_exit_2(tmp_path):
    base = tmp_path / "base"
    bm25_kb(base, "default")
    (tmp_path / "notes.txt").write_text("Notes.", encoding="utf-8")
    (tmp_path / "other.txt").write_text("Other.", encoding="utf-8")
    assert run_cli(str(tmp_path / "notes.txt"), base=base).returncode == 0
    assert_one_clear_line(run_cli(str(tmp_path / "other.txt"), "notes.txt", base=base),
                          "'notes.txt' already names", "another source name")


# ----------------------------------------------------------------------------- 7. damage


def test_truncated_index_gives_one_clear_line_then_rebuild_restores_search(tmp_path):
    # Regression (issue 13): a truncated fulltext.sqlite3 made ingest.py print a traceback.
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "report.txt").write_text("\n".join(
        f"Paragraph {i}: the harbour crane was inspected and the tide tables were checked."
        for i in range(300)), encoding="utf-8")
    base = tmp_path / "base"
    kb = bm25_kb(base, "docs", source_paths=(docs,))
    kb.embedding = {"provider": "builtin"}  # vectors too, so chroma/ is moved aside as well
    (kb.folder / "config.json").write_text(json.dumps(kb.to_json()), encoding="utf-8")
    assert run_cli("--kb", "docs", base=base).returncode == 0
    index = kb.fulltext_path
    size = index.stat().st_size
    with index.open("r+b") as handle:
        handle.truncate(size // 8)

    (tmp_path / "notes.txt").write_text("A note on the pump valve.", encoding="utf-8")
    damaged = run_cli(str(tmp_path / "notes.txt"), "--kb", "docs", base=base)
    assert_one_clear_line(damaged, "is damaged", "--rebuild")

    rebuilt = run_cli("--kb", "docs", "--rebuild", base=base)
    assert rebuilt.returncode == 0, rebuilt.stderr
    summary = json.loads(rebuilt.stdout)
    assert summary["indexed"] == 1 and summary["embedded"] == summary["chunks"] > 0
    kept = sorted(p.name for p in kb.folder.glob("*.damaged-*"))
    assert [n.split(".damaged-")[0] for n in kept if not n.endswith(("-wal", "-shm"))] == [
        "chroma", "fulltext.sqlite3"]
    aside = next(kb.folder.glob("fulltext.sqlite3.damaged-*[0-9]"))
    assert aside.stat().st_size == size // 8  # the user's data is kept, not deleted
    conn = fulltext.connect(index, readonly=True)
    try:
        hits = fulltext.bm25_search(conn, segment.query_tokens("harbour crane inspected"), 3)
        assert hits and {row["source"] for row, _ in hits} == {"docs/report.txt"}
    finally:
        conn.close()


def test_rebuild_reindexes_files_the_damaged_index_still_names(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Minutes: the pump valve is replaced in May.", encoding="utf-8")
    base = tmp_path / "base"
    kb = bm25_kb(base, "docs")
    assert run_cli(str(notes), "Meeting notes", "--kb", "docs", base=base).returncode == 0
    conn = fulltext.connect(kb.fulltext_path)
    lines_root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'lines'").fetchone()
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with kb.fulltext_path.open("r+b") as handle:  # wreck the lines table, keep `sources`
        handle.seek((lines_root[0] - 1) * page_size)
        handle.write(b"\xff" * page_size)
    assert_one_clear_line(run_cli(str(notes), "Meeting notes", "--kb", "docs", "--force",
                                  base=base), "is damaged", "--rebuild")
    rebuilt = run_cli("--kb", "docs", "--rebuild", base=base)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert source(kb, "Meeting notes")["state"] == "ready"


def test_read_only_kb_folder_gives_one_clear_line(tmp_path):
    # Regression (issue 13): a read-only KB folder made ingest.py print a PermissionError or
    # "unable to open database file" traceback.
    if os.name == "nt":
        pytest.skip("the read-only attribute does not stop writes into a folder on Windows")
    as_other_user = []
    if os.geteuid() == 0:  # root writes anywhere: run the CLI as nobody instead
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv to drop to another user")
        as_other_user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    base = Path(tempfile.mkdtemp(prefix="linecite-ro-"))  # pytest's tmp_path is root-only
    try:
        base.chmod(0o755)
        kb = bm25_kb(base / "base", "docs")
        doc = base / "notes.txt"
        doc.write_text("A note on the pump valve.", encoding="utf-8")
        assert run_cli(str(doc), "--kb", "docs", base=base / "base").returncode == 0
        for path in (base / "base", kb.folder, *kb.folder.iterdir(), doc):
            path.chmod(0o555 if path.is_dir() else 0o444)
        proc = subprocess.run([*as_other_user, sys.executable, str(REPO / "ingest.py"), str(doc),
                               "--kb", "docs", "--force", "--base-path", str(base / "base"),
                               "--quiet"], capture_output=True, text=True, encoding="utf-8",
                              timeout=600, env={**os.environ, "HOME": str(base)})
        assert_one_clear_line(proc, "writable")
    finally:
        for path in base.rglob("*"):
            path.chmod(0o755)
        shutil.rmtree(base)


def real_error(work) -> sqlite3.DatabaseError:
    """The error SQLite raises for `work()`."""
    with pytest.raises(sqlite3.DatabaseError) as caught:
        work()
    return caught.value


def test_a_storage_error_means_one_thing_to_the_server_and_the_cli(tmp_path):
    # issue 46: library.py (is_damage, damaged) and ingest.py (_store_error) each said what a
    # SQLite error meant, in two texts; an ingest through the server that met a lock held by
    # another program, a read-only index or a full disk answered an internal error
    index = tmp_path / "fulltext.sqlite3"
    index.write_bytes(b"not an index " * 400)
    garbage = real_error(lambda: sqlite3.connect(index).execute("SELECT * FROM sqlite_master"))
    gone = real_error(lambda: sqlite3.connect(tmp_path / "gone" / fulltext.FILENAME))
    other = tmp_path / "other.sqlite3"
    holder = sqlite3.connect(other, isolation_level=None)
    holder.execute("CREATE TABLE t (x UNIQUE)")
    holder.execute("INSERT INTO t VALUES (1)")
    bug = real_error(lambda: holder.execute("INSERT INTO t VALUES (1)"))
    holder.execute("BEGIN EXCLUSIVE")
    locked = real_error(lambda: sqlite3.connect(other, timeout=0).execute("SELECT * FROM t"))
    holder.execute("COMMIT")
    readonly = real_error(lambda: sqlite3.connect(f"{other.as_uri()}?mode=ro", uri=True)
                          .execute("INSERT INTO t VALUES (2)"))
    holder.close()

    def told(err: sqlite3.DatabaseError, writing: bool) -> str | None:
        found = store_errors.user_error("docs", index, err, writing)
        return None if found is None else str(found)

    for writing in (False, True):
        damaged = store_errors.user_error("docs", index, garbage, writing)
        assert isinstance(damaged, store_errors.KBDamaged)
        assert f"{index} cannot be read" in str(damaged)
        assert f"`{commands.command('ingest', '--kb', 'docs')} --rebuild`" in str(damaged)
        assert told(bug, writing) is None  # a bug is raised as it is, never "rebuild"
    assert "is damaged" in told(gone, False)  # the server cannot open the file it serves
    assert "make the KB folder writable" in told(gone, True)  # an ingest cannot make it
    assert told(locked, False) is None  # a busy read is no damage
    assert "locked by another program" in told(locked, True)
    assert "make the KB folder writable" in told(readonly, True)


@pytest.mark.slow  # the indexer waits out its 10 s busy timeout first
def test_ingest_file_while_another_program_holds_the_index_says_to_retry(tmp_path):
    # issue 46: library.ingest_file asked is_damage alone, so a lock held by another program
    # (a SQLite browser with the index open for writing) came back as an internal error,
    # where the command line said to retry when that program is done
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("A note on the pump valve.", encoding="utf-8")
    (docs / "b.txt").write_text("A second note.", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "docs", source_paths=(docs,))
    assert ingest.ingest(kb, [docs / "a.txt"]).indexed == 1
    browser = sqlite3.connect(kb.fulltext_path, timeout=0, isolation_level=None)
    browser.execute("BEGIN IMMEDIATE")
    browser.execute("UPDATE sources SET name = name")
    lib = Library(tmp_path / "base")
    try:
        with pytest.raises(UserError, match="locked by another program .*retry when it is done"):
            lib.ingest_file(str(docs / "b.txt"), None, "docs")
    finally:
        lib.close()
        browser.close()


def test_sync_skips_office_lock_files_and_dot_files(tmp_path):
    # regression: `~$report.docx` (Word's lock file) and `.DS_Store` were indexed as corrupt
    # sources, and `.git/` was walked
    docs = tmp_path / "docs"
    (docs / ".git").mkdir(parents=True)
    (docs / "report.txt").write_text("quarterly figures\n", encoding="utf-8")
    (docs / "~$report.docx").write_bytes(b"\x05owner")
    (docs / ".notes.txt").write_text("hidden\n", encoding="utf-8")
    (docs / ".git" / "readme.txt").write_text("git internals\n", encoding="utf-8")
    summary = ingest.sync(bm25_kb(tmp_path / "base", source_paths=(docs,)))
    assert (summary.indexed, summary.failed) == (1, [])
    assert [name for _, name in folders.discover([docs])] == ["docs/report.txt"]


def test_cli_expands_a_tilde_in_paths(tmp_path):
    # regression: PowerShell 5.1 and cmd pass "~/Documents" to Python unexpanded
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "a.txt").write_text("tilde expansion works\n", encoding="utf-8")
    env = {**os.environ, "HOME": str(home), "USERPROFILE": str(home)}
    env.pop("LINECITE_HOME", None)
    proc = subprocess.run([sys.executable, str(REPO / "ingest.py"), "~/docs", "--base-path",
                           "~/base", "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["indexed"] == 1
    assert (home / "base" / "default" / fulltext.FILENAME).exists()
