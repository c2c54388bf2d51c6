"""Every format of issue 17 end to end: a real folder ingest (`ingest.py`), then a phrase of
each file found through the real `server.py` over stdio, and `read_range` returning its line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import pytest_asyncio
from conftest import clean_env, shared_path
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

import kb as kbmod
from formats import legacy

REPO = Path(__file__).resolve().parent.parent
module_loop = pytest.mark.asyncio(loop_scope="module")
EML = """From: Kim Minji <minji@example.com>
To: team@example.com
Date: Tue, 05 Mar 2024 09:30:00 +0900
Subject: =?utf-8?b?7ZqM7J2YIOyViOuCtA==?=
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="b1"

--b1
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: 8bit

회의는 목요일 오후 세 시에 열립니다.
The quarterly zephyr review moves to Thursday.
--b1
Content-Type: text/calendar; name="agenda.ics"
Content-Disposition: attachment; filename="agenda.ics"
Content-Transfer-Encoding: base64

JVBERi0xLjQK
--b1--
"""
HTML = ("<html><head><script>var x='hidden marmot';</script></head><body><h2>Release notes"
        "</h2><ul><li>The pelican importer handles 한국어 names</li></ul></body></html>")
PHRASES = {  # source -> (phrase, page): each format's text as the server finds it
    "docs/raw_text.doc": ("I bet you are still using Bootstrap too", 1),
    "docs/standardized_text.xls": ("jumps | over the", 1),
    "docs/test.xls": ("Alpha | Beta | Gamma | Delta", 1),
    "docs/raw_text.rtf": ("Oh. You need a little dummy text for your mockup?", 1),
    "docs/raw_text.odt": ("Sample OppenOffice Writer file", 1),
    "docs/raw_text.epub": ("The lysine contingency", 2),
    "docs/notes.html": ("The pelican importer handles 한국어 names", 1),
    "docs/mail.eml": ("The quarterly zephyr review moves to Thursday.", 1),
    "docs/sample-ppt.ppt": ("연관키워드: 토큰화, 자연어 처리, 구문 분석", 4),
    "docs/ChocolateFactory.doc": ("Chocolate Factory", 1),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    soffice = legacy.find_soffice()
    if soffice is None:
        pytest.skip("needs LibreOffice (soffice) to make the .ppt/.doc test files; CI has it")
    root = tmp_path_factory.mktemp("formats")
    docs = root / "docs"
    docs.mkdir()
    textract = shared_path("corpus/legacy/textract")
    for name in ("raw_text.doc", "standardized_text.xls", "raw_text.rtf", "raw_text.odt",
                 "raw_text.epub"):
        shutil.copyfile(textract / name, docs / name)
    shutil.copyfile(shared_path("corpus/xlsx/markitdown/test.xls"), docs / "test.xls")
    (docs / "notes.html").write_text(HTML, encoding="utf-8")
    (docs / "mail.eml").write_text(EML, encoding="utf-8")
    for source, target in (("pptx/ko/sample-ppt.pptx", "ppt"),
                           ("docx/zh/ChocolateFactory.docx", "doc")):
        subprocess.run([soffice, "--headless", f"-env:UserInstallation={(root / 'p').as_uri()}",
                        "--convert-to", target, "--outdir", str(docs),
                        str(shared_path("corpus", source))], capture_output=True, timeout=300,
                       check=True)
    base = root / "base"
    kbmod.open_or_create(base, "docs")
    (base / "docs" / "config.json").write_text(
        json.dumps({"id": "docs", "embedding": {"provider": "none"}}), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(REPO / "ingest.py"), str(docs), "--kb", "docs",
                           "--base-path", str(base), "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=clean_env(), cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["indexed"] == len(PHRASES) and not summary["failed"], summary
    return base


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stdio(base, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path",
                                                str(base)],
                               env=clean_env(), cwd=str(REPO), keep_alive=False, log_file=log)
    async with Client(transport, timeout=120) as client:
        yield client
    assert "Traceback" not in log.read_text(encoding="utf-8", errors="replace")


@module_loop
@pytest.mark.parametrize("source", sorted(PHRASES))
async def test_search_finds_each_format_and_read_range_returns_the_line(stdio, source):
    phrase, page = PHRASES[source]
    found = (await stdio.call_tool("search", {"query": phrase, "search_mode": "exact",
                                              "source": source})).structured_content
    hit = found["hits"][0]
    assert (hit["source"], hit["page"]) == (source, page)
    got = (await stdio.call_tool("read_range", {
        "source": source, "page": page, "line_start": hit["line_start"],
        "line_end": hit["line_end"]})).structured_content
    assert any(phrase in line["text"] for line in got["lines"]), got


@module_loop
async def test_mail_headers_lead_and_attachments_are_listed(stdio):
    got = (await stdio.call_tool("read_range", {"source": "docs/mail.eml", "page": 1})
           ).structured_content
    assert [line["text"] for line in got["lines"]] == [
        "From: Kim Minji <minji@example.com>", "To: team@example.com",
        "Date: 2024-03-05T09:30:00+09:00", "Subject: 회의 안내", "",
        "회의는 목요일 오후 세 시에 열립니다.", "The quarterly zephyr review moves to Thursday.",
        "[attachment] agenda.ics (text/calendar, 9 bytes)"]  # listed: no reader for .ics


def test_zip_based_formats_are_all_bomb_checked(tmp_path):
    import extract

    for suffix in (".epub", ".odt", ".ods", ".odp", ".docx", ".xlsx", ".pptx"):
        bomb = tmp_path / f"bomb{suffix}"
        with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("content.xml", b"\0" * (20 * 2**20))
        with pytest.raises(extract.ExtractError) as caught:
            extract.extract(bomb)
        assert caught.value.reason == "zip-bomb", suffix
