"""Check an install, quickly after pip, or the way a user's first hour goes.

    .venv/bin/python verify_install.py               # server.py starts over stdio, lists tools
    .venv/bin/python verify_install.py --first-hour  # tokenize, Chroma, index, search, read back
    .venv\\Scripts\\python verify_install.py --first-hour    # Windows (install.ps1 -SelfTest)

The quick check prints the tool names, one a line, and exits 1 when the server does not answer
or lists fewer than 6 tools; install.sh and install.ps1 run it after pip.

`--first-hour` (also `linecite selftest`, and install.ps1 -SelfTest) does what a new user does,
under the base folder the MCP host uses (the one its config names, else this shell's):
tokenize Hangul and Han, round-trip a Chroma collection, index a DOCX and a text PDF it writes
itself with ingest.py, start server.py over stdio as a host does, search in every mode and
read a hit back. One `PASS  what` or `FAIL  what -- fix: ...` line a step; exit 1 on a FAIL.
Its KB (`linecite-selftest`) and files are removed afterwards.

Layer: installer helper (beside install.ps1/install.sh), above the config layer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common.commands import pip_install

HERE = Path(__file__).resolve().parent.parent  # the checkout: setup/ sits in it
MIN_TOOLS = 6
KB_ID = "linecite-selftest"
MARKER = ".made-by-verify-install"  # a KB folder holding it is ours to delete
MODES = ("auto", "bm25", "vector", "exact")
DOCX_LINES = ("The harbour crane inspection is due on Tuesday.", "항만 크레인 점검은 화요일입니다.")
PDF_LINES = ("Quarterly budget for the lighthouse restoration.", "Approved by the port board.")
QUERIES = {  # mode -> (query, the sample it must find)
    "auto": ("크레인 점검", "selftest.docx"),
    "bm25": ("harbour crane inspection", "selftest.docx"),
    "vector": ("money for repairing the lighthouse", "selftest.pdf"),
    "exact": ("lighthouse restoration", "selftest.pdf"),
}
STEP_SECONDS = 300.0  # the most one step may take (a first start on a slow disk)
LOADING_PAUSE = 0.5  # between searches while the server says its meaning index still loads
REINSTALL = pip_install("requirements.txt")


async def tool_names(server: Path, timeout: float, env: dict | None = None) -> list[str]:
    """Spawn `server` on stdio with this interpreter, as an MCP host would, and list its tools."""
    async with stdio_client(server, timeout, env) as client:
        tools = await client.list_tools()
    return sorted(tool.name for tool in tools)


def stdio_client(server: Path, timeout: float, env: dict | None = None, log: Path | None = None):
    """A fastmcp Client on `server` over stdio (not yet entered)."""
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    # The MCP stdio client passes only a few variables on by default: keep LINECITE_HOME & co.
    transport = StdioTransport(command=sys.executable, args=[str(server)],
                               env=dict(os.environ if env is None else env),
                               cwd=str(server.parent), keep_alive=False, log_file=log)
    return Client(transport, timeout=timeout)


def quick(server: Path, min_tools: int, timeout: float) -> int:
    """The check the installers run after pip: the server lists its tools over stdio."""
    try:
        names = asyncio.run(asyncio.wait_for(tool_names(server, timeout), timeout))
    except Exception as err:  # any failure to start or answer is the one thing to report
        print(f"linecite verify: FAILED: {server} did not answer tools/list over stdio "
              f"({type(err).__name__}: {err})", file=sys.stderr)
        return 1
    for name in names:
        print(name)
    if len(names) < min_tools:
        print(f"linecite verify: FAILED: {len(names)} tools listed, expected at least "
              f"{min_tools}", file=sys.stderr)
        return 1
    print(f"linecite verify: OK, {len(names)} tools", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------- sample files


def write_docx(path: Path, lines: tuple[str, ...]) -> None:
    """The smallest DOCX Word and docx2python open: one paragraph a line."""
    from xml.sax.saxutils import escape

    body = "".join(f"<w:p><w:r><w:t>{escape(text)}</w:t></w:r></w:p>" for text in lines)
    ns = "http://schemas.openxmlformats.org"
    parts = {
        "[Content_Types].xml": (
            f'<Types xmlns="{ns}/package/2006/content-types"><Default Extension="rels" '
            f'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/><Override '
            'PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
            'officedocument.wordprocessingml.document.main+xml"/></Types>'),
        "_rels/.rels": (
            f'<Relationships xmlns="{ns}/package/2006/relationships"><Relationship Id="rId1" '
            f'Type="{ns}/officeDocument/2006/relationships/officeDocument" '
            'Target="word/document.xml"/></Relationships>'),
        "word/document.xml": (
            f'<w:document xmlns:w="{ns}/wordprocessingml/2006/main"><w:body>{body}</w:body>'
            '</w:document>'),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in parts.items():
            archive.writestr(name, '<?xml version="1.0" encoding="UTF-8"?>' + text)


def write_pdf(path: Path, lines: tuple[str, ...]) -> None:
    """A one-page PDF with real text (Helvetica, Latin-1 lines): what a text PDF reader sees."""
    shown = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
    stream = "\n".join(["BT", "/F1 12 Tf", "72 720 Td", "16 TL",
                        *(f"({line}) Tj T*" for line in shown), "ET"]).encode("latin-1")
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
               b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica "
               b"/Encoding /WinAnsiEncoding >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    path.write_bytes(bytes(out))


# ----------------------------------------------------------------------------- the steps


class StepFailed(Exception):
    """A step's failure; the message says what went wrong (the step carries the fix)."""


