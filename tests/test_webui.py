"""The web page (webui.py, webui/) in a real browser: Debian's chromium, headless, driven by
selenium through chromium-driver, against the real HTTP server (`server.py --transport
http`) over a temp base folder indexed by the real `ingest.py`.

What a person does there: see the KBs and why a file failed, add a folder and watch it
index, search in every mode, open a hit's lines and copy the citation. And what must not
happen: a hostile file name or line running script, a page of another origin changing a
setting. Screenshots go to $LINECITE_ARTEFACTS (else a temp folder); the README shows the
copies in docs/screenshots/.
"""

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.conftest import clean_env, free_port, image_pdf, stop_process

selenium = pytest.importorskip("selenium", reason="selenium (requirements-dev.txt) drives "
                                                   "the browser")
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
HOSTILE = "<img src=x onerror=alert(1)>.txt"  # a file name that is markup
SCRIPT_LINE = '<script>alert("x")</script> stays text'
WAIT = 30  # seconds any one thing may take to show up

pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and "
                                "chromium-driver (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Folder a/ (indexed before the page opens: a good file, a corrupt .docx, markup in a
    name and in a line, an empty `__init__.py`, minutes to remove) and c/ (Korean and
    Chinese, added from the page)."""
    root = tmp_path_factory.mktemp("webui-corpus")
    (root / "a").mkdir()
    (root / "a" / "notes.txt").write_text(
        "The quarterly budget review is on Monday.\nAlpha line two about the budget.\n"
        f"{SCRIPT_LINE}\n", encoding="utf-8")
    (root / "a" / "broken.docx").write_bytes(b"PK\x03\x04 this is no docx")
    (root / "a" / "__init__.py").write_bytes(b"")
    (root / "a" / "old-minutes.txt").write_text("Minutes of the zeppelin hangar visit.\n",
                                                encoding="utf-8")
    if os.name != "nt":  # Windows allows no < > in a file name
        (root / "a" / HOSTILE).write_text("hostile name file about the budget\n",
                                          encoding="utf-8")
    (root / "c").mkdir()
    (root / "c" / "cjk.txt").write_text("서울의 예산 회의는 월요일에 열립니다.\n"
                                        "北京的预算会议在星期一举行。\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def base(corpus, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("webui-base")
    done = subprocess.run([sys.executable, "ingest.py", str(corpus / "a"), "--kb", "notes",
                           "--base-path", str(base), "--quiet"], cwd=ROOT, env=clean_env(),
                          capture_output=True, timeout=120)
    assert done.returncode == 1, done.stderr  # EXIT_SOME_FILES: the corrupt .docx, on purpose
    return base


def start_server(base: Path, log: Path, **env: str) -> tuple[subprocess.Popen, str]:
    """`server.py --transport http` on a free loopback port, once its page answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "server.py", "--transport", "http", "--port",
                             str(port), "--base-path", str(base)], cwd=ROOT,
                            env=clean_env(LINECITE_WARM_UP="0", **env),
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    url = f"http://127.0.0.1:{port}/"
    wait_for_page(url, proc, log)
    return proc, url


