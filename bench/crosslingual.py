"""`python -m bench crosslingual`: English questions about a Korean book among English papers.

    python -m bench crosslingual                          # built-in embedder, factors 0 and 0.6
    python -m bench crosslingual --factors 0,0.5,0.6,0.7 --embedding '{"provider": ...}'

Build (once, cached in --cache, default <system temp>/linecite-crosslingual): the Korean
translation of PC Assembly Language (../shared/corpus/pdf/ko/pcasm-book-korean.pdf) and six
English papers on code, CPUs and documents from ../shared/corpus/pdf/en, indexed by
ingest.py's own pipeline. The book's English original is left out: it would answer every
question below in English.

Two sets of questions, both from text nobody here wrote, each searched in `auto` at every
`crossLingual` factor (ranking/fusion.py):
- across languages: the section titles of the English original with at least two words
  ("Avoiding Conditional Branches"), each answered by the Korean book's page where the same
  section number starts (or the next page), read from both tables of contents: hit@5, MRR@10;
- same language: the numbered headings of the English papers ("Trace Stitching"), each
  answered by its own page (either, for a heading printed twice): that page in the top 5,
  and how many of the top 5 are Korean pages (the noise the rule may let in).

Layer: measurement (bench/), on top of the product; nothing of it imports bench/.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "pdf"
KOREAN_BOOK = CORPUS / "ko" / "pcasm-book-korean.pdf"
ENGLISH_BOOK = CORPUS / "en" / "pcasm-book.pdf"  # read for its table of contents only
PAPERS = ["tracemonkey.pdf", "layout-parser-paper-fast.pdf", "multicolumn.pdf",
          "multi-column-2p.pdf", "pdflatex-4-pages.pdf", "TAMReview.pdf"]
TOC_LINE = re.compile(r"^\s*(\d+\.\d+(?:\.\d+)?)\s+(.+?)[\s.]*\s(\d+)\s*$")  # 3.3 Title .. 47
TOC_PAGES = range(1, 9)  # 0-based pages holding either book's table of contents
HEADING = re.compile(r"^(\d+(?:\.\d+)?\.?)\s+([A-Z][^\d]{8,60})$")  # "6.2 Trace Stitching"
TOP = 5


def build(cache: Path, embedding: dict | None):
    """The KB of the Korean book and the papers, under `cache`, one per embedding block."""
    import ingest
    import kb as kbmod
    from common import atomic

    name = "crosslingual"
    if embedding is not None:
        digest = hashlib.sha256(json.dumps(embedding, sort_keys=True).encode()).hexdigest()
        name += f"-{embedding['provider']}-{digest[:8]}"
    kb = kbmod.open_or_create(cache, name)
    if embedding is not None:
        config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
        config["embedding"] = embedding
        atomic.write_json(kb.folder / "config.json", config)
    docs = cache / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for file in [KOREAN_BOOK, *(CORPUS / "en" / paper for paper in PAPERS)]:
        if not (docs / file.name).exists():
            shutil.copy(file, docs / file.name)
    kb = kbmod.load(cache, name)
    summary = ingest.ingest(kb, [docs], progress=True)
    print(f"{name}: {summary.indexed} indexed, {summary.unchanged} unchanged", file=sys.stderr)
    return kb


def toc(pages: list[list[str]]) -> dict[str, tuple[str, int]]:
    """Section number -> (title, printed page) from a book's table of contents."""
    found = {}
    for index in TOC_PAGES:
        for line in pages[index] if index < len(pages) else []:
            match = TOC_LINE.match(line)
            if match:
                found.setdefault(match[1], (match[2].strip(" ."), int(match[3])))
    return found


