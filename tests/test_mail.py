"""Mail attachments as sources of their own (`mail.eml/report.pdf`), through the real pipeline:
folder sync (ingest.py), the real `server.py` over stdio (search, read_range, check_changes),
re-sync, a changed mail, a deleted mail; and the .eml reader's bounds and refusals.

The mail is built here with the standard library's `email` package around real documents of
the team's corpus (the corpus has no .eml with attachments).
"""

from __future__ import annotations

import json
import os
import sys
from email.message import EmailMessage
from pathlib import Path

import pytest
from conftest import call, clean_env, shared_path
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

import extract
import fulltext
import ingest
import kb as kbmod
from formats import mail

REPO = Path(__file__).resolve().parent.parent
PDF_LINE = "The round pegs in the square holes."  # line 4 of crazyones-pdfa.pdf


def write_mail(path: Path, attachments: list[tuple[str, str, bytes]]) -> Path:
    """An .eml from Kim to the team with a plain-text body and these (name, type, bytes)."""
    message = EmailMessage()
    message["From"] = "Kim Minji <minji@example.com>"
    message["To"] = "team@example.com"
    message["Date"] = "Tue, 05 Mar 2024 09:30:00 +0900"
    message["Subject"] = "Lighthouse budget"
    message.set_content("The lighthouse budget and the zen notes are attached.\n")
    for name, kind, data in attachments:
        maintype, subtype = kind.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(message.as_bytes())
    return path


def corpus_attachments() -> list[tuple[str, str, bytes]]:
    return [("report.pdf", "application/pdf",
             shared_path("corpus/pdf/en/crazyones-pdfa.pdf").read_bytes()),
            ("zen.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml."
                         "document",
             shared_path("corpus/docx/docx2python/zen_of_python.docx").read_bytes()),
            ("data.bin", "application/octet-stream", b"\x00\x01\x02\x03\x04")]


def make_kb(base: Path, docs: Path) -> kbmod.KnowledgeBase:
    kbmod.open_or_create(base, "mail")
    (base / "mail" / "config.json").write_text(json.dumps(
        {"id": "mail", "sourcePaths": [str(docs)], "embedding": {"provider": "none"}}),
        encoding="utf-8")
    return kbmod.load(base, "mail")


def names(kb: kbmod.KnowledgeBase) -> list[str]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return sorted(s["name"] for s in fulltext.list_sources(conn))
    finally:
        conn.close()


async def test_attachments_are_sources_that_follow_their_mail(tmp_path):
    docs, base = tmp_path / "docs", tmp_path / "base"
    eml = write_mail(docs / "mail.eml", corpus_attachments())
    kb = make_kb(base, docs)
    first = ingest.sync(kb)
    assert (first.indexed, first.failed) == (3, []), first
    assert names(kb) == ["docs/mail.eml", "docs/mail.eml/report.pdf", "docs/mail.eml/zen.docx"]

    transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path",
                                                str(base)], env=clean_env(), cwd=str(REPO))
    async with Client(transport, timeout=120) as client:
        got = await call(client, "read_range", source="docs/mail.eml", page=1)
        assert [line["text"] for line in got["lines"]] == [
            "From: Kim Minji <minji@example.com>", "To: team@example.com",
            "Date: 2024-03-05T09:30:00+09:00", "Subject: Lighthouse budget", "",
            "The lighthouse budget and the zen notes are attached.",
            "[attachment] report.pdf (application/pdf, 16 KB)",
            "[attachment] zen.docx (application/vnd.openxmlformats-officedocument."
            "wordprocessingml.document, 15 KB)",
            "[attachment] data.bin (application/octet-stream, 5 bytes)"]

        found = await call(client, "search", query="round pegs square holes",
                           search_mode="bm25")
        hit = found["hits"][0]
        assert (hit["source"], hit["page"]) == ("docs/mail.eml/report.pdf", 1)
        assert PDF_LINE in hit["text"]
        lines = await call(client, "read_range", source="docs/mail.eml/report.pdf", page=1,
                           line_start=hit["line_start"], line_end=hit["line_end"])
        assert PDF_LINE in [line["text"] for line in lines["lines"]]
        zen = await call(client, "search", query="Beautiful is better than ugly",
                         search_mode="exact")
        assert {h["source"] for h in zen["hits"]} == {"docs/mail.eml/zen.docx"}

        # attachments have no file of their own: never reported missing or added
        changes = await call(client, "check_changes", kb_id="mail")
        assert (changes["added"], changes["modified"], changes["deleted"],
                changes["unchanged"]) == ([], [], [], 1)

        again = ingest.sync(kb)  # an unchanged mail: nothing read, nothing replaced
        assert (again.indexed, again.unchanged, again.deleted) == (0, 1, 0)

        write_mail(eml, corpus_attachments()[:1])  # the new version drops zen.docx
        os.utime(eml, (1, 1))
        changed = ingest.sync(kb)
        assert (changed.indexed, changed.unchanged, changed.deleted) == (1, 1, 1), changed
        assert names(kb) == ["docs/mail.eml", "docs/mail.eml/report.pdf"]
        zen = await call(client, "search", query="Beautiful is better than ugly",
                         search_mode="exact")
        assert zen["hits"] == []

        eml.unlink()
        changes = await call(client, "check_changes", kb_id="mail")
        assert changes["deleted"] == ["docs/mail.eml"]  # the mail, not its attachments
        gone = ingest.sync(kb)
        assert gone.deleted == 2 and names(kb) == []
        found = await call(client, "search", query="round pegs square holes",
                           search_mode="bm25")
        assert found["hits"] == []


