"""Every file of the team's corpus goes through `python ingest.py` without a crash.

Each ends indexed, or empty or failed with a reason; those not indexed are exactly the known
ones the README lists ("Known failures on the corpus"; an `empty` one is listed, not failed).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shared_path

import extract
import formats.base

REPO = Path(__file__).resolve().parent.parent

KNOWN_FAILURES = {  # source name -> reason; each is the right answer for that file
    "corpus/hwpx/hwpxlib/SimplePicture.hwpx": "empty",  # only a picture
    "corpus/hwpx/hwpxlib/error_20240305_2022.hwpx": "empty",  # a blank page
    "corpus/pdf/edge/aes-256.pdf": "password-protected",
    "corpus/pdf/edge/empty.pdf": "empty",  # 0 bytes
    "corpus/pdf/edge/fake-jpg.pdf": "corrupt",  # a JPEG named .pdf
    "corpus/pdf/edge/imagemagick-CCITTFaxDecode.pdf": "empty",  # a 4x4-point image, no text
    "corpus/pdf/edge/libreoffice-writer-password.pdf": "password-protected",
    "corpus/pdf/edge/password-protected.pdf": "password-protected",
    "corpus/txt/en/empty.txt": "empty",
    "corpus/xlsx/unstructured/empty.xlsx": "empty",
    "corpus/xlsx/unstructured/password_protected.xlsx": "password-protected",
}


@pytest.mark.slow
def test_the_whole_corpus_indexes_or_fails_with_a_known_reason(tmp_path):
    corpus = shared_path("corpus")
    folder = tmp_path / "base" / "corpus"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(  # BM25 only: this test is about extraction
        json.dumps({"id": "corpus", "embedding": {"provider": "none"}}), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(REPO / "ingest.py"), str(corpus), "--kb", "corpus",
                           "--base-path", str(tmp_path / "base"), "--quiet"], cwd=REPO,
                          capture_output=True, text=True, encoding="utf-8", timeout=1800)
    assert proc.returncode == 1, proc.stderr[-3000:]  # 1: the hostile files below
    summary = json.loads(proc.stdout)
    supported = [p for p in corpus.rglob("*") if p.is_file() and extract.supported(p)]
    assert summary["sources"] == len(supported)
    unread = summary["failed"] + summary["needs_action"] + summary["empty"]
    assert summary["indexed"] + len(unread) == summary["sources"]
    failures = {f["source"]: f["reason"] for f in unread}
    assert all(reason in formats.base.REASONS for reason in failures.values()), failures
    assert failures == KNOWN_FAILURES