def across_questions(conn) -> list[tuple[str, set[int]]]:
    """(English section title, the Korean book's pages that answer it)."""
    import fulltext
    from formats.pdf import extract_pdf

    english = toc(extract_pdf(ENGLISH_BOOK).pages)
    name = next(n for (n,) in conn.execute("SELECT name FROM sources")
                if n.endswith(KOREAN_BOOK.name))
    korean_pages = [[text for _, text in fulltext.page_lines(conn, name, page)]
                    for page in range(1, max(TOC_PAGES) + 2)]
    korean = toc(korean_pages)
    offset = _page_offset(conn, name, korean)
    return [(title, {korean[number][1] + offset, korean[number][1] + offset + 1})
            for number, (title, _) in english.items()
            if number in korean and len(title.split()) >= 2]


def _page_offset(conn, name: str, korean: dict[str, tuple[str, int]]) -> int:
    """PDF page minus printed page: where section 3.3's title is printed as a heading."""
    title, printed = korean["3.3"]
    row = conn.execute("SELECT l.page FROM lines l JOIN sources s ON s.id = l.source_id"
                       " WHERE s.name = ? AND l.text = ? AND l.page > ? ORDER BY l.page",
                       (name, f"3.3 {title}", max(TOC_PAGES) + 1)).fetchone()
    return row[0] - printed


def same_questions(conn) -> dict[str, set[tuple[str, int]]]:
    """An English paper's numbered heading -> the (paper, page) places that print it."""
    rows = conn.execute("SELECT s.name, l.page, l.text FROM lines l JOIN sources s"
                        " ON s.id = l.source_id WHERE s.languages IN ('en', 'latin')")
    found: dict[str, set[tuple[str, int]]] = {}
    for name, page, text in rows:
        if match := HEADING.match(text.strip()):
            found.setdefault(match[2].strip(), set()).add((name, page))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="English questions about a Korean book "
                                     "among English papers, at several crossLingual factors.")
    parser.add_argument("--embedding", type=json.loads, default=None,
                        help="the KB's embedding block as JSON (default: the built-in)")
    parser.add_argument("--cache", type=Path,
                        default=Path(tempfile.gettempdir()) / "linecite-crosslingual",
                        help="folder for the built KB (default: %(default)s)")
    parser.add_argument("--factors", type=lambda text: [float(f) for f in text.split(",")],
                        default=[0.0, 0.6], help="crossLingual factors, comma-separated")
    args = parser.parse_args(argv)
    if not KOREAN_BOOK.exists() or not ENGLISH_BOOK.exists():
        print(f"no corpus at {CORPUS}: this reads the team's ../shared/corpus beside the "
              "repo; put it there first", file=sys.stderr)
        return 2
    import chroma_store
    import fulltext
    import kb as kbmod
    import search
    from ranking.request import SearchRequest

    kb = build(args.cache, args.embedding)
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
    try:
        across, same = across_questions(conn), same_questions(conn)
        vectors = {q: store.embed_query(q) for q in [q for q, _ in across] + list(same)}
        searcher = search.Searcher(conn, store)
        print(f"{len(across)} questions across languages, {len(same)} in the same language")
        print(f"{'factor':>6} {'hit@5':>6} {'MRR@10':>7} {'same@5':>7} {'korean in top 5':>16}")
        for factor in args.factors:
            settings = dataclasses.replace(kbmod.search_settings(kb), cross_lingual=factor)
            found = {q: [(h.source, h.page) for h in searcher.search(
                SearchRequest(q, 10, "auto"), settings, {q: vectors[q]})] for q in vectors}
            ranks = [next((n for n, (source, page) in enumerate(found[q], 1)
                           if source.endswith(KOREAN_BOOK.name) and page in wanted), None)
                     for q, wanted in across]
            right = sum(bool(places & set(found[q][:TOP])) for q, places in same.items())
            korean = sum(source.endswith(KOREAN_BOOK.name) for q in same
                         for source, _ in found[q][:TOP])
            hit = sum(r is not None and r <= TOP for r in ranks) / len(ranks)
            print(f"{factor:6.2f} {hit:6.3f} {sum(1 / r for r in ranks if r) / len(ranks):7.3f}"
                  f" {right / len(same):7.3f} {korean / len(same):16.2f}")
    finally:
        store.close()
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
