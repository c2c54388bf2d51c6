"""Document-aware ranking: a question that names its document lifts that document's chunks
(titles.py), through the real tokenizer, SQLite index and search, and a topic word or a
caseless script moves nothing."""

import json

import pytest
from conftest import bm25_kb

import fulltext
import ingest
import kb as kbmod
import search
from index import segment
from ranking import titles, units
from ranking.request import SearchRequest, SearchSettings

FILLER = "The company reported its results for the fiscal year in the annual filing."


def test_a_named_source_scores_and_a_topic_word_does_not() -> None:
    sources = ["pdfs/ADOBE_2022_10K.pdf", "pdfs/NIKE_2022_10K.pdf", "pdfs/BESTBUY_2023_10K.pdf"]
    q = "Does Adobe have an improving operating margin as of FY2022?"
    scores = titles.title_scores(q, segment.tokens(q), sources, segment.tokens)
    assert scores == {"pdfs/ADOBE_2022_10K.pdf": 1.0}  # "2022" alone names nothing
    q = "What is Best Buy's revenue in 2023?"  # two words, one file-name word
    assert titles.title_scores(q, segment.tokens(q), sources, segment.tokens) == \
        {"pdfs/BESTBUY_2023_10K.pdf": 1.0}
    q = "what is the operating margin in 2022?"  # no name: the file names say nothing
    assert titles.title_scores(q, segment.tokens(q), sources, segment.tokens) == {}


def test_caseless_scripts_and_number_only_names_never_trigger_it() -> None:
    sources = ["finance - 지방은행 시중은행 전환 가이드.pdf - 3", "10009203", "2024 계획.hwp"]
    for q in ("지방은행이 시중은행으로 전환하려면?", "Is 10009203 about 2024?"):
        assert titles.title_scores(q, segment.tokens(q), sources, segment.tokens) == {}


def make_kb(tmp_path, files: dict[str, str]) -> kbmod.KnowledgeBase:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    kb = bm25_kb(tmp_path / "base", "docs")
    summary = ingest.ingest(kb, [folder])
    assert summary.indexed == len(files), summary
    return kb


def test_the_named_filing_comes_first_among_look_alikes(tmp_path) -> None:
    # ACME's filing matches the question's other words better; the question names Globex
    others = {f"{name}_2022_annual.txt": f"{FILLER}\nStaff and offices of {name.title()}."
              for name in ("INITECH", "UMBRELLA", "HOOLI", "STARK", "WAYNE", "TYRELL")}
    kb = make_kb(tmp_path, {
        **others,
        "ACME_2022_annual.txt": "Revenue by segment and revenue per region: segment revenue "
                                "grew in every region.",
        "GLOBEX_2022_annual.txt": "Net revenue was 4.1 billion.",
    })
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        searcher = search.Searcher(conn)
        q = "What was Globex's revenue by segment and region in 2022?"
        plain = searcher.search(SearchRequest(q, 5, "auto"), SearchSettings(title_weight=0.0))
        named = searcher.search(SearchRequest(q, 5, "auto"))
        legs = searcher.search(SearchRequest(q, 5, "bm25"))
    finally:
        conn.close()
    assert plain[0].source == "docs/ACME_2022_annual.txt"  # the words alone pick ACME
    assert legs[0].source == "docs/ACME_2022_annual.txt"  # bm25 mode is the leg alone
    assert named[0].source == "docs/GLOBEX_2022_annual.txt"
    assert {h.source for h in named} == {h.source for h in plain}  # re-ranked, not added


@pytest.mark.parametrize(("key", "field", "default"), [
    ("titleWeight", "title_weight", titles.TITLE_WEIGHT),
    ("unitWeight", "unit_weight", units.WEIGHT),  # a page's evidence (issue 47)
])
def test_the_kb_sets_a_ranking_weight_and_a_bad_one_is_refused(tmp_path, key, field,
                                                               default) -> None:
    kb = kbmod.open_or_create(tmp_path, "docs")
    config_path = kb.folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    assert getattr(kbmod.search_settings(kb), field) == default
    config_path.write_text(json.dumps({**config, "search": {key: 0}}), encoding="utf-8")
    assert getattr(kbmod.search_settings(kbmod.load(tmp_path, "docs")), field) == 0
    config_path.write_text(json.dumps({**config, "search": {key: 1.5}}), encoding="utf-8")
    with pytest.raises(kbmod.ConfigError, match=f"search.{key}"):
        kbmod.load(tmp_path, "docs")


def test_a_question_naming_nothing_tokenizes_no_file_name() -> None:
    def refuse(text: str) -> list[str]:
        raise AssertionError(f"tokenized {text!r}")
    for q in ("what is the operating margin in 2022?", "지방은행이 시중은행으로 전환하려면?"):
        assert titles.title_scores(q, segment.tokens(q), ["pdfs/ADOBE_2022_10K.pdf"],
                                   refuse) == {}
