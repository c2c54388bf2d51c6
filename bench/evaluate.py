"""Retrieval quality of linecite's search on the team's BEIR eval sets, beside its baselines.

    python -m bench quality cmrc-zh                   # dev half of CMRC2018 (848 paragraphs)
    python -m bench quality autorag-ko --split test   # test half of AutoRAG Korean (720 pages)
    python -m bench quality scifact --cache /tmp/lc   # SciFact train qrels = dev, test qrels = test
    python -m bench quality financebench --split all  # 58 questions -> evidence pages of 36 10-Ks

Reads the eval sets in ../shared/eval (never copied into the repo). The first run of a set
builds its KB in <cache>/<set>/ (--cache, default <system temp>/linecite-eval): every corpus
document becomes one source named by its `_id`, with one page whose lines are its title and
its text split on "\n", chunked and tokenized exactly as ingest.py does and embedded with
the built-in USE embedder. A later run reuses that KB; a changed corpus, chunking.py or
segment.py triggers a pass that re-embeds only the chunks whose text changed. FinanceBench
is indexed from its PDFs by ingest.py's own pipeline (every file again, with --force, when
chunking.py or segment.py changed; still only changed chunks are re-embedded), and ranked by
evidence page (`<document>#<0-based page>`) rather than by document. --methods runs only some
methods (bm25 always), for a quicker off/on comparison.

Every query of the split goes through search.Searcher in each method of METHODS; a hit list
becomes a document ranking (each source at its first hit). Prints nDCG@10 and recall@10 per
method and their ratio to BM25 measured in the same run, plus how many queries each method
ranks worse than BM25 does. Progress to stderr, table to stdout.

Layer: measurement (bench/), on top of the product; nothing of it imports bench/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import chroma_store
import chunking
import fulltext
import ingest
import kb as kbmod
import search
from common import atomic
from index import segment
from pipeline.indexer import Indexer
from ranking import hits
from ranking.request import SearchRequest, SearchSettings

# -----------------------------------------------------------------------------
EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"  # the team's eval sets
SETS = {  # name -> (BEIR folder, qrels file of dev, of test; None = a hash half of one file)
    "scifact": (EVAL / "en" / "beir-scifact", "train.tsv", "test.tsv"),
    "autorag-ko": (EVAL / "ko" / "autorag-allganize-ko" / "beir", None, "test.tsv"),
    "cmrc-zh": (EVAL / "zh" / "cmrc2018-dev" / "beir", None, "test.tsv"),
}
PDF_SETS = {  # name -> folder with pdfs/, questions_subset.jsonl and qrels_pages.tsv
    "financebench": EVAL / "en" / "financebench-subset",
}
CUTOFF = 10  # nDCG@10, recall@10
DOC_TOP = 3  # "right document in the top 3" (FinanceBench: the right filing among 36)
HITS = 50  # hits asked of search() per query, so 10 distinct sources are almost always there
KEYWORD_SHARE = 0.05  # "+keywords": a word in more than this share of the chunks is left out
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "linecite-eval"
# -----------------------------------------------------------------------------

Qrels = dict[str, dict[str, int]]  # query id -> {corpus id: relevance}


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_qrels(path: Path) -> Qrels:
    qrels: Qrels = {}
    with path.open(encoding="utf-8") as handle:
        next(handle)  # header: query-id, corpus-id, score
        for line in handle:
            qid, doc, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels.setdefault(qid, {})[doc] = int(score)
    return qrels


def in_dev_half(qid: str) -> bool:
    """A fixed, even split of one qrels file: the parity of the query id's SHA-256."""
    return hashlib.sha256(qid.encode("utf-8")).digest()[0] % 2 == 0


def split_qrels(name: str, split: str) -> Qrels:
    if name in PDF_SETS:
        return page_qrels(PDF_SETS[name] / "qrels_pages.tsv", split)
    folder, dev_file, test_file = SETS[name]
    if split == "all":
        return {**split_qrels(name, "dev"), **split_qrels(name, "test")}
    if dev_file is not None:
        return read_qrels(folder / "qrels" / (dev_file if split == "dev" else test_file))
    qrels = read_qrels(folder / "qrels" / test_file)
    return {q: docs for q, docs in qrels.items() if in_dev_half(q) == (split == "dev")}


