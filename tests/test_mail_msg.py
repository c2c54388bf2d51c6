"""Outlook .msg (mail.extract_msg) on real messages saved by Outlook.

The team's corpus has no .msg, so the three test messages of the BSD-licensed `msg-parser`
1.2.0 sdist on PyPI (complete.msg: 10 attachments, 6 of them embedded messages; other.msg: a
Chinese bounce with an attached message; outer.msg: no sender, one embedded message) are
fetched once with pip into a cache folder and never copied into the repo; the tests skip,
saying why, when PyPI cannot be reached. The expected values below were cross-checked once
with extract-msg 0.57 (GPL-3, not a dependency) in a throwaway venv.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import olefile
import pytest
from conftest import call, clean_env
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

import extract
import fulltext
import ingest
import kb as kbmod
from formats import mail, markup
from index import exact

REPO = Path(__file__).resolve().parent.parent
SDIST = "msg-parser==1.2.0"
CACHE = Path(tempfile.gettempdir()) / "linecite-test-msg-parser-1.2.0"
NAMES = ("complete.msg", "other.msg", "outer.msg")


@pytest.fixture(scope="session")
def msgs() -> Path:
    """The folder holding the sdist's three .msg files, downloaded on first use."""
    if all((CACHE / name).is_file() for name in NAMES):
        return CACHE
    download = Path(tempfile.mkdtemp(prefix="linecite-sdist-"))
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                               "--no-binary", "msg-parser", "--disable-pip-version-check",
                               "-q", "-d", str(download), SDIST],
                              capture_output=True, text=True, timeout=300)
        archives = list(download.glob("msg_parser-*.tar.gz"))
        if proc.returncode or not archives:
            pytest.skip(f"needs the {SDIST} sdist from PyPI for real .msg files; pip could "
                        f"not fetch it: {(proc.stderr or proc.stdout).strip()[-300:]}")
        CACHE.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archives[0]) as archive:
            for member in archive.getmembers():
                if member.isfile() and Path(member.name).name in NAMES:
                    (CACHE / Path(member.name).name).write_bytes(
                        archive.extractfile(member).read())
    finally:
        shutil.rmtree(download, ignore_errors=True)
    return CACHE


def test_complete_msg_headers_body_and_attachment_list(msgs):
    doc = extract.extract(msgs / "complete.msg")
    lines = doc.pages[0]
    assert doc.parser == "olefile:msg" and len(doc.pages) == 1
    assert lines[:6] == [
        "From: Vikram Arsid <admin@fegraph.onmicrosoft.com>",
        "To: qademo@hiddenfire.onmicrosoft.com, invotas.cnb@gmail.com",
        "Cc: quarantine@hiddenfire.onmicrosoft.com, abuse@hiddenfire.onmicrosoft.com",
        "Date: 2018-10-29T18:12:29+00:00",
        "Subject: Test Multiple attachments complete email!!",
        ""]
    assert lines[6].startswith("😇😇😇😇Nokia Health is now Withings. Learn more")
    assert "For serious sports & superior style" in lines
    assert lines[-10:] == [
        "[attachment] Create a database on Azure in 90 seconds.msg (message/rfc822, 229 KB)",
        "[attachment] How fast can you deploy a web app_.msg (message/rfc822, 217 KB)",
        "[attachment] Virtual machines for any scenario.msg (message/rfc822, 231 KB)",
        "[attachment] A few ways to get started with Azure.msg (message/rfc822, 244 KB)",
        "[attachment] Welcome to Azure Security Center.msg (message/rfc822, 159 KB)",
        "[attachment] Welcome to your Azure free account.msg (message/rfc822, 211 KB)",
        "[attachment] [MS-OXPROPS]-181001.docx (application/vnd.openxmlformats-officedocument."
        "wordprocessingml.document, 312 KB)",
        "[attachment] [MS-OXPROPS].txt (text/plain, 672 KB)",
        "[attachment] [MS-OXPROPS].pdf (application/pdf, 6.6 MB)",
        "[attachment] hugues-de-buyer-mimeure-313867-unsplash.jpg (image/jpeg, 5.9 MB)"]


def test_complete_msg_hands_over_every_attachment_with_its_bytes(msgs):
    doc = extract.extract(msgs / "complete.msg")
    got = {a.name: a for a in doc.attachments}
    assert len(got) == 10
    text = got["[MS-OXPROPS].txt"]
    ole = olefile.OleFileIO(str(msgs / "complete.msg"))
    stored = ole.openstream("__attach_version1.0_#00000007/__substg1.0_37010102").read()
    ole.close()
    assert text.data == stored and len(stored) == text.size == 687961
    assert got["[MS-OXPROPS].pdf"].data.startswith(b"%PDF-")
    embedded = got["Welcome to Azure Security Center.msg"]
    assert embedded.data == b"" and embedded.pages[0][:6] == [
        "From: Microsoft Azure <azure-noreply@microsoft.com>",
        "To: admin@fegraph.onmicrosoft.com", "Date: 2018-10-21T02:26:49+00:00",
        "Subject: Welcome to Azure Security Center", "",
        "Get tips to protect your workloads."]


