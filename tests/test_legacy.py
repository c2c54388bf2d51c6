"""Legacy Office files (.doc, .xls, .ppt) read from their OLE containers (issue 17).

Real files: textract's .doc/.xls with the text they hold, markitdown's test.xls beside its
test.xlsx, and .doc/.ppt that LibreOffice makes from the corpus's own Korean, Chinese and
English .docx/.pptx, checked against what office.py reads from the originals.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import olefile
import pytest
from conftest import shared_path

import extract
from formats import legacy, office

QUICK_FOX = "the quick brown fox jumps over the lazy dog"  # textract's standardized_text.*
ORIGINALS = {  # corpus file -> legacy format LibreOffice writes from it
    "docx/ko/sample-word-document.docx": "doc",
    "docx/zh/ChocolateFactory.docx": "doc",
    "docx/markitdown/test.docx": "doc",
    "pptx/ko/sample-ppt.pptx": "ppt",
    "pptx/zh/choco-builder_sample_zh.pptx": "ppt",
    "pptx/markitdown/test.pptx": "ppt",
}


MARKED = re.compile(r"^\[(sheet|notes|chart|header|footer|comment)\b.*|\[image: [^\]]*\]")


def words(lines: list[str]) -> str:
    """Whitespace-normalised text, cell separators and lines or marks office.py adds from
    parts the legacy readers leave out (alt text, headers, comments) dropped."""
    kept = [MARKED.sub("", line) for line in lines]
    return " ".join(w for w in " ".join(kept).split() if w != "|")


def all_lines(pages: list[list[str]]) -> list[str]:
    return [line for page in pages for line in page]


def soffice_or_skip() -> str:
    found = legacy.find_soffice()
    if found is None:
        pytest.skip("needs LibreOffice (soffice) to make .doc/.ppt test files; CI installs it")
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """Corpus name -> the .doc/.ppt LibreOffice saved it as (one soffice run per format)."""
    soffice = soffice_or_skip()
    folder = tmp_path_factory.mktemp("legacy")
    sources = {name: shared_path("corpus", name) for name in ORIGINALS}
    for target in ("doc", "ppt"):
        inputs = [str(p) for name, p in sources.items() if ORIGINALS[name] == target]
        subprocess.run([soffice, "--headless", f"-env:UserInstallation={(folder / 'p').as_uri()}",
                        "--convert-to", target, "--outdir", str(folder), *inputs],
                       capture_output=True, timeout=600, check=True)
    return {name: folder / f"{p.stem}.{ORIGINALS[name]}" for name, p in sources.items()}


def test_xls_reads_like_the_same_workbook_saved_as_xlsx():
    old = extract.extract(shared_path("corpus/xlsx/markitdown/test.xls"))
    new = extract.extract(shared_path("corpus/xlsx/markitdown/test.xlsx"))
    assert old.parser == "xlrd"
    assert old.pages == new.pages  # same line rules: [sheet] NAME, row N-1 on line N, " | "
    assert old.pages[0][:2] == ["[sheet] Sheet1", "Alpha | Beta | Gamma | Delta"]


def test_xls_and_doc_hold_textracts_standard_text():
    sheet = extract.extract(shared_path("corpus/legacy/textract/standardized_text.xls"))
    assert sheet.pages == [["[sheet] Sheet1", "the | quick | brown | fox", "jumps | over the",
                            "lazy", " | dog"]]
    doc = extract.extract(shared_path("corpus/legacy/textract/standardized_text.doc"))
    assert (doc.parser, words(all_lines(doc.pages))) == ("olefile:doc", QUICK_FOX)


def test_doc_matches_textracts_expected_text():
    folder = shared_path("corpus/legacy/textract")
    result = extract.extract(folder / "raw_text.doc")
    expected = (folder / "expected_doc_raw_text.txt").read_text(encoding="utf-8")
    assert result.parser == "olefile:doc"
    assert words(all_lines(result.pages)) == " ".join(expected.split())


@pytest.mark.parametrize("name", sorted(ORIGINALS))
def test_doc_and_ppt_from_korean_chinese_english_originals(made, name):
    """Our OLE reader (no LibreOffice involved in reading) gets the original's text back:
    every line of the original, in order, Hangul and Han included."""
    original = extract.extract(shared_path("corpus", name))
    result = extract.extract(made[name])
    assert result.parser == f"olefile:{ORIGINALS[name]}"
    ours = words(all_lines(result.pages))
    theirs = [words([line]) for line in all_lines(original.pages) if words([line])]
    missing = [line for line in theirs if line not in ours]
    assert not missing, missing[:3]
    if ORIGINALS[name] == "ppt":  # a slide is a page, each in show order, title first
        assert len(result.pages) == len(original.pages)
        assert [p[0] for p in result.pages] == [p[0] for p in original.pages]


def _patched_fib(source: Path, target: Path, offset: int, value: int, fmt: str) -> Path:
    shutil.copyfile(source, target)
    with olefile.OleFileIO(str(target), write_mode=True) as ole:
        word = bytearray(ole.openstream("WordDocument").read())
        struct.pack_into(fmt, word, offset, value)
        ole.write_stream("WordDocument", bytes(word))
    return target


def test_encrypted_doc_needs_a_password(tmp_path):
    source = shared_path("corpus/legacy/textract/standardized_text.doc")
    flags = struct.unpack_from("<H", olefile.OleFileIO(str(source)).openstream(
        "WordDocument").read(), 0x0A)[0]
    locked = _patched_fib(source, tmp_path / "locked.doc", 0x0A, flags | 0x0100, "<H")
    with pytest.raises(extract.ExtractError) as caught:
        extract.extract(locked)
    assert caught.value.reason == "password-protected"


def test_a_doc_our_reader_cannot_read_goes_to_libreoffice_or_names_it(tmp_path, monkeypatch):
    """No piece table (lcbClx = 0 in the FIB): LibreOffice converts it when installed; without
    it the file ends `converter-unavailable` naming what to install, never a traceback."""
    source = shared_path("corpus/legacy/textract/standardized_text.doc")
    broken = _patched_fib(source, tmp_path / "broken.doc", 0x1A2 + 4, 0, "<I")
    soffice_or_skip()
    result = extract.extract(broken)
    assert (result.parser, words(all_lines(result.pages))) == ("soffice+docx2python", QUICK_FOX)
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv(legacy.SOFFICE_ENV, raising=False)
    monkeypatch.setenv("ProgramFiles", str(tmp_path))
    with pytest.raises(extract.ExtractError) as caught:
        extract.extract(broken)
    assert caught.value.reason == "converter-unavailable"
    assert "install LibreOffice" in caught.value.detail


def test_modern_file_under_a_legacy_name_is_read_as_what_it_is(tmp_path):
    renamed = tmp_path / "report.doc"
    shutil.copyfile(shared_path("corpus/docx/markitdown/test.docx"), renamed)
    assert extract.extract(renamed).parser == "docx2python"


@pytest.mark.parametrize("suffix", [".doc", ".xls", ".ppt"])
def test_bad_legacy_files_fail_with_a_reason(tmp_path, suffix):
    empty, text = tmp_path / f"empty{suffix}", tmp_path / f"text{suffix}"
    empty.write_bytes(b"")
    text.write_bytes(b"just some text, not a compound file")
    for path, reason in ((empty, "empty"), (text, "corrupt")):
        with pytest.raises(extract.ExtractError) as caught:
            extract.extract(path)
        assert caught.value.reason == reason


def test_legacy_suffixes_are_picked_up_by_folder_sync():
    assert all(extract.supported(Path(f"x{s}")) for s in (".doc", ".XLS", ".ppt"))
    assert office.SEP == " | "
