"""The README's first steps as a user takes them (issue 15): index a folder with the CLI, then
let the agent keep it current; the summary says what was left out and why."""

import json
import subprocess
import sys
from pathlib import Path

from conftest import clean_env

import kb as kbmod
from library import Library

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, base: Path, quiet: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "ingest.py"), *args, "--base-path",
                           str(base), *(["--quiet"] if quiet else [])], capture_output=True,
                          text=True, encoding="utf-8", env=clean_env(), cwd=REPO, timeout=300)


def notes(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("the lighthouse keeper's log\n", encoding="utf-8")
    (folder / "b.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (folder / "c.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (folder / "d.exe").write_bytes(b"MZ")
    return folder


def test_indexing_a_folder_makes_the_kb_follow_it(tmp_path):
    # regression: after `ingest.py FOLDER`, check_changes, start_reindex and ingest_file all
    # said the KB "has no folders to watch"
    docs, base = notes(tmp_path / "docs"), tmp_path / "base"
    proc = cli(str(docs), "--kb", "notes", base=base)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["indexed"] == 1 and "now follows" in summary["following"]
    assert kbmod.load(base, "notes").source_paths == [str(docs.resolve())]
    (docs / "e.txt").write_text("a second entry\n", encoding="utf-8")
    changes = Library(base).check_changes("notes")
    assert (changes["added"], changes["deleted"]) == (["docs/e.txt"], [])
    again = json.loads(cli(str(docs), "--kb", "notes", base=base).stdout)
    assert again["following"] is None and again["indexed"] == 1  # e.txt; followed once only


def test_once_indexes_a_folder_without_following_it(tmp_path):
    docs, base = notes(tmp_path / "docs"), tmp_path / "base"
    summary = json.loads(cli(str(docs), "--kb", "notes", "--once", base=base).stdout)
    assert summary["indexed"] == 1 and summary["following"] is None
    assert kbmod.load(base, "notes").source_paths == []


def test_unsupported_files_are_counted_by_extension(tmp_path):
    # regression: files no extractor reads vanished from the summary without a word
    docs, base = notes(tmp_path / "docs"), tmp_path / "base"
    summary = json.loads(cli(str(docs), "--kb", "notes", base=base).stdout)
    assert summary["skipped"] == [
        {"reason": "unsupported-format", "extension": ".exe", "files": 1,
         "examples": ["docs/d.exe"]},
        {"reason": "unsupported-format", "extension": ".zip", "files": 2,
         "examples": ["docs/b.zip", "docs/c.zip"]}]


def test_the_progress_bar_names_the_file_in_hand(tmp_path):
    # regression: on a 20-minute OCR file the bar showed only "0/1"
    docs, base = notes(tmp_path / "docs"), tmp_path / "base"
    proc = cli(str(docs), "--kb", "notes", base=base, quiet=False)
    assert proc.returncode == 0 and "docs/a.txt" in proc.stderr
