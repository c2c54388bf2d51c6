"""evaluate.eval_kb rewrites a KB's config.json when the embedder block changes: the rewrite
is atomic (a new file swapped in), so a reader never sees it half-written."""
from __future__ import annotations

import kb as kbmod
from bench import evaluate


def test_eval_kb_swaps_config_json_in_whole(tmp_path):
    # regression: eval_kb wrote config.json in place (truncate, then write); a reader or a
    # crash mid-write saw an empty or partial file. atomic.write_json swaps in a new file, so a
    # handle opened before the rewrite still reads the whole old config.
    embedding = {"provider": "openai", "model": "m1", "baseUrl": "http://127.0.0.1:9/v1"}
    kb = evaluate.eval_kb("set", tmp_path, embedding)
    config = kb.folder / "config.json"
    config.write_text(config.read_text(encoding="utf-8").replace('"m1"', '"stale"'),
                      encoding="utf-8")
    with open(config, encoding="utf-8") as before:
        old_text = before.read()
        before.seek(0)
        evaluate.eval_kb("set", tmp_path, embedding)
        assert before.read() == old_text
    assert '"m1"' in config.read_text(encoding="utf-8")
    assert kbmod.load(tmp_path, kb.id).folder == kb.folder
    assert not list(kb.folder.glob("*.tmp"))


def test_the_keyword_phrasing_leaves_out_words_most_chunks_hold(tmp_path):
    """`queries +keywords` measures several phrasings with the question's rare words: a word
    in more than KEYWORD_SHARE of the chunks goes, the others stay as written (case kept, so
    a file name the question capitalizes still counts)."""
    import fulltext
    import ingest
    import search
    from tests.conftest import bm25_kb

    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(30):
        (folder / f"note{n}.txt").write_text(f"what is in the report of quarter {n}\n",
                                             encoding="utf-8")
    (folder / "adobe.txt").write_text("the Adobe margin report\n", encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "docs")
    ingest.ingest(kb, [folder])
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        phrasing = evaluate.KeywordPhrasing(search.Searcher(conn))
        assert phrasing("What is the Adobe margin in the report?") == ["Adobe margin"]
        assert phrasing("Adobe margin") == []  # nothing left out: no second phrasing
    finally:
        conn.close()