def wait_for_page(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited: {log.read_text(encoding='utf-8')[-2000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    pytest.fail(f"no page at {url} after {WAIT} s")


@pytest.fixture(scope="module")
def server(base, tmp_path_factory):
    proc, url = start_server(base, tmp_path_factory.mktemp("webui-log") / "server.log",
                             LINECITE_OCR_WORKERS="1")  # a scan's pages are done one by one
    yield url
    stop_process(proc)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("LINECITE_ARTEFACTS") or tmp_path_factory.mktemp("artefacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def wait(driver, condition, timeout: float = WAIT):
    """Until `condition` holds; an element redrawn under a look is looked for again."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=[
        NoSuchElementException, StaleElementReferenceException]).until(condition)


def no_alert(driver) -> None:
    """No dialog opened: a script the page was tricked into running would call alert()."""
    with pytest.raises(TimeoutException):
        WebDriverWait(driver, 0.5).until(ec.alert_is_present())


def kb_card(driver, kb_id: str):
    return wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, f'.kb[data-kb="{kb_id}"]'))


def count_shown(driver, kb_id: str, key: str) -> int:
    card = kb_card(driver, kb_id)
    return int(card.find_element(By.CSS_SELECTOR, f'[data-count="{key}"] b').text)


def tab(driver, name: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'[data-tab="{name}"]').click()


def test_page_shows_the_kbs_and_why_a_file_failed(server, browser, shots, corpus):
    browser.get(server)
    card = kb_card(browser, "notes")
    assert "ready" in card.find_element(By.CSS_SELECTOR, ".badge").text
    wanted = 5 if os.name != "nt" else 4
    assert count_shown(browser, "notes", "sources") == wanted
    assert str(corpus / "a") in card.find_element(By.CSS_SELECTOR, ".folders").text
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-states svg rect")  # a chart is drawn
    browser.save_screenshot(str(shots / "knowledge-bases.png"))

    tab(browser, "sources")
    group = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, '[data-reason="corrupt"]'))
    assert "a/broken.docx" in group.text
    assert "re-save or re-export it" in group.find_element(By.CSS_SELECTOR, ".fix").text
    assert group.find_element(By.CSS_SELECTOR, "button.retry").text == "Retry"
    names = [td.text for td in wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR,
                                                                        "#source-table td.name"))]
    if os.name != "nt":  # the hostile name is shown as text, and made no element
        assert f"a/{HOSTILE}" in names
        assert not browser.find_elements(By.CSS_SELECTOR, "#source-table img, #problems img")
    no_alert(browser)
    browser.save_screenshot(str(shots / "sources.png"))


def test_retry_of_a_failed_file_runs_ingest_and_keeps_the_reason(server, browser):
    """Retry calls ingest_file on the file; still corrupt, it stays failed with its reason."""
    group = browser.find_element(By.CSS_SELECTOR, '[data-reason="corrupt"]')
    group.find_element(By.CSS_SELECTOR, "button.retry").click()
    wait(browser, lambda d: "a/broken.docx still fails: corrupt: " in d.find_element(
        By.ID, "status").text)
    assert "a/broken.docx" in wait(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, '[data-reason="corrupt"]')).text


def test_add_a_folder_and_watch_it_index(server, browser, base, corpus, shots):
    tab(browser, "kbs")
    card = kb_card(browser, "notes")
    field = card.find_element(By.CSS_SELECTOR, ".add-folder input")
    field.send_keys(str(corpus / "c"))
    card.find_element(By.CSS_SELECTOR, ".add-folder button").click()
    wait(browser, lambda d: str(corpus / "c") in kb_card(d, "notes").find_element(
        By.CSS_SELECTOR, ".folders").text)
    config = json.loads((base / "notes" / "config.json").read_text(encoding="utf-8"))
    assert config["sourcePaths"] == [str(corpus / "a"), str((corpus / "c").resolve())]

    before = count_shown(browser, "notes", "sources")
    kb_card(browser, "notes").find_element(By.CSS_SELECTOR, "button.start-reindex").click()
    seen, shot = set(), False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            badge = kb_card(browser, "notes").find_element(By.CSS_SELECTOR, ".badge").text
            seen.add(badge)
            if badge in ("running", "queued") and not shot:
                browser.save_screenshot(str(shots / "indexing.png"))
                shot = True
            if count_shown(browser, "notes", "sources") == before + 1 and badge == "ready":
                break
        except Exception:  # noqa: BLE001 - the card was redrawn between two looks
            pass
        time.sleep(0.2)
    assert count_shown(browser, "notes", "sources") == before + 1, seen
    assert seen & {"running", "queued"}, f"never saw the run going: {seen}"
    last = kb_card(browser, "notes").find_element(By.CSS_SELECTOR, ".last-run").text
    assert "1 indexed" in last and "finished" in last
    # the timeline, newest first: this reindex, the Retry's ingest_file, the first ingest.py
    runs = browser.find_elements(By.CSS_SELECTOR, "#chart-runs svg rect")
    assert [r.get_attribute("data-outcome") for r in runs] == ["finished"] * 3
    texts = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#chart-runs .run-text")]
    first = 3 if os.name != "nt" else 2  # the corrupt .docx and empty __init__.py are not
    assert [t.rsplit(", ", 1)[1] for t in texts] == ["1 indexed", "0 indexed", f"{first} indexed"]


ROW_BOXES = """
const chart = arguments[0];
const box = (node) => {
  const r = node.getBoundingClientRect();
  return [r.left, r.right, r.top, r.bottom];
};
const bars = [...chart.querySelectorAll("rect")];
const labels = [...chart.querySelectorAll("text")].filter((t) => t.getAttribute("x") === "0");
return labels.map((label, i) => [label.firstChild.textContent, box(label), box(bars[i])]);
"""  # each row of an SVG chart: its label's text (the text at x=0), its box and its bar's box


def overlapping(driver, chart) -> list:
    """The rows of `chart` whose label's box and bar's box intersect, as the browser laid
    them out."""
    rows = driver.execute_script(ROW_BOXES, chart)
    assert rows
    return [(text, label, bar) for text, label, bar in rows
            if label[1] > bar[0] and label[0] < bar[1] and label[3] > bar[2] and label[2] < bar[3]]


def test_no_chart_label_runs_into_its_bar(server, browser):
    """Regression (issue 49): "pending_embedding" ran into its bar (a fixed 120 px label
    column); the label column is now as wide as the page's font draws the longest label."""
    tab(browser, "kbs")
    states = browser.execute_script(
        "const chart = barChart([{label: 'pending_embedding', value: 3}, {label: 'ready',"
        " value: 40}, {label: 'needs_action', value: 1}, {label: 'a-knowledge-base-with-a-"
        "long-name-that-goes-on', value: 9}], '#1f6feb');"
        "document.querySelector('#chart-states').replaceChildren(chart); return chart;")
    assert overlapping(browser, states) == []
    runs = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#chart-runs svg"))
    assert overlapping(browser, runs) == []


def test_a_run_s_time_reads_the_same_on_its_kb_card_and_in_the_timeline(server, browser):
    """Regression (issue 49): the card said "at 2026-12-04T23:18:17+00:00" and the timeline
    "Dec 4, 11:18 PM" for one run; both go through app.js's when() now."""
    tab(browser, "kbs")
    card = kb_card(browser, "notes").find_element(By.CSS_SELECTOR, ".last-run time")
    newest = browser.find_element(By.CSS_SELECTOR, "#chart-runs text.label .when")
    assert card.text == newest.text.strip() == browser.execute_script(
        "return when(arguments[0])", card.get_attribute("datetime"))
    assert not re.search(r"\d{4}-\d\d-\d\dT", card.text), card.text  # a person's date


def test_korean_and_chinese_are_named_in_every_font_stack(server, browser):
    """Regression (issue 49): the cited lines' monospace stack named no CJK font Windows or
    macOS ships, so Hangul and Han fell to whatever the browser picked."""
    for selector in ("html", "#reader-lines", "#citation"):
        stack = browser.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0])).fontFamily", selector)
        for font in ("Malgun Gothic", "Microsoft YaHei", "Apple SD Gothic Neo", "PingFang SC",
                     "Noto Sans CJK KR", "Noto Sans CJK SC"):
            assert f'"{font}"' in stack, (selector, stack)


def search(driver, query: str, mode: str) -> list:
    form = driver.find_element(By.ID, "search-form")
    Select(form.find_element(By.NAME, "mode")).select_by_value(mode)
    box = form.find_element(By.NAME, "query")
    box.clear()
    box.send_keys(query)
    driver.execute_script("document.querySelector('#hits').replaceChildren()")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    return wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#hits .hit")
                or d.find_elements(By.CSS_SELECTOR, "#hits p"))