@dataclass
class Run:
    """What the steps share: the base folder, the server's log and what was found."""

    base: Path
    from_host: bool = False  # the base came from the host's config (else given, or this shell's)
    hits: dict[str, dict] = field(default_factory=dict)
    seen: dict[str, str] = field(default_factory=dict)  # served step -> what it saw

    @property
    def kb_dir(self) -> Path:
        return self.base / KB_ID

    @property
    def docs(self) -> Path:
        return self.base / f".{KB_ID}-docs"

    @property
    def log(self) -> Path:
        return self.base / "logs" / "selftest-server.log"

    def env(self) -> dict[str, str]:
        return {**os.environ, "LINECITE_HOME": str(self.base)}


@dataclass
class Step:
    what: str
    fix: str
    run: Callable[[Run], str]  # returns what it saw; raises on failure


def host_base() -> tuple[Path, str]:
    """The base folder the MCP host uses: the LINECITE_HOME its config gives linecite, else
    this process's (what the installers would write), with where it came from."""
    from common import paths
    from setup import mcp_config
    for config in mcp_config.claude_config_paths():
        try:
            entry = json.loads(config.read_text(encoding="utf-8-sig"))["mcpServers"]["linecite"]
            return Path(entry["env"]["LINECITE_HOME"]), f"from {config}"
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return paths.default_base_path(), "this shell's"


def check_base(run: Run) -> str:
    """The base folder exists (or can be made), takes a file, and is this shell's too."""
    from common import paths
    run.base.mkdir(parents=True, exist_ok=True)
    probe = run.base / f".selftest-{os.getpid()}"
    probe.write_text("ok", encoding="utf-8")
    probe.unlink()
    here = paths.default_base_path()
    same = os.path.normcase(str(here.resolve())) == os.path.normcase(str(run.base.resolve()))
    if run.from_host and not same:
        raise StepFailed(f"the host uses {run.base}, but this shell's commands use {here}: "
                         "set LINECITE_HOME to the host's folder, or run the installer again "
                         "so the host config and the launcher agree")
    return str(run.base)


def check_tokenize(run: Run) -> str:
    """Kiwi splits Hangul into morphemes, jieba splits Han and PyStemmer stems English: the
    BM25 leg works."""
    from index import segment
    korean, chinese = segment.tokens("서울에서 회의를 했다"), segment.tokens("人工智能研究")
    english = segment.prose_tokens("connected connecting")
    if "서울" not in korean or "서울에서" in korean:
        raise StepFailed(f"Kiwi gave {korean} for 서울에서 회의를 했다")
    if not {"人工", "智能"} <= set(chinese):
        raise StepFailed(f"jieba gave {chinese} for 人工智能研究")
    if english != [segment.STEM_MARK + "connect"] * 2:
        raise StepFailed(f"the stemmer gave {english} for connected connecting")
    return f"{' '.join(korean)} | {' '.join(chinese)} | {' '.join(english)}"


