"""How close by meaning a right answer is, beside the best passage for an off-topic question.

    python -m bench closeness                       # the built-in embedder's KBs in the cache
    python -m bench closeness --embedding JSON      # another embedder's (as `quality` built)

For each eval set whose KB `python -m bench quality` has built in the cache: every question
of its test split (at most --questions) is embedded once; its right chunk's cosine is the
best cosine among the chunks of its relevant documents (pages), and it is asked of every
other set's KB as an off-topic question, whose best cosine there is what a search finds
"closest" when nothing answers it. Prints percentiles of both, per KB, and the share of
right chunks and off-topic bests at or above each candidate threshold: what
ranking/evidence.py's CLOSE threshold for this embedder is chosen from (docs/quality.md).

Layer: measurement (bench/), on top of the product.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import chroma_store
import fulltext
from bench import evaluate

# -----------------------------------------------------------------------------
SETS = ("scifact", "financebench", "autorag-ko", "cmrc-zh")
QUESTIONS = 150  # questions of each set's test split, the first by id
THRESHOLDS = [t / 100 for t in range(30, 96, 5)]
# -----------------------------------------------------------------------------


def _questions(name: str, limit: int) -> dict[str, tuple[str, list[str]]]:
    """query id -> (question, relevant keys: source names, or `<stem>#<page>`)."""
    if name in evaluate.PDF_SETS:
        folder = evaluate.PDF_SETS[name]
        texts = {q["financebench_id"]: q["question"]
                 for q in evaluate.read_jsonl(folder / "questions_subset.jsonl")}
    else:
        texts = {q["_id"]: q["text"]
                 for q in evaluate.read_jsonl(evaluate.SETS[name][0] / "queries.jsonl")}
    qrels = evaluate.split_qrels(name, "all" if name in evaluate.PDF_SETS else "test")
    chosen = sorted(q for q in qrels if q in texts)[:limit]
    return {q: (texts[q], list(qrels[q])) for q in chosen}


def _chunk_ids(conn, name: str, keys: list[str]) -> list[str]:
    """The chunks of the relevant documents (FinanceBench: of the evidence pages)."""
    ids = []
    for key in keys:
        if name in evaluate.PDF_SETS:
            stem, page = key.rsplit("#", 1)
            rows = conn.execute("SELECT c.chunk_id FROM chunks c JOIN sources s ON s.id ="
                                " c.source_id WHERE s.name LIKE ? AND c.page = ?",
                                (f"%{stem}.pdf", int(page) + 1))
        else:
            rows = conn.execute("SELECT c.chunk_id FROM chunks c JOIN sources s ON s.id ="
                                " c.source_id WHERE s.name = ?", (key,))
        ids += [r[0] for r in rows]
    return ids


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    at = [ordered[min(len(ordered) - 1, int(p * len(ordered)))] for p in (0.05, 0.25, 0.5, 0.75,
                                                                          0.95)]
    return "p5 {:.3f}  p25 {:.3f}  median {:.3f}  p75 {:.3f}  p95 {:.3f}".format(*at)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Right chunks' cosines beside off-topic "
                                     "questions' best cosines, per eval KB.")
    parser.add_argument("--embedding", type=json.loads, default=None,
                        help="the KBs' embedding block as JSON (default: the built-in)")
    parser.add_argument("--cache", type=Path, default=evaluate.DEFAULT_CACHE,
                        help="where `python -m bench quality` built the KBs")
    parser.add_argument("--questions", type=int, default=QUESTIONS,
                        help="questions per set (default: %(default)s)")
    parser.add_argument("--thresholds", type=lambda text: [float(t) for t in text.split(",")],
                        default=THRESHOLDS, help="candidate thresholds, comma-separated "
                        "(default: 0.30 to 0.95 by 0.05; an e5 model's band is narrower)")
    args = parser.parse_args(argv)
    kbs = {}
    for name in SETS:
        kb = evaluate.eval_kb(name, args.cache, args.embedding)
        if (kb.folder / "chroma").is_dir():
            kbs[name] = kb
    if len(kbs) < 2:
        print(f"build at least two sets' KBs in {args.cache} first (python -m bench quality "
              "SET --cache ...)", file=sys.stderr)
        return 2
    stores = {n: chroma_store.open_store(kb.folder, kb.id, kb.embedding) for n, kb in kbs.items()}
    conns = {n: fulltext.connect(kb.fulltext_path, readonly=True) for n, kb in kbs.items()}
    right: list[float] = []
    off: dict[str, list[float]] = {n: [] for n in kbs}
    for name in kbs:
        asked = _questions(name, args.questions)
        print(f"{name}: {len(asked)} questions", file=sys.stderr)
        for text, keys in asked.values():
            vector = stores[name].embed_query(text)
            cosines = stores[name].cosines(vector, _chunk_ids(conns[name], name, keys))
            if cosines:
                right.append(max(cosines.values()))
            for other in kbs:
                if other != name:
                    off[other].append(stores[other].query(vector, 1)[0][1])
    every_off = [c for values in off.values() for c in values]
    print(f"right chunk ({len(right)}):      {_percentiles(right)}")
    for name, values in off.items():
        print(f"off-topic best in {name} ({len(values)}): {_percentiles(values)}")
    print("threshold  right>=  off-topic best>=")
    for t in args.thresholds:
        print(f"{t:.2f}       {sum(c >= t for c in right) / len(right):.3f}    "
              f"{sum(c >= t for c in every_off) / len(every_off):.3f}")
    for store in stores.values():
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