@pytest.mark.parametrize("mode, query, source, marked", [
    ("auto", "예산", "c/cjk.txt", "예산"),
    ("bm25", "budget", "a/notes.txt", "budget"),
    ("vector", "budget review meeting", None, None),
    ("exact", "<script>", "a/notes.txt", "<script>"),
])
def test_search_in_each_mode(server, browser, mode, query, source, marked):
    tab(browser, "search")
    hits = search(browser, query, mode)
    places = [h.find_element(By.CSS_SELECTOR, ".where").text for h in hits]
    assert places and all(", page 1, lines " in p for p in places), places
    if source:
        hit = next(h for h, p in zip(hits, places, strict=True) if p.startswith(source))
        assert marked in [m.text for m in hit.find_elements(By.TAG_NAME, "mark")]
    if mode == "exact":  # the line's tag is shown, not run
        assert SCRIPT_LINE in hit.find_element(By.TAG_NAME, "pre").text
        assert not browser.find_elements(By.CSS_SELECTOR, "#hits script")
        no_alert(browser)


def test_open_a_hit_and_copy_its_citation(server, browser, shots):
    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": server.rstrip("/"), "permissions": ["clipboardReadWrite",
                                                      "clipboardSanitizedWrite"]})
    hits = search(browser, "budget", "bm25")
    next(h for h in hits if "a/notes.txt" in h.text).click()
    reader = wait(browser, lambda d: d.find_element(By.ID, "reader-lines").find_elements(
        By.CSS_SELECTOR, "li.cited"))
    assert [li.get_attribute("value") for li in reader][:2] == ["1", "2"]
    browser.find_element(By.ID, "copy-citation").click()
    wait(browser, lambda d: d.find_element(By.ID, "copy-state").text == "Copied")
    copied = browser.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], e => arguments[0]('ERR ' + e))")
    lines = copied.splitlines()
    assert lines[0].startswith("a/notes.txt, page 1, lines 1-")
    assert lines[1] == "> The quarterly budget review is on Monday."
    assert f"> {SCRIPT_LINE}" in lines  # the cited lines, quoted, markup as written
    no_alert(browser)
    browser.save_screenshot(str(shots / "search.png"))


