"""BM25 from FTS5 ranks like the textbook rank_bm25.BM25Okapi over the same tokens."""

import json
import math

import pytest
from conftest import shared_path
from rank_bm25 import BM25Okapi

import fulltext
from index import segment

N_DOCS = 400
N_QUERIES = 60


def load_beir(folder, n_docs: int, n_queries: int) -> tuple[list[dict], list[str]]:
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        docs = [json.loads(line) for _, line in zip(range(n_docs), handle, strict=False)]
    with (folder / "queries.jsonl").open(encoding="utf-8") as handle:
        queries = [json.loads(line)["text"] for _, line in zip(range(n_queries), handle,
                                                                 strict=False)]
    return docs, queries


def index_whole_documents(conn, docs: list[dict]) -> list[list[str]]:
    """Each document is one source with one chunk, so both scorers see the same units."""
    tokenized = []
    for doc in docs:
        text = f"{doc.get('title', '')}\n{doc['text']}".strip()
        toks = segment.tokens(text)
        tokenized.append(toks)
        chunk = fulltext.Chunk(doc["_id"], 1, 1, 1, text, " ".join(toks))
        fulltext.replace_source(conn, fulltext.SourceFile(doc["_id"], "", "", 0, 0.0), "beir",
                                [text.split("\n")], [chunk])
    return tokenized


@pytest.mark.slow
@pytest.mark.parametrize("corpus", [("zh", "cmrc2018-dev"), ("ko", "autorag-allganize-ko"),
                                    ("en", "beir-scifact")])
def test_fts5_bm25_matches_rank_bm25_top10(tmp_path, corpus):
    folder = shared_path("eval", *corpus)
    beir = folder / "beir" if (folder / "beir").is_dir() else folder
    docs, queries = load_beir(beir, N_DOCS, N_QUERIES)
    conn = fulltext.connect(tmp_path / fulltext.FILENAME)
    tokenized = index_whole_documents(conn, docs)
    # FTS5's bm25() uses k1=1.2, b=0.75 and floors negative idf; set the reference to match
    reference = BM25Okapi(tokenized, k1=1.2, b=0.75, epsilon=0.0)
    overlaps, agreements = [], 0
    for query in queries:
        q = list(dict.fromkeys(segment.tokens(query)))  # FTS5 ORs distinct tokens
        scores = reference.get_scores(q)
        ours = fulltext.bm25_search(conn, q, 10)
        want = [docs[i]["_id"] for i in sorted(range(len(docs)), key=lambda i: -scores[i])[:10]
                if scores[i] > 0]
        got = [row["source"] for row, _ in ours]
        if not want:
            continue
        overlaps.append(len(set(want) & set(got)) / len(want))
        agreements += got[0] == want[0]
        top = docs.index(next(d for d in docs if d["_id"] == got[0]))
        assert math.isclose(ours[0][1], scores[top], rel_tol=0.05, abs_tol=1e-3) or \
            scores[top] <= 0  # the same score for the same document
    conn.close()
    assert len(overlaps) >= N_QUERIES // 2
    assert sum(overlaps) / len(overlaps) >= 0.9
    assert agreements / len(overlaps) >= 0.9
