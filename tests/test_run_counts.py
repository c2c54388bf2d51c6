"""What a run's summary and exit status mean (issue 30 items 3 and 4): the same counts for a
FILE, a FOLDER and a `--kb` sync; files that need the user's action listed apart from broken
ones and never taken for changes; exit 0 / 1 / 2 as the README says."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import clean_env, ingest_cli, shared_path

from library import Library

REPO = Path(__file__).resolve().parent.parent
LOCKED = ("corpus", "pdf", "edge", "password-protected.pdf")


def folder_with_a_locked_pdf(root: Path) -> Path:
    """A folder of one readable note and one password-protected PDF (needs the password)."""
    docs = root / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("The pump station log was signed off.\n", encoding="utf-8")
    shutil.copy(shared_path(*LOCKED), docs / "locked.pdf")
    return docs


def test_a_file_that_needs_action_is_retried_not_reported_as_modified(tmp_path):
    # issue 30.3: check_changes listed an untouched needs_action file as `modified` every run
    docs, base = folder_with_a_locked_pdf(tmp_path), tmp_path / "base"
    ingest_cli(str(docs), "--kb", "docs", base=base, exit_code=1)
    for _ in range(2):
        changes = Library(base).check_changes("docs")
        assert (changes["added"], changes["modified"], changes["deleted"]) == ([], [], [])
        assert (changes["retried"], changes["unchanged"]) == (["docs/locked.pdf"], 1), changes


def test_counts_mean_the_same_for_a_folder_run_and_a_sync(tmp_path):
    # issue 30.4: `sources` was 20 on a folder run and 1 on a --kb sync; needs_action files
    # were listed under `failed`; a needs_action file exited 0
    docs, base = folder_with_a_locked_pdf(tmp_path), tmp_path / "base"
    first = ingest_cli(str(docs), "--kb", "docs", base=base, exit_code=1)
    again = ingest_cli("--kb", "docs", base=base, exit_code=1)
    for summary in (first, again):
        assert summary["sources"] == 2, summary
        assert summary["failed"] == [], summary
        assert [(f["source"], f["reason"]) for f in summary["needs_action"]] == [
            ("docs/locked.pdf", "password-protected")], summary
    assert (first["indexed"], first["unchanged"]) == (1, 0)
    assert (again["indexed"], again["unchanged"]) == (0, 1)
    (docs / "locked.pdf").unlink()
    done = ingest_cli("--kb", "docs", base=base)  # all indexed or unchanged: exit 0
    assert (done["sources"], done["unchanged"], done["deleted"]) == (1, 1, 1), done


def test_an_unreadable_file_is_failed_and_a_refused_run_exits_2(tmp_path):
    docs, base = tmp_path / "docs", tmp_path / "base"
    docs.mkdir()
    (docs / "note.txt").write_text("The pump station log was signed off.\n", encoding="utf-8")
    (docs / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    summary = ingest_cli(str(docs), "--kb", "docs", base=base, exit_code=1)
    assert [f["source"] for f in summary["failed"]] == ["docs/broken.docx"], summary
    assert summary["needs_action"] == [] and summary["sources"] == 2
    refused = subprocess.run([sys.executable, str(REPO / "ingest.py"), "--kb", "nope",
                              "--rebuild", "--base-path", str(base)], capture_output=True,
                             text=True, encoding="utf-8", env=clean_env(), cwd=REPO, timeout=120)
    assert refused.returncode == 2 and "nothing to rebuild" in refused.stderr, refused.stderr
    assert refused.stdout == ""