class Attacker(SimpleHTTPRequestHandler):
    """Another origin's page that posts to the linecite page's API as a form and a fetch."""

    target = ""
    folder = ""

    def do_GET(self):  # noqa: N802 - http.server's name
        page = f"""<!doctype html><form id=f method=post action="{self.target}api/add_folder"
            enctype="text/plain"><input name='{{"kb":"notes","path":"{self.folder}","x":"'
            value='"}}'></form><script>
            fetch("{self.target}api/add_folder", {{method: "POST", mode: "no-cors",
              body: JSON.stringify({{kb: "notes", path: "{self.folder}"}})}});
            document.getElementById("f").submit();</script>"""
        body = page.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_post_from_another_origin_is_refused(server, browser, base, tmp_path):
    config = base / "notes" / "config.json"
    before = config.read_text(encoding="utf-8")
    Attacker.target, Attacker.folder = server, tmp_path.as_posix()
    evil = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        time.sleep(1.5)  # the form and the fetch have gone out and been answered
    finally:
        evil.shutdown()
    assert config.read_text(encoding="utf-8") == before
    assert "Forbidden" in browser.page_source  # the form's answer: http_guards' 403
    origin = server.rstrip("/")
    body = {"kb": "notes", "path": tmp_path.as_posix()}
    refused = [httpx.post(f"{server}api/add_folder", json=body, headers=h) for h in (
        {"Origin": "http://evil.example"},  # another origin
        {"Origin": origin},  # our origin, without the page's token
        {"Origin": origin, "Sec-Fetch-Site": "cross-site", "X-Linecite-Csrf": "x"})]
    assert [r.status_code for r in refused] == [403, 403, 403]
    assert httpx.get(f"{server}api/overview", headers={"Host": "evil.example"}).status_code == 421
    assert config.read_text(encoding="utf-8") == before
    csrf = httpx.get(f"{server}api/session").json()["csrf"]
    allowed = httpx.post(f"{server}api/add_folder", json=body,
                         headers={"Origin": origin, "X-Linecite-Csrf": csrf})
    assert allowed.status_code == 200, allowed.text  # the control: the same POST, with it
    assert tmp_path.as_posix() in config.read_text(encoding="utf-8")


def test_the_page_asks_once_for_the_token(base, browser, tmp_path):
    token = "t0ken-" + "x" * 30
    proc, url = start_server(base, tmp_path / "server.log", LINECITE_HTTP_TOKEN=token)
    try:
        assert httpx.get(f"{url}api/overview").status_code == 401
        browser.get(url)
        box = wait(browser, ec.visibility_of_element_located((By.ID, "token-input")))
        box.send_keys(token + "\n")
        kb_card(browser, "notes")
        browser.refresh()  # kept: no second prompt
        kb_card(browser, "notes")
        assert not browser.find_element(By.ID, "token-box").is_displayed()
    finally:
        browser.execute_script("localStorage.clear()")
        stop_process(proc)


