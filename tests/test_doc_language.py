"""A document's natural language (doc_language.py) and search's `language` filter on it
(issue 28): counted at indexing, backfilled for an index made before it, and narrowing both
legs to the sources written in that language, whatever name an agent gives it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import bm25_kb

import fulltext
from index import doc_language, fulltext_schema
from ingest import ingest
from library import Library
from ranking.filters import NoMatch, parse
from ranking.request import SearchRequest

NOTES = {  # every note names the harbour crane, in its own language
    "ko.txt": "항구 크레인 점검 보고서\n항구의 크레인 harbour crane 점검을 오늘 마쳤습니다.\n",
    "zh.txt": "港口起重机检查报告\n今天完成了港口 harbour crane 起重机的检查。\n",
    "ja.txt": "港のクレーン点検報告\n本日、港の harbour crane クレーンの点検を終えました。\n",
    "en.txt": "Harbour crane report\nThe harbour crane was inspected and the report is on file.\n",
    "fr.txt": "Rapport de la grue\nLa harbour crane du port a été inspectée et le rapport est "
              "prêt.\n",
    "crane.py": "def harbour_crane():\n    # harbour crane check\n    return 1\n",
}


@pytest.mark.parametrize("lines, expected", [
    (["항구의 크레인 점검을 오늘 마쳤습니다."], "ko"),
    (["대한민국 헌법 大韓民國 憲法 대한민국은 민주공화국이다 모든 권력은 국민으로부터"], "ko"),
    (["今天完成了港口起重机的检查。"], "zh"),
    (["本日、港のクレーンの点検を終えました。"], "ja"),
    (["The crane was inspected and the report is on file."], "en"),
    (["La grue du port a été inspectée et le rapport est prêt."], "latin"),
    (["크레인 점검을 마쳤습니다 그리고 보고서를 제출했습니다", "The crane is fine."], "ko,en"),
    (["12 345 6,789", ""], ""),
])
def test_languages_are_told_by_their_scripts(lines, expected):
    assert doc_language.detect(lines) == expected


@pytest.mark.parametrize("query, expected", [
    ("why do modern CPUs waste cycles on mispredicted branches", {"en", "latin"}),
    ("branch prediction penalty", {"en", "latin"}),  # no function word: still Latin script
    ("분기 예측이 틀리면", {"ko"}),
    ("x86 어셈블리 분기", {"ko", "en", "latin"}),  # a mixed question is in both
    ("分支预测", {"zh"}),
    ("分岐予測とは", {"ja"}),
    ("12345 -- 6.7", set()),  # no letters: no language, so no page is foreign to it
])
def test_a_questions_languages_are_every_script_in_it(query, expected):
    # issue 47 (cross-lingual): a question is too short for detect's shares, and "CPU 분기"
    # must not count as Korean only, or English pages would be foreign to it
    assert doc_language.query_languages(query) == expected


def test_a_long_source_is_read_only_as_far_as_its_sample():
    # a confused user's 1 GB log: detect must stop at SAMPLE_CHARS, not read every line
    def endless():
        while True:
            yield "The crane was inspected and the report is on file. " * 20

    assert doc_language.detect(endless()) == "en"


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Library:
    root = tmp_path_factory.mktemp("doclang")
    docs = root / "docs"
    docs.mkdir()
    for name, text in NOTES.items():
        (docs / name).write_text(text, encoding="utf-8")
    assert not ingest(bm25_kb(root / "base", "docs"), [docs]).failed
    return Library(root / "base")


@pytest.mark.parametrize("mode, query", [("auto", "harbour crane"), ("bm25", "harbour crane"),
                                         ("exact", "harbour crane")])
@pytest.mark.parametrize("words, expected", [
    (["ko"], {"docs/ko.txt"}), (["Korean"], {"docs/ko.txt"}), (["한국어"], {"docs/ko.txt"}),
    (["zh"], {"docs/zh.txt"}), (["中文", "ja"], {"docs/zh.txt", "docs/ja.txt"}),
    (["english"], {"docs/en.txt"}), (["python"], {"docs/crane.py"}),
])
def test_the_language_filter_keeps_the_sources_written_in_it(library, mode, query, words,
                                                             expected):
    found = library.search(SearchRequest.checked(query, 10, mode, "docs",
                                                 filters=parse(language=words)))
    assert {hit["source"] for hit in found["hits"]} == expected


def test_list_sources_names_each_language_and_no_match_lists_them(library):
    listed = {s["name"]: s["languages"] for s in library.list_sources("docs", 0, 50)["sources"]}
    assert listed["docs/ko.txt"] == "ko" and listed["docs/fr.txt"] == "latin", listed
    with pytest.raises(NoMatch, match=r"languages .*\bko \(1\).*\bzh \(1\)"):
        library.search(SearchRequest.checked("harbour crane", 10, "bm25", "docs",
                                             filters=parse(language=["ru"])))


def test_an_index_made_before_languages_gets_them_as_a_clean_index_has_them(tmp_path,
                                                                           monkeypatch):
    pages = {name: [text.splitlines()] for name, text in NOTES.items()}

    def build(path: Path) -> None:
        conn = fulltext.connect(path)
        for name, lines in pages.items():
            src = fulltext.SourceFile(name=name, path=name, sha256=name, size=1, mtime=1.0)
            fulltext.replace_source(conn, src, "text", lines, [])
        conn.close()

    with monkeypatch.context() as old_code:
        old_code.setattr(fulltext_schema, "MIGRATIONS", fulltext_schema.MIGRATIONS[:9])
        old_code.setattr(fulltext_schema, "SCHEMA_VERSION", 9)
        build(tmp_path / "old.sqlite3")
    build(tmp_path / "clean.sqlite3")
    seen = []
    for name in ("old.sqlite3", "clean.sqlite3"):
        conn = fulltext.connect(tmp_path / name)  # the old one is migrated here
        seen.append(dict(conn.execute("SELECT name, languages FROM sources").fetchall()))
        conn.close()
    assert seen[0] == seen[1] and seen[1]["zh.txt"] == "zh", seen
