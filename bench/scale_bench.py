"""`python -m bench scale N`: linecite at N chunks, beside an in-memory rank_bm25 + Chroma baseline.

    python -m bench scale 10000                  # build (once) and measure 10k chunks
    python -m bench scale 100000 --busy --json   # also with one core spun elsewhere

Build (once per N and per version of the code that decides what is stored, cached in
`--base`, default <system temp>/linecite-scale-N): real text from the team's eval sets (ko
AutoRAG, zh CMRC2018, en SciFact in ../shared/eval, interleaved), each pass under new folder
names (`r001/<doc id>` ...) until N chunks, chunked and tokenized as ingest.py does and
written through the project's own write path: fulltext.replace_source, then the indexer's
embed_pending with the built-in embedder's document vectors replaced by random unit vectors
(embedding 100k chunks would take hours; query vectors stay real). A folder is the same
file name, so a repeated document has the same BM25 title words and its tokens are reused.

Measure (each in a new process, so its memory is its own): a fixed sample of the eval sets'
queries (ko, zh, en in turn) through library.Library.search, warm, in bm25, vector, auto and
exact (1-2 character needles and longer ones), and as many quotes through
Library.verify_citation (cut from the KB's chunks, one word changed, or a query: in turn);
the baseline (BM25Okapi over the same tokens, the same Chroma query, RRF k=60) over the same
queries; disk; and a new `server.py` over stdio to its first answer per mode and language.
One table; --json adds one JSON object.

Layer: measurement (bench/), on top of the product; nothing of it imports bench/.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import zip_longest
from pathlib import Path

# -----------------------------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent  # the project folder (bench/ sits in it)
EVAL = REPO.parent / "shared" / "eval"  # the team's eval sets (never copied into the repo)
SETS = {  # language -> BEIR folder (corpus.jsonl, queries.jsonl)
    "ko": EVAL / "ko" / "autorag-allganize-ko" / "beir",
    "zh": EVAL / "zh" / "cmrc2018-dev" / "beir",
    "en": EVAL / "en" / "beir-scifact",
}
KB_ID = "scale"  # the benchmark KB's id under --base
MARKER = "scale-build.json"  # in the KB folder: N, code fingerprint, build figures
FORMAT = 1  # bump when what the build stores changes outside the fingerprinted modules
MIN_CHUNKS, MAX_CHUNKS = 100, 5_000_000  # bounds on N
MAX_QUERIES = 2000  # bound on --queries
TOP_K = 10  # hits asked per search, as an agent would
WARMUP = 10  # untimed queries per mode before timing (models, Chroma, page cache)
CANDIDATES = 50  # chunks per leg in the baseline, as search.CANDIDATES
RRF_K = 60  # the baseline's reciprocal rank fusion constant
SEED = 16  # random stored vectors and the query sample are the same every run
MODES = ("bm25", "vector", "auto", "exact")  # the server's search modes
NO_RANK_BM25 = ("the baseline needs rank_bm25 (BM25Okapi): pip install rank-bm25, or "
                "pip install -r requirements-dev.txt")
# -----------------------------------------------------------------------------


def fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


# ----------------------------------------------------------------------------- inputs


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def interleaved_docs() -> list[dict]:
    """Every corpus document of the three sets, alternating ko, zh, en, so that any N mixes
    the languages (the shorter sets run out first)."""
    per_set = [read_jsonl(folder / "corpus.jsonl") for folder in SETS.values()]
    return [doc for row in zip_longest(*per_set) for doc in row if doc is not None]


def sample_queries(n: int) -> list[dict]:
    """n queries, ko, zh, en in turn, each set's picked by a hash of its ids (fixed)."""
    per_lang = {}
    for lang, folder in SETS.items():
        rows = read_jsonl(folder / "queries.jsonl")
        rows.sort(key=lambda q: hashlib.sha256(f"{SEED}{q['_id']}".encode()).digest())
        per_lang[lang] = [{"lang": lang, "text": q["text"]} for q in rows]
    mixed = [q for row in zip_longest(*per_lang.values()) for q in row if q is not None]
    return mixed[:n]


