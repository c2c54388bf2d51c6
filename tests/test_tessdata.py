"""tessdata.py: Tesseract's Korean and Chinese data, fetched for install.ps1 -WithOcr and kept
only when it matches its pinned SHA-256 (issue 31).

The files are served by a real HTTP server on 127.0.0.1 (the machine cannot reach github.com),
speaking what GitHub's raw URL answers: the file's bytes. The real bytes are Debian's
tesseract-ocr-kor and -chi-sim (1:4.1.0, the same files as tessdata_fast's 4.1.0 tag).

    pytest tests/test_tessdata.py
"""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from setup import tessdata

DEBIAN = sorted(Path("/usr/share/tesseract-ocr").glob("*/tessdata"))


def debian_file(lang: str) -> bytes:
    for folder in DEBIAN:
        if (folder / f"{lang}.traineddata").is_file():
            return (folder / f"{lang}.traineddata").read_bytes()
    pytest.skip(f"needs Debian's {lang}.traineddata (apt-get install tesseract-ocr-kor "
                "tesseract-ocr-chi-sim)")


@pytest.fixture
def mirror(monkeypatch):
    """A raw-file server on 127.0.0.1: `files[lang] = bytes` is what it answers for lang."""
    files: dict[str, bytes] = {}
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            asked.append(self.path)
            lang = self.path.rsplit("/", 1)[-1].removesuffix(".traineddata")
            body = files.get(lang)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    monkeypatch.setenv(tessdata.URL_ENV, f"http://127.0.0.1:{port}/{{tag}}/{{lang}}.traineddata")
    yield files, asked
    server.shutdown()
    server.server_close()


def test_the_pins_are_the_files_debian_ships():
    for lang, pin in tessdata.PINS.items():
        data = debian_file(lang)
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (pin.sha256, pin.size), lang
    assert tessdata.URL.format(tag=tessdata.TAG, lang="kor") == \
        "https://github.com/tesseract-ocr/tessdata_fast/raw/4.1.0/kor.traineddata"


def test_the_real_files_are_fetched_and_kept(mirror, tmp_path):
    files, asked = mirror
    for lang in tessdata.PINS:
        files[lang] = debian_file(lang)
    folder = tmp_path / "사용자" / "tessdata"
    assert tessdata.main([str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["chi_sim.traineddata",
                                                        "kor.traineddata"]
    assert (folder / "kor.traineddata").read_bytes() == files["kor"]
    assert asked == ["/4.1.0/kor.traineddata", "/4.1.0/chi_sim.traineddata"]
    assert tessdata.main([str(folder)]) == 0 and len(asked) == 2  # present: not fetched again


def test_a_file_that_differs_from_its_pin_is_refused_and_deleted(mirror, tmp_path, capsys):
    files, _ = mirror
    good = debian_file("kor")
    files["kor"] = good[:-1] + bytes([good[-1] ^ 1])  # same size, one bit changed
    portal = b"<html>Please sign in to the hotel Wi-Fi</html>"  # a captive portal's answer
    files["chi_sim"] = portal
    assert tessdata.main([str(tmp_path), "kor", "chi_sim"]) == 1
    assert list(tmp_path.iterdir()) == []  # nothing kept, not even a .part
    err = capsys.readouterr().err
    assert "kor.traineddata from http://127.0.0.1:" in err and "is not the pinned file" in err
    assert f"want 1,677,415 bytes, SHA-256 {tessdata.PINS['kor'].sha256}" in err
    assert "got SHA-256 " in err and f"got {len(portal)} bytes" in err
    assert "deleted, nothing installed" in err


def test_a_longer_answer_is_cut_at_the_pinned_size(mirror, tmp_path):
    files, _ = mirror
    files["kor"] = debian_file("kor") + b"\0" * (1 << 20)
    with pytest.raises(tessdata.Refused, match="got more than 1,677,415 bytes"):
        tessdata.fetch("kor", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_server_says_what_to_do(mirror, tmp_path, capsys):
    assert tessdata.main([str(tmp_path), "kor"]) == 1  # the mirror answers 404
    assert "could not be downloaded" in capsys.readouterr().err
    assert tessdata.main([str(tmp_path), "eng"]) == 2  # no pin: refused before any download
