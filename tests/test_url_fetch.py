"""ingest_url against a real HTTP server on 127.0.0.1 (http.server in a thread): pages and a
PDF become lines, redirects are bounded and re-checked, a 2 GB Content-Length and a slow body
are cut, and no request leaves for a private or metadata address (issue 33).

A safety net (`only_loopback`) refuses, in this process, any connection to an address other
than 127.0.0.1: if the SSRF guard broke, a test fails instead of sending a packet out.
"""

import json
import socket
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

import fulltext
import ingest
import kb as kbmod
import library
from sources import url_fetch
from tests.conftest import clean_env, image_pdf, shared_path
from tests.test_ocr import needs_tesseract

REPO = Path(__file__).resolve().parent.parent
PAGE = (b"<!doctype html><html><head><title>Guide</title><style>p{}</style></head><body>"
        b"<h1>Setting up the relay</h1><p>Turn the dial to seven.</p>"
        b"<table><tr><td>port</td><td>8443</td></tr></table></body></html>")


class Site:
    """What the server answers: path -> (status, headers, body or a callable writing it)."""

    def __init__(self):
        self.routes: dict[str, tuple[int, dict, object]] = {}
        self.requests: list[tuple[str, str, dict]] = []


def _handler(site: Site):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest's output clean
            pass

        def do_HEAD(self):
            self._answer(head=True)

        def do_GET(self):
            self._answer(head=False)

        def _answer(self, head: bool):
            site.requests.append((self.command, self.path, dict(self.headers)))
            status, headers, body = site.routes.get(self.path, (404, {}, b"not here"))
            etag = headers.get("ETag")
            if etag and self.headers.get("If-None-Match") == etag:
                status, body = 304, b""
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            if isinstance(body, bytes) and "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if head or status == 304:
                return
            try:
                body(self.wfile) if callable(body) else self.wfile.write(body)
            except OSError:  # the client hung up: what the bounds are for
                pass

    return Handler


def start_site() -> tuple[Site, ThreadingHTTPServer]:
    site = Site()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    return site, server