def page_qrels(path: Path, split: str) -> Qrels:
    """FinanceBench's evidence pages as `<document>#<0-based page>`, all of relevance 1."""
    qrels: Qrels = {}
    with path.open(encoding="utf-8") as handle:
        next(handle)  # header: query-id, doc_name, page_index0
        for line in handle:
            qid, doc, page = line.rstrip("\n").split("\t")
            if split == "all" or in_dev_half(qid) == (split == "dev"):
                qrels.setdefault(qid, {})[f"{doc}#{page}"] = 1
    return qrels


def page_key(hit: hits.Hit) -> str:
    """A hit as FinanceBench names its evidence: file stem and 0-based page."""
    return f"{Path(hit.source).stem}#{hit.page - 1}"


def source_key(hit: hits.Hit) -> str:
    return hit.source


# ----------------------------------------------------------------------------- build


def doc_pages(doc: dict) -> list[list[str]]:
    """One page: the title line (if any), then the text's lines."""
    title = (doc.get("title") or "").strip()
    return [([title] if title else []) + doc["text"].split("\n")]


def fingerprint(corpus: Path | None) -> str:
    """Changes when the corpus (if given) or the code that decides chunk texts and tokens
    changes."""
    digest = hashlib.sha256(corpus.read_bytes() if corpus else b"")
    for module in (chunking, segment):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def eval_kb(name: str, cache: Path, embedding: dict | None) -> kbmod.KnowledgeBase:
    """The set's KB for one embedder: `<cache>/<set>` for the built-in, else a folder named
    by the embedding block's hash, so two embedders' vectors never share a collection."""
    if embedding is None:
        return kbmod.open_or_create(cache, name)
    digest = hashlib.sha256(json.dumps(embedding, sort_keys=True).encode()).hexdigest()[:8]
    kb = kbmod.open_or_create(cache, f"{name}-{embedding['provider']}-{digest}")
    config = json.loads((kb.folder / "config.json").read_text(encoding="utf-8"))
    if config.get("embedding") != embedding:
        config["embedding"] = embedding
        atomic.write_json(kb.folder / "config.json", config)
    return kbmod.load(cache, kb.id)


def build(name: str, cache: Path, embedding: dict | None = None) -> kbmod.KnowledgeBase:
    """The set's KB, (re)built when its marker file is missing or stale."""
    corpus = SETS[name][0] / "corpus.jsonl"
    kb = eval_kb(name, cache, embedding)
    marker = kb.folder / "evaluate-build.json"
    want = fingerprint(corpus)
    if marker.exists() and json.loads(marker.read_text(encoding="utf-8"))["fingerprint"] == want:
        return kb
    start = time.perf_counter()
    docs = read_jsonl(corpus)
    print(f"{name}: chunking {len(docs)} documents into {kb.folder}", file=sys.stderr)
    indexer = Indexer(kb, progress=True)
    try:
        for doc in docs:
            text = json.dumps(doc, ensure_ascii=False, sort_keys=True)
            src = fulltext.SourceFile(doc["_id"], str(corpus),
                                      hashlib.sha256(text.encode("utf-8")).hexdigest(),
                                      len(text), 0.0)
            pages = doc_pages(doc)
            chunks = chunking.chunk_pages(doc["_id"], pages, [set()], segment.prose_tokens)
            fulltext.replace_source(indexer.conn, src, "beir-jsonl", pages, chunks)
        chunk_seconds = time.perf_counter() - start
        embedded = indexer.reconcile()  # embeds every pending chunk; kept ones are skipped
        counts = fulltext.counts(indexer.conn)
    finally:
        indexer.close()
    seconds = time.perf_counter() - start
    record = {"fingerprint": want, "counts": counts, "embedded": embedded,
              "chunk_seconds": round(chunk_seconds, 1), "seconds": round(seconds, 1)}
    marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"{name}: built in {seconds:.0f} s ({embedded} chunks embedded, "
          f"{embedded / max(seconds - chunk_seconds, 1e-9):.1f}/s): {counts}", file=sys.stderr)
    return kb


