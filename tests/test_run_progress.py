"""How far a run is, as the KB's status record tells it: within-file progress of a scan's OCR
(real Tesseract on an image-only PDF made here), read mid-run the way get_index_info reads it
(queue_runner.live_status), and the bound on how often that record is written.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from conftest import image_pdf

import ingest
import kb as kbmod
import queue_runner
from common import run_status
from formats import ocr
from pipeline.indexer import MAX_FILE_ENV

PAGES = 5


def _why_no_tesseract() -> str | None:
    try:
        ocr.languages("eng")
    except (ImportError, ocr.OcrUnavailable) as exc:
        return f"needs Tesseract with eng: {exc}"
    return None


def bm25_kb(tmp_path) -> kbmod.KnowledgeBase:
    kb = kbmod.open_or_create(tmp_path / "base", "scans")
    config = {"id": "scans", "embedding": {"provider": "none"}}
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(tmp_path / "base", "scans")


@pytest.mark.skipif(_why_no_tesseract() is not None, reason=str(_why_no_tesseract()))
def test_status_record_shows_ocr_page_progress_during_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv(ocr.LANG_ENV, "eng")
    monkeypatch.setenv(ocr.CACHE_ENV, str(tmp_path / "ocr-cache"))  # cold: Tesseract runs
    monkeypatch.setenv(ocr.WORKERS_ENV, "1")  # pages finish one by one
    monkeypatch.setattr(run_status, "PROGRESS_EVERY", 0.0)  # every page reaches the record
    docs = tmp_path / "docs"
    docs.mkdir()
    image_pdf(docs / "scan.pdf", PAGES)
    kb = bm25_kb(tmp_path)
    seen, outcome = [], {}

    def run() -> None:
        outcome["summary"] = ingest.ingest(kb, [docs / "scan.pdf"])

    worker = threading.Thread(target=run)
    worker.start()
    while worker.is_alive():
        live = queue_runner.live_status(kb.folder.parent, "scans")  # get_index_info's read
        part = (live.get("progress") or {}).get("part")
        if live["status"] == "running" and part and part not in seen:
            seen.append(part)
        time.sleep(0.01)
    worker.join()
    assert outcome["summary"].indexed == 1 and outcome["summary"].failed == []
    assert seen, "no within-file progress was ever recorded"
    pages = []
    for part in seen:
        assert part["name"] == "scan.pdf" and part["stage"] == "OCR", part
        done = int(re.fullmatch(rf"page (\d+) of {PAGES}", part["detail"]).group(1))
        assert part["percent"] == round(100 * done / PAGES)
        pages.append(done)
    assert len(pages) >= 2 and pages == sorted(pages), seen  # seen moving, never back
    after = queue_runner.live_status(kb.folder.parent, "scans")
    assert after["status"] == "idle" and after["progress"] is None  # nothing stale after


def test_progress_writes_are_bounded_and_the_last_one_is_kept(tmp_path, monkeypatch):
    folder = tmp_path / "kb"
    run = run_status.RunStatus(folder, "api")
    run.start()
    writes = []
    real = run_status.update_status
    monkeypatch.setattr(run_status, "update_status",
                        lambda *a, **k: (writes.append(k), real(*a, **k)))
    report = run.reporter(None)
    started = time.monotonic()
    while time.monotonic() - started < 1.2:  # a flood of page reports for 1.2 s
        report(0, 2, "OCR big.pdf", {"name": "big.pdf", "stage": "OCR", "detail": "page 1 of 9",
                                     "percent": 11})
    assert 2 <= len(writes) <= 3, len(writes)  # every PROGRESS_EVERY s
    report(1, 2, "indexing next.txt")  # held back by the bound...
    time.sleep(run_status.PROGRESS_EVERY + 0.3)  # ...while next.txt takes long: no report
    assert run_status.read_status(folder)["progress"] == {"current": 1, "total": 2,
                                                          "file": "indexing next.txt",
                                                          "part": None}  # written meanwhile
    report(2, 2, "done")  # the end: at once
    assert 4 <= len(writes) <= 5, len(writes)
    assert run_status.read_status(folder)["progress"]["file"] == "done"


def test_no_progress_held_back_is_written_after_the_run_ends(tmp_path):
    folder = tmp_path / "kb"
    run = run_status.RunStatus(folder, "api")
    run.start()
    report = run.reporter(None)
    report(0, 3, "indexing a.txt")
    report(1, 3, "indexing b.txt")  # held back, its timer set
    run.finish()
    time.sleep(run_status.PROGRESS_EVERY + 0.3)
    status = run_status.read_status(folder)
    assert status["status"] == "idle" and status["progress"] is None


def test_recent_runs_keep_the_last_twenty_in_order_with_their_outcomes(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("The lighthouse keeper's log.", encoding="utf-8")
    kb = bm25_kb(tmp_path)
    kb.source_paths = [str(docs)]
    ingest.ingest(kb, [docs])  # 1: finished
    (docs / "b.txt").write_text("A second note, never read.", encoding="utf-8")
    assert ingest.sync(kb, should_stop=lambda: True).cancelled  # 2: cancelled before b.txt
    monkeypatch.setenv(MAX_FILE_ENV, "lots")
    with pytest.raises(kbmod.ConfigError):
        ingest.ingest(kb, [docs])  # 3: failed before any file
    monkeypatch.delenv(MAX_FILE_ENV)
    runs = queue_runner.live_status(kb.folder.parent, "scans")["recent_runs"]
    assert [(r["ok"], r.get("cancelled")) for r in runs] == [(False, None), (True, True),
                                                              (True, False)]  # newest first
    assert "LINECITE_MAX_FILE_MB" in runs[0]["error"] and runs[2]["counts"]["indexed"] == 1
    assert [r["started_at"] for r in runs] == sorted((r["started_at"] for r in runs),
                                                     reverse=True)
    for n in range(18):  # runs 4-21, each through the same record a real run keeps
        run = run_status.RunStatus(kb.folder, "queue", scope=f"run {n + 4}")
        run.start()
        run.finish()
    runs = queue_runner.live_status(kb.folder.parent, "scans")["recent_runs"]
    assert len(runs) == run_status.HISTORY_RUNS == 20
    assert runs[0]["scope"] == "run 21" and runs[-1].get("cancelled") is True  # 1st dropped
    stored = json.loads((kb.folder / run_status.HISTORY_FILE).read_text(encoding="utf-8"))
    assert len(stored["runs"]) == 20 and all("errors" not in r for r in stored["runs"])