def needles(query: str, index: int) -> tuple[str, str]:
    """(short, long) exact-mode needles from a query: 1 or 2 characters (in turn) of its
    longest word, and that word itself (at most 12 characters). Short needles are the hard
    case: a trigram index cannot serve them."""
    words = re.findall(r"\w+", query) or [query.strip() or "a"]
    word = max(words, key=len)[:12]
    return word[:1 + index % 2], word


def fingerprint() -> str:
    """Changes when the code that decides the stored lines, chunks and tokens changes. How
    they are indexed is not in it: a KB built by an older schema is migrated when opened, as
    a user's is (a million chunks take hours to build, a migration minutes)."""
    from index import segment
    digest = hashlib.sha256(f"{FORMAT} {segment.signature()}".encode())
    for name in ("chunking.py", "index/segment.py"):
        digest.update((REPO / name).read_bytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- build


def random_vectors_embedder():
    """The built-in embedder (same identity, so the KB is served as a normal one) whose
    document vectors are random unit vectors: the write path without hours of embedding."""
    import numpy as np

    from providers import embedders
    class RandomDocumentVectors(embedders.BuiltinEmbedder):
        rng = np.random.default_rng(SEED)

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            vectors = self.rng.standard_normal((len(texts), self.dimension), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            return list(vectors)

    return RandomDocumentVectors({})


class CachedTokens:
    """segment.tokens, each distinct text tokenized once: a repeated document's chunks get
    the tokens ingest would compute, without running Kiwi and jieba again."""

    def __init__(self) -> None:
        from index import segment
        self.tokens = segment.tokens
        self.seen: dict[str, list[str]] = {}

    def __call__(self, text: str) -> list[str]:
        if text not in self.seen:
            self.seen[text] = self.tokens(text)
        return self.seen[text]


def write_sqlite(conn, n: int) -> tuple[int, float, float]:
    """Exactly n chunks into SQLite through fulltext.replace_source, after those an
    interrupted build wrote (documents go in a fixed order, so it resumes by name); (chunks
    written now, seconds chunking and tokenizing, seconds writing)."""
    import chunking
    import fulltext
    from bench import evaluate

    docs, tokenize = interleaved_docs(), CachedTokens()
    done = {row[0] for row in conn.execute("SELECT name FROM sources")}
    written = resumed = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    made = prepare = write = 0.0
    rounds = 0
    while written < n:
        rounds += 1
        for doc in docs:
            name = f"r{rounds:03d}/{doc['_id']}"
            if name in done:
                continue
            start = time.perf_counter()
            pages = evaluate.doc_pages(doc)
            chunks = chunking.chunk_pages(name, pages, chunking.noise_lines(pages), tokenize)
            chunks = chunks[:n - written]
            made = time.perf_counter()
            prepare += made - start
            src = fulltext.SourceFile(name, f"scale/{name}", hashlib.sha256(
                name.encode()).hexdigest(), len(doc["text"]), 0.0)
            fulltext.replace_source(conn, src, "beir-jsonl", pages, chunks)
            write += time.perf_counter() - made
            written += len(chunks)
            if written >= n:
                break
        print(f"scale: {written:,}/{n:,} chunks in SQLite", file=sys.stderr)
    return written - resumed, prepare, write


def prepared_kb_folder(base: Path, n: int, want: str) -> tuple[Path, dict | None]:
    """The KB folder and its build record when it matches (n, want); an interrupted build of
    the same is kept to resume, a stale benchmark KB is deleted, a folder that is not one is
    refused (never delete what we did not build)."""
    from common.pidlock import PidLock

    folder = base / KB_ID
    marker = folder / MARKER
    holder = PidLock(folder / ".writer.lock", "").holder()  # the indexer's lock
    if holder is not None:
        raise ValueError(f"{folder} is being written by process {holder.get('pid')}; wait "
                         "for that run to finish, or pass another --base")
    if marker.exists():
        record = json.loads(marker.read_text(encoding="utf-8"))
        if record.get("n") == n and record.get("fingerprint") == want:
            return folder, record if record.get("state") == "done" else None
        shutil.rmtree(folder)
    elif folder.exists():
        raise ValueError(f"{folder} exists and is not a scale benchmark KB (no {MARKER}); "
                         "pass another --base")
    return folder, None


def build(base: Path, n: int) -> dict:
    """The KB of n chunks (built unless a matching one is there) and its build record;
    `reused` says which, and `build_s` is 0 for a reused KB."""
    import fulltext
    import kb as kbmod
    from pipeline.indexer import Indexer

    want = fingerprint()
    folder, record = prepared_kb_folder(base, n, want)
    if record is not None:
        return {**record, **migrated(folder), "reused": True, "build_s": 0.0}
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER
    building = {"state": "building", "n": n, "fingerprint": want}
    if marker.exists():  # an interrupted build of the same: its SQLite rates, if it got there
        building = {**json.loads(marker.read_text(encoding="utf-8")), **building}
    marker.write_text(json.dumps(building), encoding="utf-8")
    kb = kbmod.open_or_create(base, KB_ID)
    start = time.perf_counter()
    indexer = Indexer(kb)
    try:
        indexer.store.embedder = random_vectors_embedder()
        written, prepare_s, sqlite_s = write_sqlite(indexer.conn, n)
        if written:  # kept for a resumed build that finds every chunk written
            building.update(resumed_at=n - written,
                            prepare_chunks_per_s=round(written / max(prepare_s, 1e-9), 1),
                            sqlite_chunks_per_s=round(written / max(sqlite_s, 1e-9), 1))
            marker.write_text(json.dumps(building), encoding="utf-8")
        from index import segment
        fulltext.set_meta(indexer.conn, fulltext.SEGMENTER_KEY, segment.signature())
        print("scale: writing vectors through the indexer's embed_pending", file=sys.stderr)
        chroma_start = time.perf_counter()
        embedded = indexer.embed_pending()
        chroma_s = time.perf_counter() - chroma_start
        counts = fulltext.counts(indexer.conn)
    finally:
        indexer.close()
    build_s = time.perf_counter() - start
    record = {"resumed_at": 0, "prepare_chunks_per_s": None, "sqlite_chunks_per_s": None,
              **building, "state": "done", "counts": counts, "build_s": round(build_s, 2),
              "chroma_chunks_per_s": round(embedded / max(chroma_s, 1e-9), 1)}
    marker.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return {**record, "reused": False}


def migrated(folder: Path) -> dict:
    """Open the KB's index writable once, as the indexer's next run would: that migrates one
    built by an older schema and writes any chunks still queued for BM25 (the server opens
    it read-only and does neither); the seconds it took."""
    import fulltext

    start = time.perf_counter()
    conn = fulltext.connect(folder / fulltext.FILENAME)
    try:
        fulltext.write_queued(conn)
    finally:
        conn.close()
    return {"migrate_s": round(time.perf_counter() - start, 2)}


def disk_bytes(base: Path) -> dict:
    folder = base / KB_ID
    sqlite = sum(p.stat().st_size for p in folder.glob("fulltext.sqlite3*"))
    chroma = sum(p.stat().st_size for p in (folder / "chroma").rglob("*") if p.is_file())
    return {"sqlite_bytes": sqlite, "chroma_bytes": chroma}


# ----------------------------------------------------------------------------- child processes


def rss() -> tuple[int | None, str]:
    """This process's resident memory in bytes and how it was read (psutil, else /proc)."""
    try:
        import psutil
    except ImportError:
        status = Path("/proc/self/status")
        if not status.exists():
            return None, "unavailable (pip install psutil)"
        kb = next(int(line.split()[1]) for line in status.read_text(encoding="utf-8")
                  .splitlines() if line.startswith("VmRSS:"))
        return kb * 1024, "/proc"
    return psutil.Process().memory_info().rss, "psutil"


def percentiles(ms: list[float]) -> dict:
    ms = sorted(ms)
    pick = lambda share: round(ms[min(len(ms) - 1, int(share * len(ms)))], 2)  # noqa: E731
    return {"p50": pick(0.5), "p95": pick(0.95)}


def timed(runs: dict) -> dict:
    """p50/p95 in ms of each name's run(item) over its items (name -> (run, items)). The
    runs take turns query by query, so a burst of load elsewhere hits every mode alike."""
    ms: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(max(len(items) for _, items in runs.values())):
        for name, (run, items) in runs.items():
            if i < len(items):
                start = time.perf_counter()
                run(items[i])
                ms[name].append(1000 * (time.perf_counter() - start))
    return {name: percentiles(values) for name, values in ms.items()}


def citation_quotes(base: Path, queries: list[dict]) -> list[dict]:
    """verify_citation's quotes over the benchmark KB, fixed by SEED, one per query, in
    turn: 60-300 characters cut from a random chunk and cited at its source and page (found
    verbatim), the same with one word written backwards (close), and the query itself (a
    question of the eval sets: in no document)."""
    import random

    import fulltext

    rng = random.Random(SEED)
    conn = fulltext.connect(base / KB_ID / fulltext.FILENAME, readonly=True)
    last = conn.execute("SELECT max(id) FROM chunks").fetchone()[0]
    quotes = []
    for i, query in enumerate(queries):
        if i % 3 == 2:
            quotes.append({"text": query["text"]})
            continue
        row = None
        while row is None or len(row[0]) < 60:
            row = conn.execute("SELECT c.text, s.name, c.page FROM chunks c JOIN sources s ON"
                               " s.id = c.source_id WHERE c.id = ?",
                               (rng.randint(1, last),)).fetchone()
        start = rng.randrange(len(row[0]) - 59)
        text = row[0][start:start + rng.randint(60, 300)]
        words = list(re.finditer(r"[^\W\d_]{4,}", text))
        if i % 3 == 1 and words:
            word = rng.choice(words)
            text = text[:word.start()] + word.group()[::-1] + text[word.end():]
        quotes.append({"text": text, "source": row[1], "page": row[2]})
    conn.close()
    return quotes


def measure_linecite(base: Path, queries: list[dict]) -> dict:
    """Every mode through Library.search (what the `search` tool calls) and verify_citation,
    warm; then RSS."""
    import library
    from ranking.request import SearchRequest

    lib = library.Library(base)
    texts = [q["text"] for q in queries]
    short, long = zip(*(needles(t, i) for i, t in enumerate(texts)), strict=True)

    def searcher(mode: str):
        """One query's search in `mode`, as the tool makes it."""
        return lambda q: lib.search(SearchRequest.checked(q, TOP_K, mode, KB_ID))

    runs = {mode: (searcher(mode), texts) for mode in ("bm25", "vector", "auto")}
    runs["exact_short"] = (searcher("exact"), list(short))
    runs["exact_long"] = (searcher("exact"), list(long))
    runs["verify"] = (lambda q: lib.verify_citation([q], KB_ID), citation_quotes(base, queries))
    for run, items in runs.values():
        for item in items[:WARMUP]:
            run(item)
    out = timed(runs)
    out["rss"], out["rss_how"] = rss()
    lib.close()
    out["pruned"] = pruned_as_unpruned(base, texts)
    return out


def pruned_as_unpruned(base: Path, texts: list[str]) -> dict:
    """How many queries' BM25 top CANDIDATES (MaxScore, what the search uses) are the list
    scoring every match gives, and the median share of matching chunks it fully scored."""
    import fulltext
    from index import bm25, segment
    conn = fulltext.connect(base / KB_ID / fulltext.FILENAME, readonly=True)
    same, shares = 0, []
    for text in texts:
        ranking = bm25.scores(conn, segment.tokens(text))
        every = ranking.reaching(None) if isinstance(ranking, bm25.Ranking) else ranking
        same += ranking.top(CANDIDATES) == every.top(CANDIDATES)
        if len(every):
            shares.append(len(ranking.reaching(CANDIDATES)) / len(every)
                          if isinstance(ranking, bm25.Ranking) else 1.0)
    conn.close()
    return {"same": same, "of": len(texts),
            "scored_share": round(float(sorted(shares)[len(shares) // 2]), 4) if shares else None}


def measure_baseline(base: Path, queries: list[dict], spawned: float) -> dict:
    """BM25Okapi over the chunks' own tokens in memory, the same Chroma query, RRF; the
    time from this process's spawn to its first fused answer, and BM25Okapi's memory."""
    import numpy as np

    import chroma_store
    import fulltext
    from index import segment
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        raise SystemExit(NO_RANK_BM25) from None
    kb_dir = base / KB_ID
    conn = fulltext.connect(kb_dir / fulltext.FILENAME, readonly=True)
    store = chroma_store.open_store(kb_dir, KB_ID, None, readonly=True)
    before, how = rss()
    ids, tokens = zip(*conn.execute("SELECT chunk_id, tokens FROM chunks ORDER BY id"),
                      strict=True)
    bm25 = BM25Okapi([t.split() for t in tokens])
    del tokens
    after, _ = rss()

    def bm25_top(query: str) -> list[str]:
        scores = bm25.get_scores(segment.tokens(query))
        best = np.argpartition(-scores, min(CANDIDATES, len(ids) - 1))[:CANDIDATES]
        return [ids[i] for i in best[np.argsort(-scores[best])] if scores[i] > 0]

    def vector_top(query: str) -> list[str]:
        return [cid for cid, _ in store.query(store.embed_query(query), CANDIDATES)]

    def rrf(query: str) -> list[str]:
        fused: dict[str, float] = {}
        for ranking in (bm25_top(query), vector_top(query)):
            for rank, cid in enumerate(ranking, 1):
                fused[cid] = fused.get(cid, 0.0) + 1.0 / (RRF_K + rank)
        return sorted(fused, key=fused.__getitem__, reverse=True)[:TOP_K]

    texts = [q["text"] for q in queries]
    rrf(texts[0])
    first_answer = time.time() - spawned
    for query in texts[:WARMUP]:
        rrf(query)
    chunk_texts = [r[0].lower() for r in conn.execute("SELECT text FROM chunks")]  # a scan
    short, long = zip(*(needles(t, i) for i, t in enumerate(texts)), strict=True)

    def scan(needle: str) -> list[int]:
        return [i for i, text in enumerate(chunk_texts) if needle.lower() in text]

    out = timed({"bm25": (bm25_top, texts), "vector": (vector_top, texts),
                 "auto": (rrf, texts), "exact_short": (scan, list(short)),
                 "exact_long": (scan, list(long))})
    out.update({"first_answer_s": round(first_answer, 2), "rss_how": how,
                "bm25okapi_bytes": None if before is None else after - before})
    store.close()
    conn.close()
    return out


def run_child(kind: str, base: Path, queries_file: Path) -> dict:
    """Run one measurement in a new Python process; its JSON answer."""
    args = [sys.executable, "-m", "bench.scale_bench", kind, str(base), str(queries_file),
            repr(time.time())]
    done = subprocess.run(args, stdout=subprocess.PIPE, text=True, encoding="utf-8",
                          cwd=str(REPO), check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the {kind} measurement failed (exit {done.returncode}); see above")
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------- cold start


def first_answers(base: Path, queries: list[dict], modes: list[str]) -> dict[str, float]:
    """Seconds from spawning `python server.py` (stdio) to its first search answer, per
    mode and language, each in a new process."""
    import anyio
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    drop = ("LINECITE_HOME", "LINECITE_TRANSPORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    by_lang = {q["lang"]: q["text"] for q in reversed(queries)}

    async def once(mode: str, query: str) -> float:
        start = time.perf_counter()
        transport = StdioTransport(sys.executable, [str(REPO / "server.py"), "--base-path",
                                                    str(base)], env=env, cwd=str(REPO),
                                   keep_alive=False, log_file=base / "scale-server.log")
        async with Client(transport, timeout=300) as client:
            if mode == "exact":
                query = needles(query, 1)[1]
            result = await client.call_tool("search", {"query": query, "search_mode": mode,
                                                       "kb_id": KB_ID})
            seconds = time.perf_counter() - start
        if result.is_error:
            raise RuntimeError(f"server.py answered {mode} {query!r} with an error")
        return seconds

    return {f"{mode} {lang}": round(anyio.run(once, mode, query), 2)
            for mode in modes for lang, query in sorted(by_lang.items())}


# ----------------------------------------------------------------------------- the run


def measure_all(base: Path, queries_file: Path, queries: list[dict],
                cold_modes: list[str]) -> dict:
    out = {}
    for name, step in (("linecite", lambda: run_child("linecite", base, queries_file)),
                       ("baseline", lambda: run_child("baseline", base, queries_file)),
                       ("cold", lambda: first_answers(base, queries, cold_modes)
                        if cold_modes else {})):
        start = time.perf_counter()
        out[name] = step()
        print(f"scale: {name} measured in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return out


def flat(figures: dict) -> dict:
    """The JSON figures of one measurement (idle or busy)."""
    mine, theirs, cold = figures["linecite"], figures["baseline"], figures["cold"]
    out = {f"{mode}_{p}_ms": mine[mode][p] for mode in ("bm25", "vector", "auto")
           for p in ("p50", "p95")}
    out.update({f"exact_{kind}_{p}_ms": mine[f"exact_{kind}"][p] for kind in ("short", "long")
                for p in ("p50", "p95")})
    out["exact_p95_ms"] = max(mine["exact_short"]["p95"], mine["exact_long"]["p95"])
    out.update({f"verify_{p}_ms": mine["verify"][p] for p in ("p50", "p95")})
    out.update({f"baseline_{mode}_{p}_ms": theirs[mode][p] for mode in ("bm25", "vector", "auto")
                for p in ("p50", "p95")})
    out.update({f"baseline_exact_{kind}_{p}_ms": theirs[f"exact_{kind}"][p]
                for kind in ("short", "long") for p in ("p50", "p95")})
    out["baseline_exact_p95_ms"] = max(theirs["exact_short"]["p95"], theirs["exact_long"]["p95"])
    out["first_answer_s"] = max(cold.values()) if cold else None
    out["first_answer_by_mode_lang_s"] = cold
    out["baseline_first_answer_s"] = theirs["first_answer_s"]
    out["server_rss_mb"] = round(mine["rss"] / 2**20, 1) if mine["rss"] else None
    out["baseline_bm25okapi_mb"] = (round(theirs["bm25okapi_bytes"] / 2**20, 1)
                                    if theirs["bm25okapi_bytes"] is not None else None)
    out["memory_read_with"] = mine["rss_how"]
    out["bm25_topk_as_unpruned"] = f"{mine['pruned']['same']}/{mine['pruned']['of']}"
    out["bm25_scored_share"] = mine["pruned"]["scored_share"]
    return out


def run(n: int, base: Path | None, n_queries: int, busy: bool, as_json: bool,
        cold_modes: list[str], chroma_url: str | None = None) -> int:
    """Build (or reuse), measure, print the table (and the JSON object last). With
    chroma_url every step (build, children, servers) keeps its vectors in that Chroma server;
    without, embedded, whatever LINECITE_CHROMA_URL says."""
    if not MIN_CHUNKS <= n <= MAX_CHUNKS:
        return fail(f"N must be {MIN_CHUNKS}-{MAX_CHUNKS:,} chunks, got {n:,}")
    if not 1 <= n_queries <= MAX_QUERIES:
        return fail(f"--queries must be 1-{MAX_QUERIES}, got {n_queries}")
    bad = [m for m in cold_modes if m not in MODES]
    if bad:
        return fail(f"--cold takes modes from {', '.join(MODES)} (comma-separated), got {bad}")
    if importlib.util.find_spec("rank_bm25") is None:
        return fail(NO_RANK_BM25)
    missing = [str(f) for f in SETS.values() if not (f / "corpus.jsonl").exists()]
    if missing:
        return fail(f"no eval set at {', '.join(missing)}: the scale benchmark reads the "
                    "team's ../shared/eval beside the repo; put it there first")
    base = base or Path(tempfile.gettempdir()) / f"linecite-scale-{n}"
    if chroma_url:
        os.environ["LINECITE_CHROMA_URL"] = chroma_url  # kb.py reads it; children inherit it
    else:
        os.environ.pop("LINECITE_CHROMA_URL", None)
    try:
        record = build(base, n)
    except ValueError as err:
        return fail(str(err))
    queries = sample_queries(n_queries)
    queries_file = base / "scale-queries.json"
    queries_file.write_text(json.dumps(queries, ensure_ascii=False), encoding="utf-8")
    runs = {"idle": measure_all(base, queries_file, queries, cold_modes)}
    if busy:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            runs["busy"] = measure_all(base, queries_file, queries, cold_modes)
        finally:
            spinner.kill()
            spinner.wait()
    disk = disk_bytes(base)
    figures = {name: flat(f) for name, f in runs.items()}
    print(table(n, base, record, disk, queries, figures, chroma_url))
    if as_json:
        chunks = record["counts"]["chunks"]
        summary = {"n": n, "chunks": chunks, "base": str(base), "queries": len(queries),
                   "vectors": chroma_url or "embedded",
                   "build_reused": record["reused"], "build_s": record["build_s"],
                   "resumed_at": record.get("resumed_at", 0),
                   "migrate_s": record.get("migrate_s", 0.0),
                   **{k: record[k] for k in ("prepare_chunks_per_s", "sqlite_chunks_per_s",
                                             "chroma_chunks_per_s")},
                   **disk, "bytes_per_chunk": round(sum(disk.values()) / max(chunks, 1)),
                   **figures["idle"]}
        if busy:
            summary["busy"] = figures["busy"]
        print(json.dumps(summary, ensure_ascii=False))
    return 0


# ----------------------------------------------------------------------------- the table


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else ""


def table(n: int, base: Path, record: dict, disk: dict, queries: list[dict],
          figures: dict[str, dict], chroma_url: str | None) -> str:
    chunks = record["counts"]["chunks"]
    langs = {lang: sum(q["lang"] == lang for q in queries) for lang in SETS}
    built = (f"reused, built earlier in {_earlier(base)} s" if record["reused"]
             else f"built in {record['build_s']:,.0f} s")
    where = f"in the Chroma server at {chroma_url}" if chroma_url else "embedded"
    lines = [f"scale: {chunks:,} chunks in {base / KB_ID} ({built}); stored vectors ({where}) "
             "are random unit vectors, query vectors real (built-in USE)",
             f"  {len(queries)} queries ({', '.join(f'{v} {k}' for k, v in langs.items())}), "
             f"top_k {TOP_K}, warm; memory read with {figures['idle']['memory_read_with']}",
             f"  write rates: chunk+tokenize {_rate(record['prepare_chunks_per_s'])}, SQLite "
             f"{_rate(record['sqlite_chunks_per_s'])}, Chroma (embed_pending, random vectors) "
             f"{_rate(record['chroma_chunks_per_s'])} chunks/s"]
    head = f"| {f'{chunks:,} chunks':28} |"
    for name in figures:
        suffix = "" if name == "idle" else f" ({name})"
        head += f" {'linecite' + suffix:22} | {'baseline' + suffix:26} | ratio |"
    lines += [head, "|" + "---|" * (1 + 3 * len(figures))]
    rows = [("bm25 p50 / p95 ms", "bm25", "bm25", ""),
            ("vector p50 / p95 ms", "vector", "vector", ""),
            ("auto p50 / p95 ms", "auto", "auto", " (RRF)"),
            ("exact 1-2 chars p50 / p95 ms", "exact_short", "exact_short", " (scan)"),
            ("exact 3+ chars p50 / p95 ms", "exact_long", "exact_long", " (scan)")]
    for label, mine, theirs, note in rows:
        row = f"| {label:28} |"
        for f in figures.values():
            a = (f[f"{mine}_p50_ms"], f[f"{mine}_p95_ms"])
            b = (f[f"baseline_{theirs}_p50_ms"], f[f"baseline_{theirs}_p95_ms"])
            row += (f" {a[0]:8.1f} / {a[1]:8.1f}    | {b[0]:8.1f} / {b[1]:8.1f}{note:8} |"
                    f" {ratio(a[0], b[0]):5} |")
        lines.append(row)
    row_mem, row_cold = f"| {'memory after warm-up':28} |", f"| {'new process to 1st answer':28} |"
    for f in figures.values():
        rss_mb, extra = f["server_rss_mb"], f["baseline_bm25okapi_mb"]
        row_mem += f" {_mb(rss_mb):22} | {'+' + _mb(extra) + ' BM25Okapi':26} |       |"
        worst = max(f["first_answer_by_mode_lang_s"].items(), key=lambda kv: kv[1],
                    default=("", None))
        mine = f"{worst[1]:.2f} s ({worst[0]})" if worst[1] else "not measured"
        row_cold += (f" {mine:22} | {f['baseline_first_answer_s']:8.2f} s{'':16} |"
                     f" {ratio(worst[1], f['baseline_first_answer_s']):5} |")
    lines += [row_mem, row_cold]
    per_chunk = sum(disk.values()) / max(chunks, 1)
    lines.append(f"| {'disk':28} | SQLite {disk['sqlite_bytes'] / 2**20:,.0f} MB, Chroma "
                 f"{disk['chroma_bytes'] / 2**20:,.0f} MB, {per_chunk / 1024:.1f} KB a chunk |")
    for name, f in figures.items():
        lines.append(f"  verify_citation ({name}), one quote a call (in turn: verbatim, a word "
                     f"changed, in no document): p50 {f['verify_p50_ms']:.1f} ms, p95 "
                     f"{f['verify_p95_ms']:.1f} ms")
        lines.append(f"  BM25 top {CANDIDATES} by MaxScore ({name}): the list scoring every "
                     f"match gives for {f['bm25_topk_as_unpruned']} queries; median share of "
                     f"matching chunks fully scored {f['bm25_scored_share']}")
        cold = ", ".join(f"{k} {v:.2f}" for k, v in f["first_answer_by_mode_lang_s"].items())
        if cold:
            lines.append(f"  first answer by mode and language ({name}), s: {cold}")
    return "\n".join(lines)


def _rate(value: float | None) -> str:
    return "n/a" if not value else f"{value:,.0f}"


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} MB"


def _earlier(base: Path) -> str:
    record = json.loads((base / KB_ID / MARKER).read_text(encoding="utf-8"))
    return f"{record['build_s']:,.0f}"


def child_main(argv: list[str]) -> int:
    """`python -m bench.scale_bench linecite|baseline BASE QUERIES_JSON SPAWN_TIME`: one JSON
    line (run_child starts it)."""
    kind, base, queries_file, spawned = argv
    queries = json.loads(Path(queries_file).read_text(encoding="utf-8"))
    if kind == "linecite":
        out = measure_linecite(Path(base), queries)
    else:
        out = measure_baseline(Path(base), queries, float(spawned))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