def build_pdfs(name: str, cache: Path, embedding: dict | None = None) -> kbmod.KnowledgeBase:
    """The set's KB through the real pipeline (extract, OCR, chunk, embed); a later run only
    re-indexes what changed, as `ingest.py` does for users."""
    kb = eval_kb(name, cache, embedding)
    marker = kb.folder / "evaluate-build.json"
    want = fingerprint(None)  # ingest skips unchanged files: another chunker must force it
    built = json.loads(marker.read_text(encoding="utf-8")) if marker.exists() else {}
    stale = built.get("fingerprint") != want
    print(f"{name}: indexing {PDF_SETS[name] / 'pdfs'} into {kb.folder}"
          f"{' (new chunker: every file again)' if stale else ''}", file=sys.stderr)
    summary = ingest.ingest(kb, [PDF_SETS[name] / "pdfs"], force=stale, progress=True)
    print(f"{name}: {summary.indexed} indexed, {summary.unchanged} unchanged", file=sys.stderr)
    if not summary.failed:
        marker.write_text(json.dumps({"fingerprint": want}) + "\n", encoding="utf-8")
    return kb


# ----------------------------------------------------------------------------- methods

METHODS: dict[str, dict] = {  # name -> `mode` and SearchSettings fields (see searched);
    # "default" is set per KB (methods)
    "bm25": {"mode": "bm25"},
    "vector": {"mode": "vector"},
    "rrf": {"mode": "auto", "fusion": "rrf"},
    "default": {"mode": "auto"},
    "no titles": {"mode": "auto", "title_weight": 0.0},  # the default without titles.py
    "no units": {"mode": "auto", "unit_weight": 0.0},  # the default without units.py
    "bm25 no units": {"mode": "bm25", "unit_weight": 0.0},
    **{f"mmr {d / 10:.1f}": {"mode": "auto", "diversity": d / 10} for d in (3, 5)},
    "queries +keywords": {"mode": "auto", "variants": "keywords"},  # see keyword_phrasing
    **{f"{fusion} w={w / 10:.1f}": {"mode": "auto", "fusion": fusion, "vector_weight": w / 10}
       for fusion in ("convex", "minmax") for w in range(1, 6)},
}


def methods(kb: kbmod.KnowledgeBase, only: list[str] | None = None) -> dict[str, dict]:
    """METHODS (or the `only` ones; BM25 always, as the baseline), the default being what a
    search of this KB gets: its weight depends on its embedder (search.default_weight)."""
    settings = asdict(kbmod.search_settings(kb))
    name = f"default ({settings['fusion']} {settings['vector_weight']})"
    own = {**METHODS, "default": {"mode": "auto", **settings},
           "no titles": {"mode": "auto", **settings, "title_weight": 0.0},
           **{name: {**settings, **METHODS[name]} for name in METHODS if "units" in name},
           **{name: {"mode": "auto", **settings, **METHODS[name]} for name in METHODS
              if name.startswith(("mmr", "queries"))}}
    return {(name if key == "default" else key): kwargs for key, kwargs in own.items()
            if only is None or key in ("bm25", *only)}


# ----------------------------------------------------------------------------- measure


class CachedEmbeddings:
    """The KB's store, with each query embedded once for all methods (the slow part)."""

    def __init__(self, store: chroma_store.ChromaStore):
        self.store = store
        self.vectors: dict[str, list[float]] = {}

    def embed_query(self, text: str) -> list[float]:
        if text not in self.vectors:
            self.vectors[text] = self.store.embed_query(text)
        return self.vectors[text]

    def __getattr__(self, name: str):
        return getattr(self.store, name)