def test_chinese_bounce_and_its_attached_message(msgs):
    doc = extract.extract(msgs / "other.msg")
    lines = doc.pages[0]
    assert lines[:4] == ["From: Mail Delivery Subsystem <mailer-daemon@tjdpf.org.cn>",
                         "To: yosipnps@model.com", "Date: 2017-11-27T17:44:30+08:00",
                         "Subject: 投递状态通知 (Failure Notice)"]
    assert "这是一个永久性的错误，服务器已经放弃投递。" in lines
    assert lines[-1] == "[attachment] default_attachment.eml (message/rfc822, 152 KB)"
    (inner,) = doc.attachments
    assert inner.pages[0][:4] == ["From: Meredith chen <yosipnps@model.com>",
                                  "To: hp_lsz@tjdpf.org.cn", "Date: 2017-11-27T17:44:11+08:00",
                                  "Subject: 回复：转发：反馈·北京 2017年12月02-03日 销售"]
    # an attachment of the attached message is listed there, not indexed (one level)
    assert any(line.startswith("[attachment] ") for line in inner.pages[0])


def test_message_without_sender(msgs):
    doc = extract.extract(msgs / "outer.msg")
    assert doc.pages[0] == ["To: outer@foo.bar", "Date: 2016-11-15T23:29:05+00:00",
                            "Subject: outer subject", "", "Outer body",
                            "[attachment] test.msg (message/rfc822, 13 KB)"]


@pytest.mark.parametrize("name, phrase", [("outer.msg", "Outer body"),
                                          ("complete.msg", "For serious sports & superior")])
def test_compressed_rtf_body_decompresses_to_the_plain_body(msgs, name, phrase):
    ole = olefile.OleFileIO(str(msgs / name))
    packed = ole.openstream("__substg1.0_10090102").read()
    ole.close()
    rtf = mail.decompress_rtf(packed)
    # whole, to its closing brace (the compressed_rtf package gives the same bytes; the
    # header's raw size is 12 bytes more on complete.msg, so it is no check)
    assert rtf.startswith(b"{\\rtf1") and rtf.rstrip().endswith(b"}")
    assert phrase in markup.rtf_text(rtf)


def test_damaged_and_mislabelled_msg_end_as_corrupt(msgs, tmp_path):
    cut = tmp_path / "cut.msg"
    cut.write_bytes((msgs / "other.msg").read_bytes()[:8192])
    text = tmp_path / "notes.msg"
    text.write_text("From: nobody\nnot an Outlook file", encoding="utf-8")
    word = tmp_path / "word.msg"
    word.write_bytes(_ole_document())
    for path, says in ((cut, "damaged Outlook message"), (text, "no OLE container"),
                       (word, "no Outlook message")):
        with pytest.raises(extract.ExtractError) as caught:
            extract.extract(path)
        assert caught.value.reason == "corrupt" and says in caught.value.detail, path


def _ole_document() -> bytes:
    """A real OLE file that is no message: a Word 97 document of the team's corpus."""
    from conftest import shared_path

    return shared_path("corpus/legacy/textract/raw_text.doc").read_bytes()


async def test_msg_and_its_attached_message_through_the_server(msgs, tmp_path):
    base = tmp_path / "base"
    kbmod.open_or_create(base, "mail")
    (base / "mail" / "config.json").write_text(
        json.dumps({"id": "mail", "embedding": {"provider": "none"}}), encoding="utf-8")
    kb = kbmod.load(base, "mail")
    summary = ingest.ingest(kb, [msgs / "other.msg"])
    assert (summary.indexed, summary.failed) == (2, [])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        names = sorted(s["name"] for s in fulltext.list_sources(conn))
        assert names == ["other.msg", "other.msg/default_attachment.eml"]
        hits = exact.exact_search(conn, "Meredith chen", 5)
        assert {h["source"] for h in hits} == {"other.msg/default_attachment.eml"}
        row = fulltext.source_row(conn, "other.msg/default_attachment.eml")
        assert row["path"] == str((msgs / "other.msg").resolve())
        assert row["sha256"] != hashlib.sha256((msgs / "other.msg").read_bytes()).hexdigest()
    finally:
        conn.close()
    again = ingest.ingest(kb, [msgs / "other.msg"])
    assert (again.indexed, again.unchanged) == (0, 1)

    transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path",
                                                str(base)], env=clean_env(), cwd=str(REPO))
    async with Client(transport, timeout=120) as client:
        found = await call(client, "search", query="永久性的错误", search_mode="bm25")
        hit = found["hits"][0]
        assert hit["source"] == "other.msg" and "这是一个永久性的错误" in hit["text"]
        got = await call(client, "read_range", source="other.msg/default_attachment.eml",
                         page=1, line_start=1, line_end=4)
        assert [line["text"] for line in got["lines"]] == [
            "From: Meredith chen <yosipnps@model.com>", "To: hp_lsz@tjdpf.org.cn",
            "Date: 2017-11-27T17:44:11+08:00",
            "Subject: 回复：转发：反馈·北京 2017年12月02-03日 销售"]


@pytest.mark.parametrize("missing, name, phrase", [
    (("BODY",), "complete.msg", "For serious sports & superior style"),  # the HTML body
    (("BODY", "HTML_BODY"), "other.msg", "这是一个永久性的错误，服务器已经放弃投递。"),  # RTF
])
def test_html_and_rtf_bodies_stand_in_for_a_missing_plain_body(msgs, monkeypatch, missing,
                                                               name, phrase):
    for constant in missing:  # as if Outlook had not stored that body
        monkeypatch.setattr(mail, constant, 0xFFF0)
    lines = extract.extract(msgs / name).pages[0]
    blank = lines.index("")
    assert lines[blank - 1].startswith("Subject: ")
    assert any(phrase in line for line in lines[blank:]), lines[blank:40]