def stop_site(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture
def site():
    site, server = start_site()
    yield site
    stop_site(server)


@pytest.fixture(autouse=True)
def only_loopback(monkeypatch):
    """Refuse, in this process, a connection to anything but 127.0.0.1 (a broken guard must
    fail the test, never reach the address); the connections tried are recorded."""
    tried: list = []
    real = socket.create_connection

    def guarded(address, *args, **kwargs):
        tried.append(address[0])
        if address[0] != "127.0.0.1":
            raise AssertionError(f"a connection to {address[0]} was attempted")
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", guarded)
    monkeypatch.delenv(url_fetch.ALLOW_PRIVATE_ENV, raising=False)
    return tried


def make_kb(tmp_path: Path, allow_private: bool = True) -> kbmod.KnowledgeBase:
    folder = tmp_path / "base" / "web"
    folder.mkdir(parents=True)
    config = {"id": "web", "embedding": {"provider": "none"},
              "urls": {"allowPrivate": allow_private}}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(tmp_path / "base", "web")


def lines_of(kb: kbmod.KnowledgeBase, name: str) -> list[str]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return [r["text"] for r in conn.execute(
            "SELECT l.text FROM lines l JOIN sources s ON s.id = l.source_id WHERE s.name = ? "
            "ORDER BY l.page, l.line", (name,))]
    finally:
        conn.close()


def sources_of(kb: kbmod.KnowledgeBase) -> list[dict]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return fulltext.list_sources(conn)
    finally:
        conn.close()


# ---------------------------------------------------------------------------
# pages and documents become lines


def test_a_page_becomes_its_visible_lines_under_its_url(site, tmp_path):
    site.routes["/docs/Relay%20Guide"] = (200, {"Content-Type": "text/html; charset=utf-8",
                                                 "ETag": '"v1"'}, PAGE)
    kb = make_kb(tmp_path)
    summary = ingest.ingest_url(kb, site.base.upper().replace("HTTP", "http", 1)
                                + "/docs/Relay Guide#setup")
    name = f"{site.base}/docs/Relay%20Guide"  # host lower case, space encoded, no fragment
    assert (summary.indexed, summary.failed) == (1, [])
    assert lines_of(kb, name) == ["Setting up the relay", "Turn the dial to seven.",
                                  "port | 8443"]
    [source] = sources_of(kb)
    assert (source["name"], source["state"], source["parser"]) == (name, "ready", "html")
    assert site.requests[0][2]["Accept-Encoding"] == "identity"


def test_a_pdf_is_sniffed_by_its_bytes_and_read_as_the_file_is(site, tmp_path):
    import extract

    pdf = shared_path("corpus", "pdf", "en", "pdflatex-4-pages.pdf")
    site.routes["/download?id=4"] = (200, {"Content-Type": "text/html"}, pdf.read_bytes())
    kb = make_kb(tmp_path)
    summary = ingest.ingest_url(kb, site.base + "/download?id=4")
    assert summary.indexed == 1 and summary.pages == 4
    expected = [line for page in extract.extract(pdf).pages for line in page]
    assert lines_of(kb, site.base + "/download?id=4") == expected


def test_fetching_again_replaces_the_page(site, tmp_path):
    kb = make_kb(tmp_path)
    url = site.base + "/news"
    site.routes["/news"] = (200, {"Content-Type": "text/html"}, b"<p>first edition</p>")
    ingest.ingest_url(kb, url)
    site.routes["/news"] = (200, {"Content-Type": "text/html"}, b"<p>second edition</p>")
    again = ingest.ingest_url(kb, url)
    assert again.indexed == 1
    assert lines_of(kb, url) == ["second edition"]
    assert [s["name"] for s in sources_of(kb)] == [url]
    same = ingest.ingest_url(kb, url)
    assert (same.indexed, same.unchanged) == (0, 1)


def test_check_compares_etags_with_a_conditional_request(site, tmp_path):
    kb = make_kb(tmp_path)
    url = site.base + "/spec"
    site.routes["/spec"] = (200, {"Content-Type": "text/html", "ETag": '"a"'}, b"<p>spec</p>")
    ingest.ingest_url(kb, url)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    saved = url_fetch.saved_validators(conn, url)
    conn.close()
    assert saved == {"etag": '"a"', "lastModified": None}
    assert url_fetch.changed(url, saved, allow_private=True) is False
    assert site.requests[-1][:2] == ("HEAD", "/spec")
    assert site.requests[-1][2]["If-None-Match"] == '"a"'
    site.routes["/spec"] = (200, {"Content-Type": "text/html", "ETag": '"b"'}, b"<p>new</p>")
    assert url_fetch.changed(url, saved, allow_private=True) is True


def test_sync_fetches_changed_urls_again_and_keeps_one_that_is_down(site, tmp_path):
    """check_changes names the URL whose ETag moved; a sync fetches only that one again
    (the other answers 304 to its HEAD), and a URL whose server is gone is reported with
    its source kept, never deleted."""
    kb = make_kb(tmp_path)
    html = {"Content-Type": "text/html"}
    site.routes["/a"] = (200, {**html, "ETag": '"1"'}, b"<p>first draft</p>")
    site.routes["/b"] = (200, {**html, "ETag": '"x"'}, b"<p>steady page</p>")
    gone_site, gone_server = start_site()
    gone_site.routes["/c"] = (200, {**html, "ETag": '"c"'}, b"<p>soon offline</p>")
    a, b, c = site.base + "/a", site.base + "/b", gone_site.base + "/c"
    for url in (a, b, c):
        ingest.ingest_url(kb, url)
    stop_site(gone_server)
    site.routes["/a"] = (200, {**html, "ETag": '"2"'}, b"<p>second draft</p>")
    changes = library.Library(kb.folder.parent).check_changes("web")
    assert changes["modified"] == [a] and changes["unchanged"] == 1
    assert [(e["name"], e["reason"]) for e in changes["skipped"]] == [(c, "unreachable")]
    site.requests.clear()
    summary = ingest.sync(kb)
    assert lines_of(kb, a) == ["second draft"]
    assert [r[:2] for r in site.requests if r[1] == "/b"] == [("HEAD", "/b")]
    assert (summary.indexed, summary.deleted) == (1, 0)
    assert [(e["name"], e["reason"]) for e in summary.skipped] == [(c, "unreachable")]
    assert lines_of(kb, c) == ["soon offline"]
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    assert url_fetch.saved_validators(conn, a)["etag"] == '"2"'
    conn.close()
    rebuilt = ingest.rebuild(kb)  # a damaged index's rebuild fetches its URLs again
    assert lines_of(kb, a) == ["second draft"] and lines_of(kb, b) == ["steady page"]
    assert [(e["name"], e["reason"]) for e in rebuilt.skipped] == [(c, "unreachable")]


@needs_tesseract
@pytest.mark.parametrize("saved_by_an_older_version", [False, True])
def test_a_url_whose_extraction_failed_is_fetched_again_at_sync(site, tmp_path, monkeypatch,
                                                                saved_by_an_older_version):
    # Regression (issue 45): the ETag of a URL whose extraction failed was saved all the same,
    # so each sync's conditional request heard 304 and the failed source stayed failed: a scan
    # fetched before Tesseract was installed was never read again. Failed and needs-action
    # URLs are fetched again at every sync, as failed files are read again.
    from formats import ocr

    image_pdf(tmp_path / "scan.pdf", 1)
    site.routes["/scan"] = (200, {"Content-Type": "application/pdf", "ETag": '"scan-1"'},
                            (tmp_path / "scan.pdf").read_bytes())  # 304 to If-None-Match
    kb, url = make_kb(tmp_path), site.base + "/scan"
    # an OCR cache of its own: a scan made in the same second as the other case's is the same
    # file (a PDF's date is in seconds), and the session's cache had read it already
    monkeypatch.setenv(ocr.CACHE_ENV, str(tmp_path / "ocr-cache"))
    monkeypatch.setenv(ocr.TESSERACT_ENV, str(tmp_path / "no-tesseract"))
    first = ingest.ingest_url(kb, url)
    assert [(f["source"], f["reason"]) for f in first.needs_action] == [(url, "ocr-unavailable")]
    conn = fulltext.connect(kb.fulltext_path)
    assert url_fetch.saved_validators(conn, url) == {}  # they would say "unchanged" for ever
    if saved_by_an_older_version:
        url_fetch.save_validators(conn, url, {"etag": '"scan-1"', "lastModified": None})
    conn.close()
    assert library.Library(kb.folder.parent).check_changes("web")["retried"] == [url]

    monkeypatch.delenv(ocr.TESSERACT_ENV)  # Tesseract is installed now
    site.requests.clear()
    summary = ingest.sync(kb)
    assert [r[:2] for r in site.requests] == [("GET", "/scan")]  # fetched, not asked
    assert (summary.indexed, summary.needs_action) == (1, [])
    assert "Harbour crane log page 1" in lines_of(kb, url)[0]
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    assert url_fetch.saved_validators(conn, url)["etag"] == '"scan-1"'  # indexed: kept now
    conn.close()
    site.requests.clear()
    assert ingest.sync(kb).unchanged == 1
    assert [r[:2] for r in site.requests] == [("HEAD", "/scan")]  # 304: not fetched again


# ---------------------------------------------------------------------------
# redirects


def test_a_redirect_chain_is_followed_and_the_asked_url_names_the_source(site, tmp_path):
    site.routes["/old"] = (301, {"Location": "/moved"}, b"")
    site.routes["/moved"] = (302, {"Location": f"{site.base}/final.html"}, b"")
    site.routes["/final.html"] = (200, {}, b"<p>arrived</p>")
    kb = make_kb(tmp_path)
    ingest.ingest_url(kb, site.base + "/old")
    assert lines_of(kb, site.base + "/old") == ["arrived"]
    assert [r[1] for r in site.requests] == ["/old", "/moved", "/final.html"]


def test_too_many_redirects_are_refused(site, tmp_path):
    for hop in range(10):
        site.routes[f"/r{hop}"] = (302, {"Location": f"/r{hop + 1}"}, b"")
    with pytest.raises(url_fetch.FetchError) as err:
        url_fetch.fetch(site.base + "/r0", tmp_path, 2**20, allow_private=True)
    assert err.value.reason == "too-many-redirects"
    assert len(site.requests) == url_fetch.MAX_REDIRECTS + 1


# ---------------------------------------------------------------------------
# size and time bounds


def test_a_2_gb_content_length_is_refused_before_the_body_is_read(site, tmp_path):
    def never_ending(out):
        out.write(b"x" * 1024)
        out.flush()
        time.sleep(10)  # a client that reads on would wait here until its time bound

    site.routes["/huge.pdf"] = (200, {"Content-Length": str(2 * 2**30),
                                      "Content-Type": "application/pdf"}, never_ending)
    kb = make_kb(tmp_path)
    started = time.monotonic()
    with pytest.raises(url_fetch.FetchError) as err:
        ingest.ingest_url(kb, site.base + "/huge.pdf")
    assert err.value.reason == "too-large"
    assert "is 2,048.0 MB, over the limit of 512.0 MB" in str(err.value)
    assert time.monotonic() - started < 3
    assert not kb.fulltext_path.exists()  # nothing was indexed, not even a failed row


def test_a_body_past_the_limit_is_cut_while_reading(site, tmp_path):
    def unannounced(out):
        for _ in range(40):
            out.write(b"<p>" + b"a" * 100_000 + b"</p>")

    site.routes["/long"] = (200, {"Content-Type": "text/html"}, unannounced)  # no length
    with pytest.raises(url_fetch.FetchError) as err:
        url_fetch.fetch(site.base + "/long", tmp_path, 2**20, allow_private=True)
    assert err.value.reason == "too-large"


def peak_rss(proc: subprocess.Popen) -> int:
    """The most resident memory `proc` held until it ended, in bytes (polled every 5 ms: an
    allocation of hundreds of MB takes far longer than that to fill)."""
    watched, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.Error:  # it ended between poll and look
            break
        time.sleep(0.005)
    return peak


def test_a_zip_bomb_url_is_refused_before_its_mimetype_is_unpacked(site, tmp_path):
    # Regression (issue 45): sniffing a zip's type read its `mimetype` entry whole before any
    # zip-bomb check: a 3.1 MB zip whose mimetype was 3 GiB of zeros took `ingest.py URL` to
    # 6.3 GB. Here 1 GiB (made in about a second): past the 512 MB one entry may hold
    # (formats.base.ZIP_MAX_MEMBER) and the ratio of 200.
    bomb = tmp_path / "bomb.epub"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive, \
            archive.open("mimetype", "w") as member:
        block = bytes(2**20)
        for _ in range(1024):
            member.write(block)
    assert bomb.stat().st_size < 8 * 2**20
    site.routes["/book"] = (200, {"Content-Type": "application/epub+zip"}, bomb.read_bytes())
    kb = make_kb(tmp_path)
    proc = subprocess.Popen([sys.executable, str(REPO / "ingest.py"), site.base + "/book",
                             "--kb", "web", "--base-path", str(kb.folder.parent), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            encoding="utf-8", env=clean_env(LINECITE_URL_ALLOW_PRIVATE="1"))
    peak = peak_rss(proc)
    _out, err = proc.communicate(timeout=120)
    assert peak < 500 * 2**20, f"peak {peak / 2**20:,.0f} MB"
    assert proc.returncode == 2, err  # refused: nothing indexed
    assert "its part mimetype would unpack to 1,024 MB, past the 512 MB" in err
    assert "possible zip bomb" in err and site.base + "/book" in err
    assert not kb.fulltext_path.exists()


def test_a_slow_body_is_cut_by_the_total_time_bound(site, tmp_path):
    def trickle(out):
        for _ in range(300):  # 100 bytes each 0.1 s: no single read ever waits long
            out.write(b"a" * 100)
            out.flush()
            time.sleep(0.1)

    site.routes["/slow"] = (200, {"Content-Type": "text/plain",
                                  "Content-Length": "30000"}, trickle)
    started = time.monotonic()
    with pytest.raises(url_fetch.FetchError) as err:
        url_fetch.fetch(site.base + "/slow", tmp_path, 2**20, allow_private=True, seconds=1.5)
    took = time.monotonic() - started
    assert err.value.reason == "timeout"
    assert 1.4 < took < 3.0, took


# ---------------------------------------------------------------------------
# SSRF


def test_loopback_is_refused_unless_the_kb_allows_private_addresses(site, tmp_path,
                                                                    only_loopback):
    site.routes["/"] = (200, {}, b"<p>intranet</p>")
    kb = make_kb(tmp_path, allow_private=False)
    with pytest.raises(url_fetch.FetchError) as err:
        ingest.ingest_url(kb, site.base + "/")
    assert err.value.reason == "refused-address"
    assert "allowPrivate" in str(err.value) and url_fetch.ALLOW_PRIVATE_ENV in str(err.value)
    assert site.requests == [] and only_loopback == []


def test_a_public_looking_name_that_resolves_to_loopback_is_refused(site, tmp_path,
                                                                  monkeypatch, only_loopback):
    port = site.base.rsplit(":", 1)[1]
    monkeypatch.setattr(url_fetch, "resolver", lambda host, p: ["127.0.0.1"])
    with pytest.raises(url_fetch.FetchError) as err:
        url_fetch.fetch(f"http://docs.example.com:{port}/", tmp_path, 2**20)
    assert "docs.example.com resolves to 127.0.0.1, a loopback address" in str(err.value)
    assert only_loopback == []
    # the same name with private addresses allowed reaches the checked address, not a new
    # lookup's: the page comes from 127.0.0.1
    site.routes["/"] = (200, {}, b"<p>reached</p>")
    got = url_fetch.fetch(f"http://docs.example.com:{port}/", tmp_path, 2**20, True)
    assert got.file.read_bytes() == b"<p>reached</p>"
    assert only_loopback == ["127.0.0.1"]


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/",
                                    "http://[fd00:ec2::254]/latest/meta-data/",
                                    "http://169.254.10.1/", "http://[::ffff:169.254.169.254]/"])