def test_ui_flag_serves_the_page_alone_and_opens_the_browser(base, tmp_path):
    opened = tmp_path / "opened.txt"
    recorder = tmp_path / "browser.py"
    recorder.write_text("import pathlib, sys\npathlib.Path(sys.argv[1]).write_text(sys.argv[2])\n",
                        encoding="utf-8")
    browser_cmd = f"{Path(sys.executable).as_posix()} {recorder.as_posix()} {opened.as_posix()} %s"
    log = tmp_path / "ui.log"
    proc = subprocess.Popen([sys.executable, "server.py", "--ui", "--base-path", str(base)],
                            cwd=ROOT, env=clean_env(BROWSER=browser_cmd),
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    try:
        deadline = time.monotonic() + WAIT
        while not opened.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        url = opened.read_text(encoding="utf-8")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        assert url in log.read_text(encoding="utf-8")
        wait_for_page(url, proc, log)
        assert [k["id"] for k in httpx.get(f"{url}api/overview").json()["knowledge_bases"]] == \
            ["notes"]
        assert httpx.post(f"{url}mcp", json={}).status_code in (404, 405)  # the page alone
    finally:
        stop_process(proc)


def test_a_scans_ocr_shows_its_page_and_percentage(server, browser, corpus, shots):
    scans = corpus / "scans"
    scans.mkdir()
    image_pdf(scans / "scan.pdf", 6)
    browser.get(server)
    card = kb_card(browser, "notes")
    card.find_element(By.CSS_SELECTOR, ".add-folder input").send_keys(str(scans))
    card.find_element(By.CSS_SELECTOR, ".add-folder button").click()
    wait(browser, lambda d: str(scans.resolve()) in kb_card(d, "notes").find_element(
        By.CSS_SELECTOR, ".folders").text)
    kb_card(browser, "notes").find_element(By.CSS_SELECTOR, "button.start-reindex").click()
    seen = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            card = kb_card(browser, "notes")
            shown = [p.text for p in card.find_elements(By.CSS_SELECTOR, ".run .within")]
            if shown and shown[0] not in seen:
                seen.append(shown[0])
                browser.save_screenshot(str(shots / "indexing.png"))
            elif seen and card.find_element(By.CSS_SELECTOR, ".badge").text != "running":
                break
        except Exception:  # noqa: BLE001 - the card was redrawn between two looks
            pass
        time.sleep(0.2)
    assert seen, "the page never showed the scan's OCR progress"
    pages = []
    for text in seen:
        found = re.fullmatch(r"scans/scan\.pdf — OCR page (\d) of 6, (\d+)%", text)
        assert found, seen
        pages.append(int(found.group(1)))
        assert int(found.group(2)) == round(100 * pages[-1] / 6)
    assert pages == sorted(pages), seen
    wait(browser, lambda d: kb_card(d, "notes").find_element(By.CSS_SELECTOR, ".badge").text
         == "ready", timeout=60)
    assert not kb_card(browser, "notes").find_elements(By.CSS_SELECTOR, ".run .within")


def test_remove_a_folder_from_the_page(server, browser, base, corpus):
    browser.get(server)
    config = base / "notes" / "config.json"
    followed = json.loads(config.read_text(encoding="utf-8"))["sourcePaths"]
    gone = str((corpus / "c").resolve())
    assert gone in followed
    folder = next(li for li in kb_card(browser, "notes").find_elements(By.CSS_SELECTOR,
                                                                        ".folders li")
                  if gone in li.text)
    folder.find_element(By.CSS_SELECTOR, "button.remove-folder").click()
    wait(browser, lambda d: gone not in kb_card(d, "notes").find_element(
        By.CSS_SELECTOR, ".folders").text)
    assert browser.find_element(By.ID, "status").text == "folder removed"
    assert json.loads(config.read_text(encoding="utf-8"))["sourcePaths"] == \
        [p for p in followed if p != gone]


def source_row(driver, name: str):
    """The Sources tab's row of source `name`, or None."""
    for row in driver.find_elements(By.CSS_SELECTOR, "#source-table tbody tr"):
        if row.find_element(By.CSS_SELECTOR, "td.name").text == name:
            return row
    return None


def test_an_empty_file_is_listed_as_empty_with_no_ocr_advice(server, browser):
    """Regression (issue 49 item 2): an empty `__init__.py` was a failure filed under "if it
    is a scan, install Tesseract (OCR), then retry"; it is listed as `empty`, and is no
    problem to fix."""
    browser.get(server)
    tab(browser, "sources")
    row = wait(browser, lambda d: source_row(d, "a/__init__.py"))
    assert row.find_element(By.CSS_SELECTOR, ".badge").text == "empty"
    problems = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, '[data-reason="corrupt"]')
                    and d.find_element(By.ID, "problems"))
    assert "a/__init__.py" not in problems.text and "Tesseract" not in problems.text
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-reason="empty"]')


