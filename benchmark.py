"""Measure linecite's stages on the team's eval sets, each beside its baseline in one run.

Reads the eval material in ../shared/eval (never copied into the repo); writes nothing.
Each section is a subcommand and a function; others add theirs (ingest, search) the same way.

    python benchmark.py extract [--dir DIR] [--workers N] [--limit N]

`extract` times extract.extract() (the pypdfium2 > pdfminer > pypdf chain) against plain
pypdf over every PDF in DIR (default: the FinanceBench subset, 36 SEC filings) and prints
pages/s and ms/page for both. --workers N runs a spawn-safe process pool of N, which is how
the target (30 pages/s on 2 cores) is met if one process falls short.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path

# -----------------------------------------------------------------------------
SHARED = Path(__file__).resolve().parent.parent / "shared"  # the team's corpus and eval sets
EXTRACT_DIR = SHARED / "eval" / "en" / "financebench-subset" / "pdfs"  # 36 real 10-K/10-Q PDFs
TARGET_PAGES_PER_SECOND = 30.0  # what ingestion must sustain on 2 cores
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


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure linecite's stages on ../shared/eval.")
    sections = parser.add_subparsers(dest="section", required=True)
    ex = sections.add_parser("extract", help="PDF pages/s: extract.py's chain vs pypdf")
    ex.add_argument("--dir", type=Path, default=EXTRACT_DIR, help="folder of PDFs to time")
    ex.add_argument("--workers", type=int, default=1, help="processes (spawn pool when > 1)")
    ex.add_argument("--limit", type=int, default=None, help="time only the first N PDFs")
    ex.set_defaults(run=lambda a: bench_extract(a.dir, max(1, a.workers), a.limit))
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