def test_a_redirect_to_a_metadata_or_link_local_address_stays_refused(site, tmp_path,
                                                                      monkeypatch, target,
                                                                      only_loopback):
    monkeypatch.setenv(url_fetch.ALLOW_PRIVATE_ENV, "1")  # lifts loopback/private only
    site.routes["/innocent"] = (302, {"Location": target}, b"")
    kb = make_kb(tmp_path, allow_private=True)
    with pytest.raises(url_fetch.FetchError) as err:
        ingest.ingest_url(kb, site.base + "/innocent")
    assert err.value.reason == "refused-address"
    assert "metadata" in str(err.value) or "link-local" in str(err.value)
    assert only_loopback == ["127.0.0.1"]  # the first hop only


@pytest.mark.parametrize(("address", "private_ok", "refused"), [
    ("8.8.8.8", False, None), ("127.0.0.1", False, "a loopback"), ("127.0.0.1", True, None),
    ("10.1.2.3", False, "a private"), ("192.168.1.1", True, None),
    ("100.64.0.1", False, "a private"), ("::1", False, "a loopback"),
    ("fe80::1%eth0", True, "a link-local"), ("224.0.0.1", True, "a multicast"),
    ("0.0.0.0", True, "an unspecified"),
    ("169.254.169.254", True, "a cloud metadata"), ("::ffff:10.0.0.1", False, "a private"),
])
def test_address_policy(address, private_ok, refused):
    problem = url_fetch.address_problem(address, private_ok)
    assert (problem is None) == (refused is None)
    if refused:
        assert problem.startswith(refused)