def check_chroma(run: Run) -> str:
    """A Chroma collection under the base folder takes vectors and gives them back."""
    import chromadb

    folder = run.base / f".selftest-chroma-{os.getpid()}"
    try:
        client = chromadb.PersistentClient(path=str(folder))
        collection = client.get_or_create_collection("selftest")
        collection.add(ids=["a", "b"], embeddings=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
                       documents=["항만", "灯塔"])
        found = collection.query(query_embeddings=[[0.9, 0.1, 0.0]], n_results=1)
        if found["ids"] != [["a"]] or found["documents"] != [["항만"]]:
            raise StepFailed(f"the nearest vector came back as {found['ids']}")
        client.delete_collection("selftest")
        return f"chromadb {chromadb.__version__} at {folder.parent}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # Windows may hold a file for a moment


def check_index(run: Run) -> str:
    """ingest.py indexes a DOCX and a text PDF into the self-test KB, as a user's first run."""
    if run.kb_dir.exists() and not (run.kb_dir / MARKER).exists():
        raise StepFailed(f"{run.kb_dir} exists and was not made by this check; rename it")
    remove(run)
    run.kb_dir.mkdir(parents=True)
    (run.kb_dir / MARKER).write_text("verify_install.py --first-hour\n", encoding="utf-8")
    run.docs.mkdir(parents=True)
    write_docx(run.docs / "selftest.docx", DOCX_LINES)
    write_pdf(run.docs / "selftest.pdf", PDF_LINES)
    done = subprocess.run([sys.executable, str(HERE / "ingest.py"), str(run.docs), "--kb",
                           KB_ID, "--once", "--quiet"], env=run.env(), cwd=str(HERE),
                          capture_output=True, text=True, encoding="utf-8", errors="replace",
                          timeout=STEP_SECONDS, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise StepFailed(f"ingest.py exited {done.returncode}: {done.stderr.strip()[-600:]}")
    summary = json.loads(done.stdout)
    if summary.get("indexed") != 2 or summary.get("failed") or not summary.get("chunks"):
        raise StepFailed("ingest.py did not index both files: "
                         f"{json.dumps(summary, ensure_ascii=False)[:600]}")
    return "selftest.docx, selftest.pdf"


async def serve_and_search(run: Run) -> str:
    """Start server.py over stdio with the host's base folder; search in every mode, read
    the first hit back. Each step that passed is in run.seen; a failure raises StepFailed."""
    run.log.parent.mkdir(parents=True, exist_ok=True)
    seen = run.seen
    async with stdio_client(HERE / "server.py", STEP_SECONDS, run.env(), run.log) as client:
        names = [tool.name for tool in await client.list_tools()]
        if len(names) < MIN_TOOLS:
            raise StepFailed(f"{len(names)} tools listed")
        seen["server"] = f"{len(names)} tools"
        for mode, (query, wanted) in QUERIES.items():
            result = await search_once_loaded(client, {"query": query, "search_mode": mode,
                                                       "kb_id": KB_ID})
            content = result.structured_content or {}
            hits = content.get("hits") or []
            if content.get("degraded"):  # e.g. vector search fell back to BM25 alone
                raise StepFailed(f"search {mode} is degraded: {content['degraded']}")
            if result.is_error or not hits or not hits[0]["source"].endswith(wanted):
                shown = [(h["source"], h["text"][:40]) for h in hits[:3]]
                raise StepFailed(f"{query!r} gave {shown or result.content}")
            run.hits[mode] = hits[0]
            seen[f"search {mode}"] = f"{query!r} -> {hits[0]['source']} p{hits[0]['page']}"
        hit = run.hits["bm25"]
        read = await client.call_tool("read_range", {
            "source": hit["source"], "page": hit["page"], "line_start": hit["line_start"],
            "line_end": hit["line_end"], "kb_id": KB_ID}, raise_on_error=False)
        lines = (read.structured_content or {}).get("lines") or []
        if "\n".join(line["text"] for line in lines) != hit["text"]:
            raise StepFailed(f"read_range gave {lines[:3]} for {hit['text']!r}")
        seen["read back"] = f"{hit['source']} lines {hit['line_start']}-{hit['line_end']}"
    return "served"


async def search_once_loaded(client, arguments: dict):
    """The search's answer once the server's warm-up has loaded the meaning index: a search
    in the first seconds answers from keywords alone, saying the index is still loading
    (issue 45), which is no failure of the install; a user searches again, and so does this."""
    deadline = time.monotonic() + STEP_SECONDS
    while True:
        result = await client.call_tool("search", arguments, raise_on_error=False)
        degraded = (result.structured_content or {}).get("degraded") or ""
        if "still loading" not in degraded or time.monotonic() > deadline:
            return result
        await asyncio.sleep(LOADING_PAUSE)


def remove(run: Run) -> None:
    """Delete the self-test KB and files (only a KB folder holding this check's marker)."""
    if run.kb_dir.exists() and (run.kb_dir / MARKER).exists():
        shutil.rmtree(run.kb_dir, ignore_errors=True)
    shutil.rmtree(run.docs, ignore_errors=True)


FIX_LOG = "read {log}; run the installer again if it names a missing package"
STEPS = [
    Step("the base folder the MCP host uses", "set LINECITE_HOME to a writable folder outside "
         "AppData, then run the installer again (it writes the host config and the launcher)",
         check_base),
    Step("tokenize Hangul (Kiwi), Han (jieba) and English (Snowball)",
         f"reinstall the requirements: {REINSTALL}", check_tokenize),
    Step("Chroma round-trip", f"reinstall the requirements: {REINSTALL}; on Windows also "
         "winget install Microsoft.VCRedist.2015+.x64", check_chroma),
    Step("index a DOCX and a text PDF (ingest.py)", "read the error above; `linecite ingest "
         "FILE` on one of your own files shows the same", check_index),
]
SERVED = ["server", *(f"search {mode}" for mode in MODES), "read back"]
SERVED_WHAT = {"server": "server.py over stdio lists its tools",
               "read back": "read_range returns a hit's lines"}


def say(ok: bool, what: str, detail: str, fix: str) -> None:
    if ok:
        print(f"PASS  {what}: {detail}", flush=True)
    else:
        print(f"FAIL  {what}: {detail} -- fix: {fix}", flush=True)


def first_hour(base: Path | None = None, keep: bool = False) -> int:
    """Every step with its PASS/FAIL line; a step after a failed one it needs fails too."""
    where = "given"
    if base is None:
        base, where = host_base()
    run, failed = Run(base, from_host=where.startswith("from ")), 0
    print(f"linecite self-test under {base} ({where})", flush=True)
    try:
        indexed = False
        for step in STEPS:
            ok, detail = call(step.run, run)
            say(ok, step.what, detail, step.fix)
            failed += not ok
            indexed = ok if step.run is check_index else indexed
        fix = FIX_LOG.format(log=run.log)
        ok, why = False, "not run: the index step failed"
        if indexed:
            ok, why = call(lambda r: asyncio.run(serve_and_search(r)), run)
        for name in SERVED:
            what = SERVED_WHAT.get(name, f"{name} finds its sample")
            if name in run.seen:
                say(True, what, run.seen[name], fix)
            else:
                say(False, what, why, fix)
                why = "not run: a step above failed"
        return 0 if ok and not failed else 1
    finally:
        if not keep:
            remove(run)
        if run.kb_dir.exists() and not keep:
            print(f"note: {run.kb_dir} could not be deleted yet (a running host holds it); "
                  "delete it later", flush=True)


def call(step: Callable[[Run], object], run: Run) -> tuple[bool, object]:
    """(True, what it returned) or (False, why), timing the step."""
    started = time.monotonic()
    try:
        result = step(run)
    except StepFailed as err:
        return False, str(err)
    except Exception as err:  # any other failure is reported with its type, not a traceback
        return False, f"{type(err).__name__}: {str(err)[:600]}"
    if isinstance(result, str):
        result = f"{result} ({time.monotonic() - started:.1f} s)"
    return True, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", type=Path, default=HERE / "server.py")
    parser.add_argument("--min-tools", type=int, default=MIN_TOOLS)
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for the server (a fresh venv's first start is slow)")
    parser.add_argument("--first-hour", action="store_true",
                        help="tokenize, Chroma, index, search every mode and read back")
    parser.add_argument("--base", type=Path, default=None,
                        help="with --first-hour: this base folder instead of the host's")
    parser.add_argument("--keep", action="store_true",
                        help="with --first-hour: keep the self-test KB to look at")
    args = parser.parse_args(argv)
    if args.first_hour:
        return first_hour(args.base, args.keep)
    return quick(args.server, args.min_tools, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