def test_rebuild_reads_attachments_again_from_their_mail(tmp_path):
    docs, base = tmp_path / "docs", tmp_path / "base"
    write_mail(docs / "mail.eml", corpus_attachments())
    kb = make_kb(base, docs)
    ingest.sync(kb)
    rebuilt = ingest.rebuild(kb)
    assert (rebuilt.failed, rebuilt.skipped) == ([], [])
    assert names(kb) == ["docs/mail.eml", "docs/mail.eml/report.pdf", "docs/mail.eml/zen.docx"]


def test_a_bad_attachment_fails_alone(tmp_path):
    docs, base = tmp_path / "docs", tmp_path / "base"
    write_mail(docs / "mail.eml", [("agenda.pdf", "application/pdf", b"%PDF-1.4\n")])
    summary = ingest.sync(make_kb(base, docs))
    assert summary.indexed == 1
    assert [(f["source"], f["reason"]) for f in summary.failed] == [
        ("docs/mail.eml/agenda.pdf", "corrupt")]


def test_attachment_count_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(mail, "MAX_ATTACHMENTS", 2)
    path = write_mail(tmp_path / "many.eml", [(f"note{i}.txt", "text/plain", b"tide table %d"
                                               % i) for i in range(3)])
    doc = extract.extract(path)
    assert [a.name for a in doc.attachments] == ["note0.txt", "note1.txt"]
    assert doc.warnings == ["1 attachments past the first 2 are listed, not indexed"]
    assert doc.pages[0][-1] == "[attachment] note2.txt (text/plain, 12 bytes)"


def test_attachment_names_are_safe_and_unique(tmp_path):
    path = write_mail(tmp_path / "odd.eml", [
        ("../../etc/passwd.txt", "text/plain", b"one"), ("a:b?.txt", "text/plain", b"two"),
        ("CON.txt", "text/plain", b"three"), ("a_b_.txt", "text/plain", b"four")])
    doc = extract.extract(path)
    assert [a.name for a in doc.attachments] == ["passwd.txt", "a_b_.txt", "_CON.txt",
                                                 "a_b_ (2).txt"]


def test_encrypted_mail_needs_a_decrypted_copy(tmp_path):
    path = tmp_path / "secret.eml"
    path.write_text("From: a@example.com\nTo: b@example.com\nSubject: s\nMIME-Version: 1.0\n"
                    "Content-Type: application/pkcs7-mime; smime-type=enveloped-data; "
                    "name=smime.p7m\nContent-Transfer-Encoding: base64\n\nMIAGCSqGSIb3DQ==\n",
                    encoding="utf-8")
    with pytest.raises(extract.ExtractError) as caught:
        extract.extract(path)
    assert caught.value.reason == "password-protected" and "S/MIME" in caught.value.detail