class KeywordPhrasing:
    """The question as an agent's second phrasing in keywords: its words as written, less
    those whose every token (segment.py's, so Korean particles and Chinese words alike) is
    in more than KEYWORD_SHARE of the KB's chunks. The sets have one phrasing per question
    and no LLM runs here, so this is the second query `queries=[...]` is measured with
    ("queries +keywords")."""

    def __init__(self, searcher: search.Searcher):
        self.searcher = searcher
        self.chunks = searcher.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        self.counts: dict[str, int] = {}

    def _count(self, token: str) -> int:
        if token not in self.counts:
            match = '"' + token.replace('"', '""') + '"'
            self.counts[token] = self.searcher.conn.execute(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (match,)).fetchone()[0]
        return self.counts[token]

    def _rare(self, word: str) -> bool:
        """Whether a token of `word` the chunks hold (a prose chunk its stem, code the word as
        written) is in at most KEYWORD_SHARE of them; a word no chunk holds stays."""
        counts = [n for n in map(self._count, self.searcher.tokenize(word)) if n] or [0]
        return any(n <= KEYWORD_SHARE * self.chunks for n in counts)

    def __call__(self, query: str) -> list[str]:
        words = query.split()
        kept = [w for w in words if self._rare(w)]
        return [" ".join(kept)] if kept and kept != words else []


def searched(searcher: search.Searcher, query: str, top_k: int, method: dict,
             phrasing: Callable[[str], list[str]] | None = None) -> list[hits.Hit]:
    """A method's hits: its `mode` makes the request, with `phrasing`'s second phrasing of
    the question when it has `"variants": "keywords"`; its other fields are the settings."""
    fields = dict(method)
    mode = fields.pop("mode")
    keywords = fields.pop("variants", None) == "keywords"
    queries = tuple(phrasing(query)) if keywords and phrasing else ()
    return searcher.search(SearchRequest(query, top_k, mode, queries=queries),
                           SearchSettings(**fields))


def ranked(searcher: search.Searcher, query: str, method: dict,
           key: Callable[[hits.Hit], str], phrasing: Callable[[str], list[str]]) -> list[str]:
    """Documents (or pages) in the order of their first hit."""
    return list(dict.fromkeys(map(key, searched(searcher, query, HITS, method, phrasing))))


def ndcg(ranking: list[str], relevant: dict[str, int]) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:CUTOFF]))
    ideal = sorted(relevant.values(), reverse=True)[:CUTOFF]
    return dcg / sum(rel / math.log2(i + 2) for i, rel in enumerate(ideal))


def recall(ranking: list[str], relevant: dict[str, int]) -> float:
    return len(set(ranking[:CUTOFF]) & set(relevant)) / len(relevant)


def document_in_top(ranking: list[str], relevant: dict[str, int], n: int = DOC_TOP) -> float:
    """1.0 when a relevant document is among the first n ranked: for page keys
    (`<document>#<page>`) the document of any page, so FinanceBench counts the right filing."""
    wanted = {key.split("#")[0] for key in relevant}
    return float(any(key.split("#")[0] in wanted for key in ranking[:n]))


Score = tuple[float, float, float]  # nDCG@10, recall@10, right document in the top DOC_TOP


def evaluate(searcher: search.Searcher, queries: dict[str, str], qrels: Qrels,
             key: Callable[[hits.Hit], str] = source_key,
             methods: dict[str, dict] = METHODS) -> dict[str, list[Score]]:
    """Per method, the Score of every query, in qrels order."""
    scores: dict[str, list[Score]] = {name: [] for name in methods}
    phrasing = KeywordPhrasing(searcher)
    start = time.perf_counter()
    for n, (qid, relevant) in enumerate(qrels.items(), 1):
        for name, method in methods.items():
            ranking = ranked(searcher, queries[qid], method, key, phrasing)
            scores[name].append((ndcg(ranking, relevant), recall(ranking, relevant),
                                 document_in_top(ranking, relevant)))
        if n % 100 == 0 or n == len(qrels):
            print(f"  {n}/{len(qrels)} queries, {time.perf_counter() - start:.0f} s",
                  file=sys.stderr)
    return scores