def test_remove_a_source_from_the_page(server, browser, base):
    """Issue 49 item 1: one source is removed from the index with its chunks (no rebuild);
    its file, still in a followed folder, is named as coming back at the next sync."""
    def exact(word: str) -> list:
        return httpx.get(server + "api/search", params={"query": word, "kb": "notes",
                                                         "mode": "exact"}).json()["hits"]

    def writing() -> bool:  # a run of an earlier test still holds the KB's writer lock
        kbs = httpx.get(server + "api/overview").json()["knowledge_bases"]
        return any(kb["index"]["status"] in ("running", "queued") for kb in kbs
                   if kb["id"] == "notes")

    assert [hit["source"] for hit in exact("zeppelin")] == ["a/old-minutes.txt"]
    deadline = time.monotonic() + WAIT
    while writing() and time.monotonic() < deadline:
        time.sleep(0.2)
    browser.get(server)
    tab(browser, "sources")
    wait(browser, lambda d: source_row(d, "a/old-minutes.txt")).find_element(
        By.CSS_SELECTOR, "button.remove-source").click()
    said = wait(browser, lambda d: "removed" in (text := d.find_element(By.ID, "status").text)
                and text or "error" in d.find_element(By.ID, "status").get_attribute("class")
                and text)
    assert said.startswith("a/old-minutes.txt removed from the index; ")
    assert "the next sync indexes it again" in said
    wait(browser, lambda d: source_row(d, "a/notes.txt") and not source_row(
        d, "a/old-minutes.txt"))
    names = [s["name"] for s in httpx.get(server + "api/sources",
                                          params={"kb": "notes"}).json()["sources"]]
    assert "a/old-minutes.txt" not in names and "a/notes.txt" in names
    assert exact("zeppelin") == []
    conn = sqlite3.connect(f"file:{base / 'notes' / 'fulltext.sqlite3'}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*) FROM lines WHERE text LIKE '%zeppelin%'"
                            ).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM chroma_tombstones").fetchone()[0] == 0
    finally:
        conn.close()


def save_settings(driver, **chosen: str) -> str:
    """Pick values in the KB card's settings form, save, and return what the page said."""
    form = kb_card(driver, "notes").find_element(By.CSS_SELECTOR, "form.settings")
    for name, value in chosen.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)
    driver.execute_script("document.querySelector('#status').textContent = ''")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    return wait(driver, lambda d: d.find_element(By.ID, "status").text)


def test_settings_from_the_page_are_checked_then_written(server, browser, base):
    browser.get(server)
    config = base / "notes" / "config.json"
    assert save_settings(browser, fusion="rrf") == "settings saved"
    assert json.loads(config.read_text(encoding="utf-8"))["search"]["fusion"] == "rrf"
    wait(browser, lambda d: "rrf" in kb_card(d, "notes").find_element(By.CSS_SELECTOR,
                                                                       ".counts").text)
    before = config.read_bytes()
    said = save_settings(browser, embedder="ollama", model="")  # ollama needs a model
    assert "field 'embedding.model' is needed for provider 'ollama'" in said
    assert "error" in browser.find_element(By.ID, "status").get_attribute("class")
    browser.execute_script(  # a value the page never offers: the server checks it too
        "const o = document.querySelector('.kb[data-kb=notes] select[name=fusion] option');"
        "o.value = 'average';")
    said = save_settings(browser, embedder="builtin", fusion="average")
    assert "field 'search.fusion' is 'average'; use one of convex, minmax, rrf" in said
    assert config.read_bytes() == before  # both refused: the file as it was
    said = save_settings(browser, embedder="none", fusion="minmax")
    assert said == "the embedder changed: start a reindex with scope 'embedding'"
    data = json.loads(config.read_text(encoding="utf-8"))
    assert data["embedding"] == {"provider": "none"} and data["search"]["fusion"] == "minmax"