def test_bad_urls_are_refused_with_what_to_give():
    for url, said in (("ftp://host/file", "http:// or https://"), ("file:///etc/passwd", "http"),
                      ("http://user:pw@host/", "without credentials"), ("https://", "http"),
                      ("http://" + "a" * 3000, "1-2,048 characters"),
                      ("https://example.org/" + "a" * 1_000_000, "1-2,048 characters")):
        with pytest.raises(url_fetch.FetchError, match=said):
            url_fetch.normalise(url)


# ---------------------------------------------------------------------------
# the command line


def test_ingest_py_takes_a_url(site, tmp_path):
    site.routes["/howto"] = (200, {"Content-Type": "text/html"}, PAGE)
    kb = make_kb(tmp_path)
    env = clean_env(LINECITE_URL_ALLOW_PRIVATE="1")
    done = subprocess.run([sys.executable, str(REPO / "ingest.py"), site.base + "/howto",
                           "--kb", "web", "--base-path", str(kb.folder.parent), "--quiet"],
                          capture_output=True, text=True, encoding="utf-8", env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["indexed"] == 1
    assert lines_of(kb, site.base + "/howto")[0] == "Setting up the relay"
    refused = subprocess.run([sys.executable, str(REPO / "ingest.py"), site.base + "/howto",
                              "--kb", "strict", "--base-path", str(kb.folder.parent)],
                             capture_output=True, text=True, encoding="utf-8",
                             env=clean_env(), timeout=120)
    assert refused.returncode == 2 and "a loopback address" in refused.stderr