def table(scores: dict[str, list[tuple[float, ...]]],
          names: tuple[str, ...] = ("nDCG@10", "R@10")) -> str:
    """Each figure's mean (`names` says what they are), each as a ratio of BM25's, and the
    queries a method scores worse and better than BM25 on the first figure."""
    base = scores["bm25"]
    base_means = [sum(s[i] for s in base) / len(base) for i in range(len(names))]
    rows = [f"{'method':24} " + " ".join(f"{name:>8}" for name in names) + " "
            + " ".join(f"{name + '/bm25':>12}" for name in names)
            + f" {'worse':>6} {'better':>6}"]
    for name, per_query in scores.items():
        means = [sum(s[i] for s in per_query) / len(per_query) for i in range(len(names))]
        worse = sum(s[0] < b[0] - 1e-9 for s, b in zip(per_query, base, strict=True))
        better = sum(s[0] > b[0] + 1e-9 for s, b in zip(per_query, base, strict=True))
        ratios = [mean / b if b else float("nan")
                  for mean, b in zip(means, base_means, strict=True)]
        rows.append(f"{name:24} " + " ".join(f"{mean:8.3f}" for mean in means) + " "
                    + " ".join(f"{ratio:12.3f}" for ratio in ratios)
                    + f" {worse:6d} {better:6d}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="nDCG@10 and recall@10 of linecite's search "
                                     "methods on one eval set, beside BM25.")
    parser.add_argument("set", choices=sorted({**SETS, **PDF_SETS}),
                        help="eval set under ../shared/eval")
    parser.add_argument("--split", choices=("dev", "test", "all"), default="dev",
                        help="dev to tune on, test to report (default: %(default)s)")
    parser.add_argument("--embedding", type=json.loads, default=None,
                        help="the KB's embedding block as JSON, e.g. '{\"provider\": "
                             "\"openai\", \"model\": \"e5\", \"baseUrl\": "
                             "\"http://127.0.0.1:8000\", \"sendInputType\": true}' "
                             "(default: the built-in embedder)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="folder for the built KBs (default: %(default)s)")
    parser.add_argument("--methods", type=lambda text: text.split(","), default=None,
                        help="only these methods, comma-separated (e.g. default,vector; "
                             "bm25 always runs); default: all of them")
    args = parser.parse_args(argv)
    if args.methods and set(args.methods) - set(METHODS):
        parser.error(f"unknown method in --methods; choose from {', '.join(METHODS)}")
    pdf_set = args.set in PDF_SETS
    folder = PDF_SETS[args.set] if pdf_set else SETS[args.set][0]
    if not folder.is_dir():
        print(f"no eval set at {folder}: evaluate.py reads the team's ../shared/eval beside "
              "the repo; put it there first", file=sys.stderr)
        return 2
    kb = (build_pdfs if pdf_set else build)(args.set, args.cache, args.embedding)
    key = page_key if pdf_set else source_key
    if pdf_set:
        queries = {q["financebench_id"]: q["question"]
                   for q in read_jsonl(folder / "questions_subset.jsonl")}
    else:
        queries = {q["_id"]: q["text"] for q in read_jsonl(folder / "queries.jsonl")}
    qrels = {q: docs for q, docs in split_qrels(args.set, args.split).items() if q in queries}
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    store = chroma_store.open_store(kb.folder, kb.id, kb.embedding, kb.chroma_url)
    try:
        cached = CachedEmbeddings(store)
        scores = evaluate(search.Searcher(conn, cached), queries, qrels, key,
                          methods(kb, args.methods))
        counts = fulltext.counts(conn)
    finally:
        store.close()
        conn.close()
    print(f"{args.set} {args.split}: {len(qrels)} queries; KB {counts}")
    print(table(scores, ("nDCG@10", "R@10", f"doc@{DOC_TOP}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
